"""Proof, not hope: the scenarios where an earlier apply claimed what it could not prove.

Each test drives real sandbox processes over real HTTP and TLS with the real CLI, and
asserts what the user sees (exit code, the clusters and digests named) and what the
control plane's audit log proves was, or was not, sent. Each scenario was reproduced
against the old core: "Converged" or "No changes" over a cluster on another digest, a
saved plan applied to clusters or a control plane it was not reviewed for, an edited
plan file executed, an ignored file's grant sent, a loser of a compare-and-swap gating
on a digest that will never roll out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.exitcodes import Exit
from reconciler.render import jsonplan
from reconciler.render.jsonplan import content_digest
from reconciler.sandbox import cluster as cluster_mod
from reconciler.sandbox import seeding, store
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell.journal import Journal
from tests.apply.test_greenfield_e2e import without_ledger
from tests.e2e_repo import PROJECT, Repo, git
from tests.plan.builders import digest

pytestmark = pytest.mark.integration

WRITES = {"promoteServiceImageRelease", "rollbackServiceImageRelease", "setServiceEgress",
          "configureServiceDeploymentMachineUser"}
OLD_CHECKOUT = digest("checkout", "v2.3.0")
NEW_CHECKOUT = digest("checkout", "v2.4.0")
# ledger is the reference repo's new service (issue 12): sn2 down blocks it too.
SERVICES = ["catalog", "checkout", "ledger", "notifications", "search"]


def writes(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [a for a in sandbox.audit() if a["method"] in WRITES]


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def tamper_runtime(sandbox: Sandbox, cluster: str, app: str, **fields: object) -> None:
    """Make ``cluster`` report something else for ``app`` (None drops the field): stop
    it, rewrite the runtime record it keeps, start it again. Its deployer sees nothing
    to do (the record still says it applied the current rollout), so the lie persists."""
    sandbox.kill(cluster)
    path = cluster_mod.cluster_dir(sandbox.state_dir, cluster) / "runtime.json"
    data = json.loads(path.read_text())
    record = data["apps"][app]
    for key, value in fields.items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    path.write_text(json.dumps(data, sort_keys=True))
    sandbox.restart(cluster)
    runtime = sandbox.cluster_status()[cluster][app]
    for key, value in fields.items():
        assert runtime.get(key) == value, f"{cluster} did not keep the tampered {key}"


def retarget(sandbox: Sandbox, clusters: list[str]) -> None:
    """The control plane's rollouts target ``clusters`` from now on: reseed the default
    seed (same generations, rollout ids and egress revisions) with that cluster list."""
    conn = store.connect(sandbox.state_dir)
    try:
        with store.transaction(conn):
            store.set_meta(conn, "clusters", json.dumps(clusters))
            seeding.apply_seed(conn, seeding.DEFAULT_SEED)
    finally:
        conn.close()


def gate_failure_line(err: str, service: str, cluster: str) -> str:
    lines = [x for x in err.splitlines() if f"{service} on {cluster}" in x]
    assert lines, f"stderr names no '{service} on {cluster}':\n{err}"
    return lines[0]


def add_checkout_egress(repo: Repo, host: str) -> None:
    path = repo.path / "services" / "checkout.yaml"
    path.write_text(path.read_text() + f"  - host: {host}\n")
    repo.commit(f"checkout may reach {host}")


# -- 1. an egress change over a cluster that runs another digest ---------------------------

def test_an_egress_change_never_claims_convergence_over_a_cluster_on_another_digest(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=5)
    sandbox.fault("sn1", "stuck")
    first = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert first.code == Exit.NOT_CONVERGED, first.out + first.err
    sandbox.wait_settled()  # the rollout ended: nothing is in flight, sn1 kept the old one
    assert sandbox.cluster_status()["sn1"]["checkout"]["resolvedDigest"] == OLD_CHECKOUT

    add_checkout_egress(repo, "api.sendgrid.com")
    before = len(writes(sandbox))
    result = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert result.code == Exit.NOT_CONVERGED, result.out + result.err
    assert "Converged" not in result.out
    sent = writes(sandbox)[before:]
    assert [(w["method"], w["serviceId"]) for w in sent] == [("setServiceEgress", "svc-checkout")]
    line = gate_failure_line(result.err, "checkout", "sn1")
    assert OLD_CHECKOUT in line and NEW_CHECKOUT in line, line
    assert not [x for x in result.err.splitlines() if "on sn2:" in x or "on sn3:" in x]


def test_an_egress_edit_during_a_rollout_never_claims_convergence_before_it_is_true(
        repo_factory: Callable[..., Repo], sandbox_factory: Callable[..., Sandbox]) -> None:
    # sn1 takes 15 s to roll out; the gate's budget is about one second.
    sandbox = sandbox_factory(converge_delay_ms={"sn1": 15000, "sn2": 200, "sn3": 200})
    repo = repo_factory(sandbox, attempts=4, interval_seconds=0.2)
    crashed = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout",
                       RECONCILE_CRASH_AT="gate")
    assert crashed.code == -9, crashed.out + crashed.err  # promoted, then killed: no gate
    add_checkout_egress(repo, "api.sendgrid.com")
    result = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    still_old = sandbox.cluster_status()["sn1"]["checkout"]["resolvedDigest"] == OLD_CHECKOUT
    assert still_old, "the scenario needs sn1 still on the old digest when apply ends"
    # Honest outcomes: refuse (a rollout is in flight) or gate and fail naming sn1.
    assert result.code in (Exit.REFUSED_NO_GO, Exit.NOT_CONVERGED), result.out + result.err
    assert "Converged" not in result.out and "Apply complete" not in result.out
    if result.code == Exit.NOT_CONVERGED:
        line = gate_failure_line(result.err, "checkout", "sn1")
        assert OLD_CHECKOUT in line and NEW_CHECKOUT in line, line


# -- 2. a saved plan reviewed for three clusters, applied when a fourth answers ------------

def test_a_saved_plan_reviewed_for_three_clusters_is_refused_when_a_fourth_answers(
        repo_factory: Callable[..., Repo], sandbox_factory: Callable[..., Sandbox]) -> None:
    sandbox = sandbox_factory(clusters=4)
    sandbox.fault("sn4", "dns-missing")
    retarget(sandbox, ["sn1", "sn2", "sn3"])
    repo = repo_factory(sandbox)
    settings = json.loads((repo.path / "settings.yaml").read_text())
    settings["mesh"]["clusters"] = ["sn1", "sn2", "sn3"]
    (repo.path / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")
    repo.commit("three clusters")
    plan_file = repo.path.parent / "plan.json"
    saved = repo.run("plan", str(repo.path), "--out", str(plan_file))
    assert saved.code == Exit.OK, saved.out + saved.err
    data = json.loads(plan_file.read_text())
    assert data["verdict"] == "go" and data["expected_clusters"] == ["sn1", "sn2", "sn3"]

    # A fourth cluster joins the fleet, running what is live now (the old digests), and
    # the gateway advertises it.
    retarget(sandbox, ["sn1", "sn2", "sn3", "sn4"])
    wait_for("sn4 to run checkout's old digest", lambda: sandbox.cluster_status()["sn4"]
             .get("checkout", {}).get("resolvedDigest") == OLD_CHECKOUT)
    # and every rollout reported done by all four (catalog's too: a rollout still
    # deploying would make the plan NO-GO before the cluster list is compared)
    sandbox.wait_settled()
    sandbox.fault("sn4", "dns-missing", on=False)
    result = repo.run("apply", str(plan_file), cwd=repo.path)
    assert result.code == Exit.REFUSED_MISMATCH, result.out + result.err
    assert "sn4" in result.err
    assert "Converged" not in result.out
    assert writes(sandbox) == []


# -- 3. a saved "no changes" plan, applied after a cluster fell back -----------------------

def test_a_saved_no_change_plan_gates_after_a_cluster_fell_back(
        repo: Repo, sandbox: Sandbox) -> None:
    first = repo.run("apply", str(repo.path), "--auto-approve")
    assert first.code == Exit.OK, first.out + first.err
    plan_file = repo.path.parent / "plan.json"
    saved = repo.run("plan", str(repo.path), "--detailed-exitcode", "--out", str(plan_file))
    assert saved.code == Exit.OK and "no changes" in saved.out, saved.out + saved.err
    sent = len(writes(sandbox))

    old_image = f"registry.sandbox.test/shop/checkout@{OLD_CHECKOUT}"
    tamper_runtime(sandbox, "sn1", "checkout", resolvedDigest=OLD_CHECKOUT, image=old_image)
    result = repo.run("apply", str(plan_file), cwd=repo.path)
    assert result.code == Exit.NOT_CONVERGED, result.out + result.err
    assert "No changes" not in result.out and "Converged" not in result.out
    line = gate_failure_line(result.err, "checkout", "sn1")
    assert OLD_CHECKOUT in line and NEW_CHECKOUT in line, line
    assert len(writes(sandbox)) == sent


# -- 4. a saved plan made against another control plane ------------------------------------

def test_a_plan_made_against_another_control_plane_is_refused(
        repo_factory: Callable[..., Repo], sandbox_factory: Callable[..., Sandbox]) -> None:
    other = sandbox_factory(name="sandbox-a")
    mine = sandbox_factory(name="sandbox-b")
    repo = repo_factory(mine)  # the settings point at B; both hold the default seed
    plan_file = repo.path.parent / "plan.json"
    saved = repo.run("plan", str(repo.path), "--out", str(plan_file),
                     "--control-plane", other.control_plane_url, **other.env())
    assert saved.code == Exit.OK, saved.out + saved.err
    assert json.loads(plan_file.read_text())["control_plane_url"] == other.control_plane_url

    result = repo.run("apply", str(plan_file), cwd=repo.path)
    assert result.code == Exit.REFUSED_MISMATCH, result.out + result.err
    assert other.control_plane_url in result.err and mine.control_plane_url in result.err
    assert writes(mine) == [] and writes(other) == []


# -- 5. a saved plan edited by hand ----------------------------------------------------------

def _edit_promote_digest(data: dict[str, Any], sandbox: Sandbox) -> str:
    """Point checkout's promotion at another observed release: digest, reference and id."""
    other = sandbox.push("checkout", "v9.9.9")
    change = next(c for c in data["changes"] if c["actions"] == ["promote"])
    change["release_after"].update(
        digest=other, release_id="rel-checkout-v9.9.9-1", tags=["v9.9.9"],
        reference=f"registry.sandbox.test/shop/checkout@{other}")
    return "promote checkout"


