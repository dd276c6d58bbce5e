"""`reconcile apply` end to end: real sandbox processes, real HTTP and TLS, the real CLI.

What the sandbox's audit log and rollout state prove: which writes were sent, and that
each change made exactly one rollout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.render import jsonplan
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import PROJECT, Repo, Result, git
from tests.plan.builders import digest

pytestmark = pytest.mark.integration

WRITES = {"promoteServiceImageRelease", "rollbackServiceImageRelease", "setServiceEgress",
          "configureServiceDeploymentMachineUser"}
GENERATIONS = {"svc-checkout": 3, "svc-catalog": 5, "svc-search": 2, "svc-notifications": 1}


def writes(sandbox: Sandbox) -> list[dict[str, object]]:
    return [a for a in sandbox.audit() if a["method"] in WRITES]


def generations(sandbox: Sandbox) -> dict[str, int]:
    return {sid: int(s["rolloutGeneration"]) for sid, s in sandbox.rollout_statuses().items()}


def test_apply_converges_then_a_second_plan_is_empty_and_a_second_apply_sends_no_write(
        repo: Repo, sandbox: Sandbox) -> None:
    first = repo.run("apply", str(repo.path), "--auto-approve")
    assert first.code == Exit.OK, first.out + first.err
    # 5 writes, the creation of ledger, the reference repo's new service (issue 12), and the
    # two routes of shop.sandbox.test (issue 21).
    assert "8 applied" in first.out and "Converged" in first.out
    sent = writes(sandbox)
    assert sorted(str(w["method"]) for w in sent) == sorted([
        "configureServiceDeploymentMachineUser", "setServiceEgress", "setServiceEgress",
        "promoteServiceImageRelease", "rollbackServiceImageRelease"])
    gens = generations(sandbox)
    assert gens["svc-checkout"] == 4 and gens["svc-catalog"] == 6
    status = sandbox.cluster_status()
    for cluster in ("sn1", "sn2", "sn3"):
        assert status[cluster]["checkout"]["resolvedDigest"] == digest("checkout", "v2.4.0")
        assert status[cluster]["catalog"]["resolvedDigest"] == digest("catalog", "v5.0.1")

    again = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert again.code == Exit.OK, again.out + again.err
    assert "no changes" in again.out
    second = repo.run("apply", str(repo.path), "--auto-approve")
    assert second.code == Exit.OK and "No changes" in second.out
    assert len(writes(sandbox)) == len(sent), "the second apply sent a write"


def test_stuck_cluster_fails_the_gate_naming_the_cluster_and_both_digests(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=6)
    sandbox.fault("sn1", "stuck")
    result = repo.run("apply", str(repo.path), "--auto-approve")
    assert result.code == Exit.NOT_CONVERGED, result.out + result.err
    line = next(x for x in result.err.splitlines() if "checkout on sn1" in x)
    assert "DIVERGED" in line
    assert digest("checkout", "v2.3.0") in line and digest("checkout", "v2.4.0") in line
    assert not [x for x in result.err.splitlines() if "on sn2:" in x or "on sn3:" in x]


def test_a_cluster_down_before_apply_is_refused_before_any_write(
        repo: Repo, sandbox: Sandbox) -> None:
    sandbox.fault("sn2", "down")
    result = repo.run("apply", str(repo.path), "--auto-approve")
    assert result.code == Exit.REFUSED_EVIDENCE, result.out + result.err
    assert "sn2" in result.err and "nothing was sent" in result.err
    assert writes(sandbox) == []


def test_a_cluster_silent_during_the_gate_fails_as_unverified_not_diverged(
        repo_factory: Callable[..., Repo], sandbox_factory: Callable[..., Sandbox]) -> None:
    sandbox = sandbox_factory(converge_delay_ms=1500)
    repo = repo_factory(sandbox, attempts=8, interval_seconds=0.3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "apply", str(repo.path), "--auto-approve"],
        cwd=PROJECT, env=repo.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "Convergence gate" in line:
            sandbox.fault("sn3", "down")
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == Exit.NOT_CONVERGED, out + err
    sn3 = [x for x in err.splitlines() if "on sn3" in x]
    assert sn3 and all("UNVERIFIED" in x for x in sn3)
    assert not any("DIVERGED" in x for x in sn3)


@pytest.mark.parametrize("point", ["before-send:promote", "after-send:promote", "gate"])
def test_a_killed_apply_reruns_to_convergence_with_one_rollout_per_change(
        repo: Repo, sandbox: Sandbox, point: str) -> None:
    crashed = repo.run("apply", str(repo.path), "--auto-approve", RECONCILE_CRASH_AT=point)
    assert crashed.code == -9, crashed.out + crashed.err
    rerun = repo.run("apply", str(repo.path), "--auto-approve")
    assert rerun.code == Exit.OK, rerun.out + rerun.err
    gens = generations(sandbox)
    assert gens["svc-checkout"] == GENERATIONS["svc-checkout"] + 1
    assert gens["svc-catalog"] == GENERATIONS["svc-catalog"] + 1
    final = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert final.code == Exit.OK, final.out
    journal = (repo.state / "journal.jsonl").read_text().splitlines()
    assert all(json.loads(line)["sum"] for line in journal)


def test_a_corrupt_journal_is_refused_with_its_path(repo: Repo, sandbox: Sandbox) -> None:
    repo.state.mkdir(parents=True)
    (repo.state / "journal.jsonl").write_text('{"v": 1, "event": "intent"}\n')
    result = repo.run("apply", str(repo.path), "--auto-approve")
    assert result.code == Exit.ERROR
    assert str(repo.state / "journal.jsonl") in result.err and "corrupt" in result.err
    assert writes(sandbox) == []


def test_two_concurrent_applies_make_exactly_one_rollout(repo: Repo, sandbox: Sandbox) -> None:
    results: list[Result] = []
    other_state = repo.state.parent / "other-state"

    def run(state: Path) -> None:
        results.append(repo.run("apply", str(repo.path), "--auto-approve",
                                RECONCILE_STATE_DIR=str(state)))

    threads = [threading.Thread(target=run, args=(s,)) for s in (repo.state, other_state)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gens = generations(sandbox)
    assert gens["svc-checkout"] == 4 and gens["svc-catalog"] == 6
    codes = sorted(r.code for r in results)
    # Either both saw the same plan and the same keys (the second one replayed), or one
    # lost the compare-and-swap and said who moved what, or it planned after the winner.
    assert codes[0] == Exit.OK
    assert codes[1] in (Exit.OK, Exit.CONFLICT, Exit.REFUSED_NO_GO), results
    loser = [r for r in results if r.code == Exit.CONFLICT]
    for r in loser:
        assert "someone else changed" in r.err + r.out


def test_a_stale_saved_plan_is_refused_before_any_write(repo: Repo, sandbox: Sandbox) -> None:
    plan_file = repo.path.parent / "plan.json"
    saved = repo.run("plan", str(repo.path), "--out", str(plan_file))
    assert saved.code == Exit.OK, saved.err
    # Someone else, from another checkout, declares different egress for checkout.
    other = repo.path.parent / "other-checkout"
    shutil.copytree(repo.path, other)
    checkout = other / "services" / "checkout.yaml"
    checkout.write_text(checkout.read_text().replace("hooks.slack.com", "api.sendgrid.com"))
    git(other, "commit", "-qam", "someone else's egress")
    theirs = repo.run("apply", str(other), "--auto-approve", "--only", "checkout",
                      RECONCILE_STATE_DIR=str(repo.path.parent / "someone-else"))
    assert theirs.code == Exit.OK, theirs.out + theirs.err
    before = len(writes(sandbox))
    result = repo.run("apply", str(plan_file), cwd=repo.path)
    assert result.code == Exit.REFUSED_STALE, result.out + result.err
    assert "checkout: egress revision 1 → 2" in result.err and "nothing was sent" in result.err
    assert len(writes(sandbox)) == before


def test_a_saved_plan_whose_change_someone_else_already_made_reports_it_already_applied(
        repo: Repo, sandbox: Sandbox) -> None:
    plan_file = repo.path.parent / "plan.json"
    assert repo.run("plan", str(repo.path), "--out", str(plan_file)).code == Exit.OK
    theirs = repo.run("apply", str(repo.path), "--auto-approve", "--only", "catalog",
                      RECONCILE_STATE_DIR=str(repo.path.parent / "someone-else"))
    assert theirs.code == Exit.OK, theirs.out + theirs.err
    ours = repo.run("apply", str(plan_file), cwd=repo.path)
    assert ours.code == Exit.OK, ours.out + ours.err
    assert "rollback catalog: already live" in ours.out
    assert generations(sandbox)["svc-catalog"] == GENERATIONS["svc-catalog"] + 1


def test_a_saved_plan_over_another_desired_state_is_refused(repo: Repo,
                                                            sandbox: Sandbox) -> None:
    plan_file = repo.path.parent / "plan.json"
    assert repo.run("plan", str(repo.path), "--out", str(plan_file)).code == Exit.OK
    (repo.path / "services" / "search.yaml").write_text(
        (repo.path / "services" / "search.yaml").read_text().replace("egress: []", ""))
    dirty = repo.run("apply", str(plan_file), cwd=repo.path)
    assert dirty.code == Exit.REFUSED_COMMIT and "uncommitted" in dirty.err
    repo.commit("another change")
    # Bound to the desired-state tree (not the commit): the edited file is named.
    moved = repo.run("apply", str(plan_file), cwd=repo.path)
    assert moved.code == Exit.REFUSED_MISMATCH, moved.out + moved.err
    assert "1 file(s) differ: services/search.yaml (modified)" in moved.err
    assert "plan again" in moved.err
    assert writes(sandbox) == []


def test_a_plan_saved_before_format_2_3_stays_bound_to_its_commit(
        repo: Repo, sandbox: Sandbox) -> None:
    plan_file = repo.path.parent / "plan.json"
    assert repo.run("plan", str(repo.path), "--out", str(plan_file)).code == Exit.OK
    # The same plan as reconcile 2.2 wrote it: no tree, so bound to its commit.
    document = json.loads(plan_file.read_text())
    for added in ("desired_tree", "desired_files", "worktree", "uncommitted", "source_note"):
        document.pop(added)
    document["format_version"] = "2.2"
    document.pop("content_digest")
    document["content_digest"] = jsonplan.content_digest(document)
    plan_file.write_text(json.dumps(document))
    git(repo.path, "-c", "user.email=ci@example.net", "-c", "user.name=ci", "commit", "-q",
        "--allow-empty", "-m", "same tree, another commit")
    moved = repo.run("apply", str(plan_file), cwd=repo.path)
    assert moved.code == Exit.REFUSED_COMMIT, moved.out + moved.err
    assert f"made from commit {document['commit']}" in moved.err
    assert "bound to its commit" in moved.err and "plan again" in moved.err
    assert writes(sandbox) == []


def test_a_worktree_preview_is_shown_but_never_applied(repo: Repo, sandbox: Sandbox) -> None:
    search = repo.path / "services" / "search.yaml"
    search.write_text(search.read_text().replace("\negress: []", "\negress:\n"
                                                 "  - host: api.example.net\n    port: 443"))
    (repo.path / ".gitignore").write_text("ignored.yaml\n")
    (repo.path / "ignored.yaml").write_text("not: [valid\n")  # never read: git ignores it
    plan_file = repo.path.parent / "preview.json"
    preview = repo.run("plan", str(repo.path), "--worktree", "--out", str(plan_file))
    assert preview.code == Exit.OK, preview.out + preview.err
    first = preview.out.splitlines()[0]
    assert first.startswith("PREVIEW — preview of uncommitted changes")
    assert "services/search.yaml (modified)" in first and ".gitignore (untracked)" not in first
    assert "api.example.net" in preview.out  # the edit is planned
    md = repo.run("plan", str(repo.path), "--worktree", "--format", "markdown")
    assert md.out.splitlines()[0].startswith(
        "## ⚠️ preview of uncommitted changes (never applied) · reconcile plan:")
    document = json.loads(plan_file.read_text())
    assert document["worktree"] is True and document["desired_tree"] is None
    assert document["source_note"].startswith("preview of uncommitted changes")
    assert "never applied" in preview.err
    repo.commit("the edit, committed")
    applied = repo.run("apply", str(plan_file), cwd=repo.path)
    assert applied.code == Exit.REFUSED_COMMIT, applied.out + applied.err
    assert "preview of uncommitted changes" in applied.err and "never applied" in applied.err
    assert writes(sandbox) == []


def test_a_plan_over_uncommitted_edits_says_first_they_are_not_included(
        repo: Repo, sandbox: Sandbox) -> None:
    search = repo.path / "services" / "search.yaml"
    search.write_text(search.read_text() + "# an edit\n")
    (repo.path / "services" / "new.yaml").write_text("# not added yet\n")
    for fmt, first_line in (("text", "⚠ uncommitted edits are not included"),
                            ("markdown", "## ⚠️ uncommitted edits are not included · ")):
        shown = repo.run("plan", str(repo.path), "--format", fmt)
        assert shown.code == Exit.OK, shown.out + shown.err
        assert shown.out.splitlines()[0].startswith(first_line), shown.out[:400]
        assert "services/search.yaml (modified)" in shown.out
        assert "services/new.yaml (untracked)" in shown.out
    document = json.loads(repo.run("plan", str(repo.path), "--format", "json").out)
    assert document["uncommitted"] == ["services/search.yaml"]
    assert document["source_note"].startswith("uncommitted edits are not included")


def test_a_saved_plan_applies_exactly_and_non_interactive_apply_needs_approval(
        repo: Repo, sandbox: Sandbox) -> None:
    refused = repo.run("apply", str(repo.path))
    assert refused.code == Exit.DECLINED and "--auto-approve" in refused.err
    assert writes(sandbox) == []
    plan_file = repo.path.parent / "plan.json"
    assert repo.run("plan", str(repo.path), "--out", str(plan_file)).code == Exit.OK
    applied = repo.run("apply", str(plan_file), cwd=repo.path)
    assert applied.code == Exit.OK, applied.out + applied.err
    keys = {c["idempotency_key"] for c in json.loads(plan_file.read_text())["changes"]}
    sent = {w.get("idempotencyKey") for w in writes(sandbox)} - {None}
    assert sent <= keys and len(sent) == 4  # the grant write carries no key


def test_only_limits_apply_to_the_named_services(repo: Repo, sandbox: Sandbox) -> None:
    typo = repo.run("apply", str(repo.path), "--auto-approve", "--only", "serch")
    assert typo.code == Exit.USAGE and "serch" in typo.err
    result = repo.run("apply", str(repo.path), "--auto-approve", "--only", "search")
    assert result.code == Exit.OK, result.out + result.err
    assert {str(w["serviceId"]) for w in writes(sandbox)} == {"svc-search"}
