"""`reconcile plan` end to end against the sandbox, with each fault switched on.

Each case asserts the verdict, the `--detailed-exitcode`, and what the text, JSON and
Markdown renderings say. Real processes, real HTTP and TLS, the real CLI.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo

pytestmark = pytest.mark.integration

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "plan.schema.json").read_text())


def plan_all(repo: Repo) -> tuple[int, str, dict[str, object], str]:
    """Text (exit code), JSON and Markdown of one plan, taken once and shown three ways."""
    plan_file = repo.path.parent / "plan.json"
    text = repo.run("plan", str(repo.path), "--detailed-exitcode", "--out", str(plan_file))
    assert text.code in (0, 2, 3), text.out + text.err
    data = json.loads(plan_file.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    md = repo.run("show", str(plan_file), "--format", "markdown")
    assert md.code == 0, md.err
    shown = repo.run("show", str(plan_file))
    assert shown.out == text.out, "show must render the saved plan exactly as plan did"
    return text.code, text.out, data, md.out


def blockers(data: dict[str, object]) -> set[tuple[str, str | None]]:
    return {(b["code"], b.get("cluster")) for b in data["blockers"]}  # type: ignore[index,union-attr]


def drift(data: dict[str, object]) -> set[tuple[str, str | None]]:
    return {(d["code"], d.get("cluster")) for d in data["drift"]}  # type: ignore[index,union-attr]


@pytest.fixture
def faulty(repo_factory: Callable[..., Repo], sandbox: Sandbox) -> Repo:
    return repo_factory(sandbox, mesh_timeout=1.0)


def test_healthy_mesh_is_go_with_every_change_kind(faulty: Repo) -> None:
    code, text, data, md = plan_all(faulty)
    assert code == Exit.CHANGES and data["verdict"] == "go"
    assert {c["actions"][0] for c in data["changes"]} == {  # type: ignore[index,union-attr]
        "promote", "rollback", "set_egress", "set_grant", "create",  # create: ledger
        "sync_route"}  # the example repo's two routes
    assert md.startswith("## reconcile plan: **GO**")
    assert "→ GO" in text


@pytest.mark.parametrize("kind", ["down", "blackhole", "trickle", "garbage", "truncated"])
def test_a_cluster_that_gives_no_usable_answer_is_no_go(faulty: Repo, sandbox: Sandbox,
                                                         kind: str) -> None:
    sandbox.fault("sn2", kind)
    code, text, data, md = plan_all(faulty)
    assert code == Exit.CHANGES_NO_GO and data["verdict"] == "no_go"
    # Down at the health route: one root cause for the cluster; answering health but not
    # the status route: silent per service.
    assert {("cluster_unreachable", "sn2"), ("cluster_silent", "sn2")} & blockers(data)
    assert not any(cluster in ("sn1", "sn3") for _, cluster in blockers(data))
    assert "NO-GO" in text and "sn2 gave no evidence" in text
    assert md.startswith("## reconcile plan: **NO-GO**") and "SILENT" in md


def test_slow_but_within_the_timeout_is_still_evidence(faulty: Repo, sandbox: Sandbox) -> None:
    sandbox.fault("sn1", "slow", ms=200)
    code, _, data, _ = plan_all(faulty)
    assert code == Exit.CHANGES and not data["blockers"]


def test_a_cluster_missing_from_dns_is_no_go_never_fewer_clusters(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    sandbox.fault("sn3", "dns-missing")
    repo = repo_factory(sandbox, mesh_timeout=1.0)  # settings written from the short answer
    code, _, data, _ = plan_all(repo)
    assert code == Exit.CHANGES_NO_GO
    assert ("gateway_short_answer", None) in blockers(data)
    assert ("cluster_unreachable", "sn3") in blockers(data)
    assert data["expected_clusters"] == ["sn1", "sn2", "sn3"]


def test_failed_runtime_with_ansi_last_error_is_drift_and_escaped(
        faulty: Repo, sandbox: Sandbox) -> None:
    sandbox.fault("sn1", "failed")
    sandbox.fault("sn1", "ansi")
    code, text, data, md = plan_all(faulty)
    assert ("cluster_unhealthy", "sn1") in drift(data)
    for out in (text, md, json.dumps(data)):
        assert "\x1b" not in out
    assert "\\x1b" in text
    assert code == Exit.CHANGES  # drift is shown apart; it does not block other changes


def test_an_operator_allow_list_dropping_egress_is_drift(faulty: Repo, sandbox: Sandbox) -> None:
    sandbox.fault("sn2", "egress-allow", hosts="api.stripe.com")
    sandbox.wait_settled()
    code, text, data, _ = plan_all(faulty)
    assert code == Exit.CHANGES
    assert ("egress_dropped", "sn2") in drift(data)
    assert "dropped egress to smtp.mailgun.org:587" in text


def test_the_sn1_story_is_visible_in_the_plan_and_apply_never_claims_success_over_it(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, mesh_timeout=1.0, attempts=3)
    sandbox.fault("sn1", "stuck")
    assert repo.run("apply", str(repo.path), "--auto-approve").code == Exit.NOT_CONVERGED
    code, text, data, _ = plan_all(repo)
    diverged = {c for code_, c in drift(data) if code_ == "cluster_diverged"}
    assert diverged == {"sn1"}
    assert ("rollout_mismatched", None) in drift(data)
    # Not "no changes" (it used to exit 0 here): the judge does not prove checkout, so
    # the plan is GO with a gate for apply to pass (exit 2), and says why.
    assert code == Exit.CHANGES and data["verdict"] == "go", text
    assert data["changes"] == [] and "not proven converged" in text
    # Nothing to send, but a rerun of apply still refuses to print success over sn1.
    rerun = repo.run("apply", str(repo.path), "--auto-approve")
    assert rerun.code == Exit.NOT_CONVERGED, rerun.out + rerun.err
    assert "checkout on sn1: DIVERGED" in rerun.err and "No changes" not in rerun.out


@pytest.mark.parametrize("kind", ["5xx", "retry"])
def test_transient_control_plane_faults_are_retried(faulty: Repo, sandbox: Sandbox,
                                                   kind: str) -> None:
    sandbox.fault("control-plane", kind, times=2)
    code, _, data, _ = plan_all(faulty)
    assert code == Exit.CHANGES and not data["blockers"]


def test_a_silent_null_response_is_an_error_not_an_empty_answer(
        faulty: Repo, sandbox: Sandbox) -> None:
    sandbox.fault("control-plane", "null-response", times=1000)
    result = faulty.run("plan", str(faulty.path), "--detailed-exitcode")
    assert result.code == Exit.ERROR, result.out + result.err
    assert "control plane" in result.err and "Traceback" not in result.err


def test_the_token_never_appears_in_any_output(faulty: Repo, sandbox: Sandbox) -> None:
    sandbox.fault("sn1", "garbage")
    plan_file = faulty.path.parent / "plan.json"
    outputs = [faulty.run("plan", str(faulty.path), "--out", str(plan_file)),
               faulty.run("plan", str(faulty.path), "--format", "json"),
               faulty.run("apply", str(faulty.path), "--auto-approve"),
               faulty.run("plan", str(faulty.path), RECONCILE_TOKEN="canary-" + "9" * 24)]
    for result in outputs:
        assert sandbox.token not in result.out + result.err
        assert "canary-" + "9" * 24 not in result.out + result.err
    assert sandbox.token not in plan_file.read_text()