def _append_grant(data: dict[str, Any], sandbox: Sandbox) -> str:
    caps = ["deployment:preflight", "deployment:promote-route", "deployment:rollback-route"]
    template = next(c for c in data["changes"] if c["actions"] == ["set_grant"])
    data["changes"].append({
        **template, "app_id": "checkout", "service": "checkout", "service_id": "svc-checkout",
        "user_id": "mallory", "capabilities_before": [], "capabilities_after": caps,
        "capabilities_added": caps, "capabilities_removed": [],
        "preconditions": {**template["preconditions"], "capabilities": []},
        "idempotency_key": "rcn-" + "5" * 40,
        "summary": "checkout: mallory gains " + ", ".join(caps)})
    data["counts"]["set_grant"] += 1
    return "mallory"


@pytest.mark.parametrize("recompute", [False, True], ids=["digest-stale", "digest-recomputed"])
@pytest.mark.parametrize("edit", [_edit_promote_digest, _append_grant],
                         ids=["promote-digest", "extra-grant"])
def test_a_hand_edited_saved_plan_is_refused_before_any_write(
        repo: Repo, sandbox: Sandbox, edit: Callable[[dict[str, Any], Sandbox], str],
        recompute: bool) -> None:
    plan_file = repo.path.parent / "plan.json"
    saved = repo.run("plan", str(repo.path), "--out", str(plan_file))
    assert saved.code == Exit.OK, saved.out + saved.err
    data = json.loads(plan_file.read_text())
    named = edit(data, sandbox)
    if recompute:
        data["content_digest"] = content_digest(data)
    plan_file.write_text(json.dumps(data, indent=2))

    result = repo.run("apply", str(plan_file), cwd=repo.path)
    assert result.code == Exit.REFUSED_MISMATCH, result.out + result.err
    if recompute:
        assert named in result.err, result.err  # the fresh re-plan names the change
    else:
        assert "content_digest" in result.err, result.err
    assert writes(sandbox) == []


