"""Issue 21's scenarios end to end: the real CLI against the sandbox over HTTPS.

A committed copy of the reference repo, with Route documents for checkout's hostname
(the default seed holds another client's route on it: ``shop-status``, priority 500).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo, repo
from tests.routes import documents

__all__ = ["repo"]

pytestmark = pytest.mark.integration

HOST = "shop.sandbox.test"
NORMAL = documents.web_route(HOST)
ACME = documents.acme_route(HOST)


def api(priority: int) -> str:
    return (NORMAL.replace("name: shop-web", "name: shop-api")
            .replace(f"  hostname: {HOST}\n", f"  hostname: {HOST}\n  routeRef: api\n")
            .replace("  ports: [80, 443]\n", "  ports: [443]\n  path: /api/\n")
            .replace("priority: 100", f"priority: {priority}"))


def write_routes(repo: Repo, *documents: str) -> None:
    path: Path = repo.path / "routes" / "shop.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("---\n".join(documents), encoding="utf-8")
    repo.commit("routes")


def route_writes(sandbox: Sandbox) -> list[dict[str, object]]:
    return [a for a in sandbox.audit() if a["method"] == "syncGatewayClientRoute"]


def test_same_priority_overlap_is_no_go_with_an_example_then_raising_one_is_go(
        repo: Repo) -> None:
    write_routes(repo, NORMAL, api(100))
    plan = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert plan.code == 3, plan.out + plan.err
    assert "route_ambiguous" in plan.out or "both match" in plan.out, plan.out
    assert "'shop-web'" in plan.out and "'shop-api'" in plan.out
    assert "https://shop.sandbox.test/api/ (tcp)" in plan.out
    write_routes(repo, NORMAL, api(150))
    plan = repo.run("plan", str(repo.path), "--detailed-exitcode", "--format", "json")
    assert plan.code == 2, plan.out + plan.err
    document = json.loads(plan.out)
    assert document["verdict"] == "go"
    assert not [b for b in document["blockers"] if b["code"].startswith("route")]


def test_a_narrow_route_under_a_broader_higher_one_is_shadowed(repo: Repo) -> None:
    write_routes(repo, NORMAL, api(50))
    plan = repo.run("plan", str(repo.path), "--detailed-exitcode", "--format", "json")
    assert plan.code == 3, plan.out + plan.err
    [blocker] = [b for b in json.loads(plan.out)["blockers"] if b["code"] == "route_shadowed"]
    assert "'shop-api'" in blocker["message"] and "'shop-web'" in blocker["message"]


def test_http01_and_normal_sync_independently_the_replay_sends_nothing_and_the_other_clients_route_is_untouched(  # noqa: E501
        repo: Repo, sandbox: Sandbox) -> None:
    write_routes(repo, NORMAL, ACME)
    first = repo.run("apply", str(repo.path), "--auto-approve")
    assert first.code == Exit.OK, first.out + first.err
    assert "Converged" in first.out
    assert "digests, egress and gateway routes" in first.out, first.out
    sent = route_writes(sandbox)
    keys = sorted(json.dumps(w["ownership"], sort_keys=True) for w in sent)
    assert keys == sorted(json.dumps(k, sort_keys=True) for k in (
        {"appId": "checkout", "hostname": HOST},
        {"appId": "checkout", "hostname": HOST, "routeRef": "acme"}))
    for cluster, apps in sandbox.cluster_status().items():
        assert "checkout" in apps, cluster
    again = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert again.code == Exit.OK, again.out + again.err
    replay = repo.run("apply", str(repo.path), "--auto-approve")
    assert replay.code == Exit.OK and "No changes" in replay.out, replay.out + replay.err
    assert len(route_writes(sandbox)) == len(sent), "the replay sent a route write"
    status_key = {"appId": "status-page", "hostname": HOST, "routeRef": "status"}
    assert all(w["ownership"] != status_key for w in route_writes(sandbox))


def prune_routes(repo: Repo) -> None:
    """The repo's Settings say ``policy.routes.prune: true``."""
    settings = json.loads((repo.path / "settings.yaml").read_text())
    settings.setdefault("policy", {})["routes"] = {"prune": True}
    (repo.path / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")


def test_prune_deletes_only_our_undeclared_route_never_the_other_clients(
        repo: Repo, sandbox: Sandbox) -> None:
    write_routes(repo, NORMAL, ACME)
    assert repo.run("apply", str(repo.path), "--auto-approve").code == Exit.OK
    prune_routes(repo)
    write_routes(repo, NORMAL)
    plan = repo.run("plan", str(repo.path), "--format", "json")
    document = json.loads(plan.out)
    deletes = [c for c in document["changes"] if c["actions"] == ["delete_route"]]
    assert [c["route_before"]["name"] for c in deletes] == ["shop-acme"], plan.out
    done = repo.run("apply", str(repo.path), "--auto-approve")
    assert done.code == Exit.OK, done.out + done.err
    deleted = [w for w in route_writes(sandbox) if w.get("delete")]
    assert [w["ownership"] for w in deleted] == [
        {"appId": "checkout", "hostname": HOST, "routeRef": "acme"}]


def test_one_cluster_keeping_the_old_route_fails_the_gate_naming_it(
        repo: Repo, sandbox: Sandbox) -> None:
    write_routes(repo, NORMAL, ACME)
    assert repo.run("apply", str(repo.path), "--auto-approve").code == Exit.OK
    sandbox.fault("sn2", "route-stuck")
    write_routes(repo, NORMAL.replace("priority: 100", "priority: 120")
                 .replace("port: 8080", "port: 9090"), ACME)
    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.NOT_CONVERGED, applied.out + applied.err
    assert "Converged" not in applied.out
    text = applied.out + applied.err
    assert "sn2" in text and "priority 100" in text, text
    # sn2 runs the pinned digest: said once, with what is wrong (the old route).
    [said] = [line for line in applied.err.splitlines() if "sn2: DIVERGED" in line]
    assert "runs the pinned sha256:" in said and "should run" not in said, said
    gate = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert gate.code == 2, gate.out  # the judge does not prove sn2: never "no changes"


def test_a_cluster_keeping_a_pruned_route_fails_the_gate_naming_it_until_it_drops_it(
        repo: Repo, sandbox: Sandbox) -> None:
    """A deleted route converges only when every expected cluster reports it absent: sn2
    keeps its route table (``route-stuck``), so the gate names sn2 and the route it still
    serves, apply never says Converged, and every later plan and the gate fail on it
    until sn2 drops it -- though the control plane no longer lists the route."""
    write_routes(repo, NORMAL, ACME)
    assert repo.run("apply", str(repo.path), "--auto-approve").code == Exit.OK
    prune_routes(repo)
    write_routes(repo, NORMAL)
    sandbox.fault("sn2", "route-stuck")
    applied = repo.run("apply", str(repo.path), "--auto-approve")
    text = applied.out + applied.err
    assert applied.code == Exit.NOT_CONVERGED, text
    assert "Converged" not in applied.out
    assert [w["ownership"] for w in route_writes(sandbox) if w.get("delete")] == [
        {"appId": "checkout", "hostname": HOST, "routeRef": "acme"}]
    assert "sn2" in text and "deleted route 'shop-acme'" in text, text
    for other in ("sn1", "sn3"):
        assert f"{other}: still serves" not in text, text

    # The control plane no longer lists the route: no change is left to make, yet the
    # judge does not prove sn2, so the plan is never "no changes".
    gate = repo.run("plan", str(repo.path), "--detailed-exitcode", "--format", "json")
    assert gate.code == 2, gate.out + gate.err
    document = json.loads(gate.out)
    assert not document["changes"], gate.out
    [proof] = [p for p in document["proofs"] if p["service"] == "checkout"]
    [kept] = [c for c in proof["clusters"] if c["proof"] != "converged"]
    assert kept["cluster"] == "sn2" and kept["why"] == "route_not_in_effect", kept
    assert "'shop-acme'" in kept["detail"], kept

    sandbox.fault("sn2", "route-stuck", on=False)
    sandbox.wait_settled()
    settled = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert settled.code == Exit.OK, settled.out + settled.err