# -- 6. a file git ignores never reaches a plan -------------------------------------------

def test_an_ignored_file_declaring_a_grant_is_neither_planned_nor_sent(
        repo: Repo, sandbox: Sandbox) -> None:
    (repo.path / ".gitignore").write_text("*.local.yaml\n")
    repo.commit("ignore local overrides")
    (repo.path / "grants" / "mine.local.yaml").write_text(
        "apiVersion: reconcile/v1\nkind: Grant\nuserId: mallory\nservices:\n"
        "  - service: checkout\n"
        "    capabilities: [deployment:preflight, deployment:promote-route]\n")
    status = subprocess.run(["git", "-C", str(repo.path), "status", "--porcelain"],
                            capture_output=True, text=True, check=True)
    assert status.stdout == "", status.stdout

    planned = repo.run("plan", str(repo.path), "--format", "json")
    assert planned.code == Exit.OK, planned.out + planned.err
    data = json.loads(planned.out)
    assert not [c for c in data["changes"] if c.get("user_id") == "mallory"]
    assert "mallory" not in planned.out

    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.OK, applied.out + applied.err
    assert not [w for w in writes(sandbox) if w.get("userId") == "mallory"]
    assert "mallory" not in applied.out + applied.err


# -- 7. an operator allow-list dropping a declared destination -----------------------------

ALL_BUT_SLACK = ["api.stripe.com", "smtp.mailgun.org:587", "cdn.example.org", "api.openai.com",
                 "es.example.net:9200", "api.sendgrid.com"]


def test_an_egress_destination_dropped_by_a_cluster_fails_the_gate_by_name(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=6)
    sandbox.set_egress_allowlist("sn2", ALL_BUT_SLACK)
    sandbox.wait_settled()
    result = repo.run("apply", str(repo.path), "--auto-approve")
    assert result.code == Exit.NOT_CONVERGED, result.out + result.err
    assert "Converged" not in result.out
    dropped = sandbox.cluster_status()["sn2"]["checkout"]["egressDropped"]
    assert dropped == [{"host": "hooks.slack.com", "port": 443}]
    line = gate_failure_line(result.err, "checkout", "sn2")
    assert "hooks.slack.com" in line, line
    assert not [x for x in result.err.splitlines()
                if "on sn1" in x or "on sn3" in x or "search on" in x or "catalog on" in x]


def test_a_dropped_destination_fails_apply_even_with_nothing_to_send(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=4)
    sandbox.set_egress_allowlist("sn2", [h for h in ALL_BUT_SLACK if "mailgun" not in h])
    wait_for("sn2 to drop notifications' smtp.mailgun.org", lambda: sandbox.cluster_status()
             ["sn2"]["notifications"]["egressDropped"] != [])
    result = repo.run("apply", str(repo.path), "--auto-approve", "--only", "notifications")
    assert result.code == Exit.NOT_CONVERGED, result.out + result.err
    assert "No changes" not in result.out and "Converged" not in result.out
    line = gate_failure_line(result.err, "notifications", "sn2")
    assert "smtp.mailgun.org" in line, line
    assert writes(sandbox) == []


# -- 8. --detailed-exitcode while a cluster does not prove the pinned digest ---------------

@pytest.mark.parametrize("lie", ["no-resolved-digest", "other-digest"])
def test_detailed_exitcode_is_not_zero_while_a_cluster_does_not_prove_the_digest(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, lie: str) -> None:
    repo = repo_factory(sandbox, attempts=4)
    first = repo.run("apply", str(repo.path), "--auto-approve")
    assert first.code == Exit.OK, first.out + first.err
    assert repo.run("plan", str(repo.path), "--detailed-exitcode").code == Exit.OK
    if lie == "no-resolved-digest":
        tamper_runtime(sandbox, "sn1", "checkout", resolvedDigest=None)
    else:
        tamper_runtime(sandbox, "sn1", "checkout", resolvedDigest=OLD_CHECKOUT,
                       image=f"registry.sandbox.test/shop/checkout@{OLD_CHECKOUT}")

    planned = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert planned.code == Exit.CHANGES, planned.out + planned.err
    lines = planned.out.splitlines()
    assert not [x for x in lines if "checkout" in x and "no changes" in x], planned.out
    assert "no changes" not in lines[-1], planned.out  # the verdict line
    assert any(x.startswith("● checkout") for x in lines), planned.out
    assert [x for x in lines if x.strip().startswith("sn1:")], planned.out
    as_json = repo.run("plan", str(repo.path), "--format", "json")
    proof = next(p for p in json.loads(as_json.out)["proofs"] if p["service"] == "checkout")
    assert proof["proof"] != "converged"
    assert {c["cluster"] for c in proof["clusters"] if c["proof"] != "converged"} == {"sn1"}

    sent = len(writes(sandbox))
    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.NOT_CONVERGED, applied.out + applied.err
    assert "No changes" not in applied.out and "Converged" not in applied.out
    line = gate_failure_line(applied.err, "checkout", "sn1")
    assert NEW_CHECKOUT in line, line
    if lie == "other-digest":
        assert OLD_CHECKOUT in line, line
    assert len(writes(sandbox)) == sent


# -- 14. one cluster down: one blocker, not one per service ---------------------------------

def test_a_cluster_down_is_one_blocker_naming_it_its_address_and_the_services(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, mesh_timeout=1.0)
    sandbox.fault("sn2", "down")
    plan_file = repo.path.parent / "plan.json"
    text = repo.run("plan", str(repo.path), "--detailed-exitcode", "--out", str(plan_file))
    assert text.code == Exit.CHANGES_NO_GO, text.out + text.err
    data = json.loads(plan_file.read_text())
    about_sn2 = [b for b in data["blockers"] if b.get("cluster") == "sn2"]
    assert len(about_sn2) == 1, data["blockers"]
    blocker = about_sn2[0]
    assert blocker["code"] == "cluster_unreachable"
    assert "sn2" in blocker["message"] and "127.0.0.3" in blocker["message"]
    assert "unreachable" in blocker["message"].split("127.0.0.3", 1)[1]  # the cause
    assert sorted(blocker["services"]) == SERVICES
    assert not [b for b in data["blockers"] if b["code"] == "cluster_unnamed"]
    assert not [b for b in data["blockers"] if "127.0.0.3" in (b.get("cluster") or "")]
    assert data["counts"]["blockers"] == len(data["blockers"])
    assert text.out.count("cluster_unreachable") == 1, text.out


# -- 16. rival clones: the loser of the compare-and-swap does not gate on its digest --------

def _spawn_apply(repo: Repo, path: Path, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler", "apply", str(path), "--auto-approve",
         "--format", "json"],
        cwd=PROJECT, env=repo.env(RECONCILE_STATE_DIR=str(state)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def test_the_loser_of_rival_promotions_is_refused_and_does_not_gate_on_its_digest(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, tmp_path: Path) -> None:
    attempts, interval = 40, 0.5
    rival_digest = sandbox.push("checkout", "v2.5.0")
    repo = repo_factory(sandbox, attempts=attempts, interval_seconds=interval)
    # A scenario about rival promotions: the reference repo's new service (ledger) would
    # add a creation race (the loser's preflight may already see it created, NO-GO 10),
    # which test_greenfield_e2e covers on its own.
    without_ledger(repo.path, "no new service in this scenario")
    rival = tmp_path / "rival"
    shutil.copytree(repo.path, rival)
    checkout = rival / "services" / "checkout.yaml"
    checkout.write_text(checkout.read_text().replace(NEW_CHECKOUT, rival_digest)
                        .replace("tag: v2.4.0", "tag: v2.5.0"))
    git(rival, "commit", "-qam", "pin checkout v2.5.0")
    pins = {"ours": NEW_CHECKOUT, "rival": rival_digest}

    # sn3 answers slowly while both plan, so both read generation 3 before either writes.
    sandbox.fault("sn3", "slow", ms=1500)
    procs = {"ours": _spawn_apply(repo, repo.path, tmp_path / "state-ours"),
             "rival": _spawn_apply(repo, rival, tmp_path / "state-rival")}
    events: dict[str, list[tuple[float, dict[str, Any]]]] = {name: [] for name in procs}
    errs: dict[str, str] = {}
    ended: dict[str, float] = {}

    def read(name: str) -> None:
        stdout = procs[name].stdout
        assert stdout is not None
        for line in stdout:
            events[name].append((time.monotonic(), json.loads(line)))
        ended[name] = time.monotonic()

    def read_err(name: str) -> None:
        stderr = procs[name].stderr
        assert stderr is not None
        errs[name] = stderr.read()

    readers = [threading.Thread(target=f, args=(n,), daemon=True)
               for n in procs for f in (read, read_err)]
    for t in readers:
        t.start()
    try:
        wait_for("both appliers to finish planning", lambda: all(
            procs[n].poll() is not None
            or any(e["event"] == "apply_started" for _, e in events[n]) for n in procs),
            timeout=90)
        sandbox.fault("sn3", "slow", on=False)
        for p in procs.values():
            p.wait(timeout=120)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for t in readers:
        t.join(timeout=10)
    codes = {n: p.returncode for n, p in procs.items()}
    report = "\n".join(f"--- {n} ({codes[n]})\n" + "\n".join(
        json.dumps({k: v for k, v in e.items() if k not in ("proofs", "report")})
        for _, e in events[n]) + "\n" + errs.get(n, "") for n in procs)
    assert sorted(codes.values()) == [Exit.OK, Exit.CONFLICT], report
    winner = next(n for n in procs if codes[n] == Exit.OK)
    loser = next(n for n in procs if codes[n] == Exit.CONFLICT)

    mine = [e for _, e in events[loser]]
    refused = [e for e in mine if e["event"] == "post_apply" and e["action"] == "promote"]
    assert [(e["service"], e["outcome"]) for e in refused] == [("checkout", "refused")], report
    assert "someone else changed checkout" in refused[0]["detail"], report
    # The loser's gate does not wait for a digest nobody will roll out.
    gated = [e for e in mine if e["event"] == "gate_started"]
    assert all("checkout" not in e["services"] for e in gated), report
    polls = [e for e in mine if e["event"] == "gate_polled"]
    assert len(polls) < attempts, report
    assert not [p for e in polls for p in e["proofs"] if p["service"] == "checkout"], report
    finished = next(e for e in mine if e["event"] == "finished")
    gate = finished["report"]["gate"] or {"proofs": []}
    assert "checkout" not in {p["service"] for p in gate["proofs"]}, report
    started = next(t for t, e in events[loser] if e["event"] == "apply_started")
    assert ended[loser] - started < attempts * interval / 2, report  # far from the budget
    for cluster, apps in sandbox.cluster_status().items():
        assert apps["checkout"]["resolvedDigest"] == pins[winner], (cluster, report)


def test_a_forged_change_keyed_like_an_in_doubt_journal_entry_is_still_refused(
        repo: Repo, sandbox: Sandbox) -> None:
    # A key the journal holds as "sent, no answer" proves nothing about a change's content:
    # a saved change the fresh plan lacks is accepted only when its result is already live.
    plan_file = repo.path.parent / "plan.json"
    assert repo.run("plan", str(repo.path), "--out", str(plan_file)).code == Exit.OK
    data = json.loads(plan_file.read_text())
    _append_grant(data, sandbox)
    data["content_digest"] = content_digest(data)
    plan_file.write_text(json.dumps(data, indent=2))
    forged = jsonplan.from_wire(data).changes[-1]
    assert forged.user_id == "mallory"
    journal = Journal.open(repo.state / "journal.jsonl")
    journal.intent(forged)  # as if an earlier run had sent this key and crashed
    assert journal.in_doubt(forged.idempotency_key)

    result = repo.run("apply", str(plan_file), cwd=repo.path)
    assert result.code == Exit.REFUSED_MISMATCH, result.out + result.err
    assert "mallory" in result.err
    assert writes(sandbox) == []
