"""Issue 20 against the sandbox: a release a cluster refuses is reverted in git first
(one keyed commit pinning the last proven digest, one hold), rolled back through the
control plane's compare-and-swap rollback and proven on every cluster; a silent cluster
is no reason to revert; a held digest is NO-GO until the hold is released by a commit."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo, git
from tests.plan.builders import digest
from tests.revert.commits import out, revert_commits

pytestmark = pytest.mark.integration

OLD = digest("checkout", "v2.3.0")  # what runs, proven, before the apply
NEW = digest("checkout", "v2.4.0")  # what the repo pins: the release sn3 refuses


def rollbacks(sandbox: Sandbox) -> list[dict[str, object]]:
    """The control plane's audit rows of rollback calls that made (or replayed) one."""
    return [r for r in sandbox.audit() if r["method"] == "rollbackServiceImageRelease"]


def rollback_keys(sandbox: Sandbox) -> set[str]:
    return {str(r.get("idempotencyKey")) for r in rollbacks(sandbox) if r["result"] == "ok"}


def pinned(repo: Repo) -> str:
    return (repo.path / "services" / "checkout.yaml").read_text()


def apply_reverting(repo: Repo, *extra: str, **env: str) -> tuple[int, str, str]:
    done = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout",
                    "--on-gate-failure", "revert", *extra, timeout=240, **env)
    return done.code, done.out, done.err


def test_a_refused_release_is_reverted_held_rolled_back_and_proven(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    code, stdout, stderr = apply_reverting(repo)
    assert code == Exit.NOT_CONVERGED, stdout + stderr  # the release failed: still 15
    assert "release failed, rolled back to checkout v2.3.0" in stderr, stdout + stderr
    assert "proven on every cluster" in stderr

    # git: one revert commit pinning the last proven digest, and one hold.
    [commit] = revert_commits(repo.path)
    assert "revert checkout to v2.3.0" in commit
    body = out(repo.path, "log", "-1", "--format=%B")
    assert "sn3" in body and NEW in body and OLD in body and "pulled-digest-mismatch" in body
    text = pinned(repo)
    assert OLD in text and NEW not in text and "tag: v2.3.0" in text
    held = list((repo.path / "holds").glob("*.yaml"))
    assert len(held) == 1 and NEW in held[0].read_text()
    assert out(repo.path, "status", "--porcelain") == ""
    # the control plane: one rollback, to the proven release, proven by the judge.
    assert len(rollback_keys(sandbox)) == 1
    status = sandbox.rollout_statuses()["svc-checkout"]
    assert status["status"] == "rolled-back" and status["expectedDigest"] == OLD, status

    # The next plan: nothing to do for checkout, proven.
    again = repo.run("plan", str(repo.path), "--only", "checkout", "--detailed-exitcode")
    assert again.code == Exit.OK, again.out + again.err

    # Re-pinning the failed digest (a merge of an old branch, a pin) is NO-GO held.
    path = repo.path / "services" / "checkout.yaml"
    path.write_text(text.replace(OLD, NEW).replace("tag: v2.3.0", "tag: v2.4.0"))
    git(repo.path, "commit", "-qam", "promote checkout to v2.4.0 again")
    refused = repo.run("plan", str(repo.path), "--only", "checkout", "--detailed-exitcode")
    assert refused.code == Exit.CHANGES_NO_GO, refused.out + refused.err
    assert "held" in refused.out and "reconcile release-hold checkout" in refused.out

    # The history tells the story: the failed release, the revert, the proven rollback.
    history = repo.run("history", str(repo.path))
    assert history.code == 0, history.err
    told = history.out
    failed_at = told.index("NOT converged")
    reverted_at = told.index("REVERTED in git")
    rolled_at = told.index("rollback checkout")
    assert rolled_at < reverted_at < failed_at, told  # newest first: one story
    assert "pinned back to v2.3.0" in told and "pulled-digest-mismatch" in told

    # Released by a commit, the digest may be planned again.
    released = repo.run("release-hold", "checkout", NEW, "-C", str(repo.path))
    assert released.code == 0, released.out + released.err
    assert not list((repo.path / "holds").glob("*.yaml"))
    free = repo.run("plan", str(repo.path), "--only", "checkout", "--detailed-exitcode")
    assert free.code == Exit.CHANGES, free.out + free.err


def test_a_silent_cluster_is_not_a_failure_no_revert(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=6, interval_seconds=0.3)
    head = out(repo.path, "rev-parse", "HEAD")
    sandbox.fault("sn3", "blackhole")
    code, stdout, stderr = apply_reverting(repo)
    assert code != Exit.OK, stdout + stderr
    assert not revert_commits(repo.path) and out(repo.path, "rev-parse", "HEAD") == head
    assert not rollbacks(sandbox)
    assert "rolled back" not in stderr


@pytest.mark.parametrize("point", ["revert-before-commit", "revert-after-commit",
                                   "revert-gate"])
def test_kill_9_at_each_step_then_a_rerun_makes_one_revert_one_hold_one_rollback(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, point: str) -> None:
    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    code, stdout, stderr = apply_reverting(repo, RECONCILE_CRASH_AT=point)
    assert code == -9, (code, stdout, stderr)  # killed where asked
    committed = {"revert-before-commit": 0}.get(point, 1)
    assert len(revert_commits(repo.path)) == committed
    sandbox.wait_settled()
    code, stdout, stderr = apply_reverting(repo)
    assert code in (Exit.OK, Exit.NOT_CONVERGED), stdout + stderr
    if code == Exit.NOT_CONVERGED:  # the rerun met the failure itself and reverted
        assert "release failed, rolled back to checkout v2.3.0" in stderr, stderr
        assert "and proven on every cluster" in stderr
    # Exactly one of each, counted where they live.
    assert len(revert_commits(repo.path)) == 1
    assert len(list((repo.path / "holds").glob("*.yaml"))) == 1
    assert len(rollback_keys(sandbox)) == 1, rollbacks(sandbox)
    status = sandbox.rollout_statuses()["svc-checkout"]
    assert status["status"] == "rolled-back" and status["expectedDigest"] == OLD, status
    # And a third run changes nothing.
    code, stdout, stderr = apply_reverting(repo)
    assert code == Exit.OK, stdout + stderr
    assert len(revert_commits(repo.path)) == 1 and len(rollback_keys(sandbox)) == 1


def test_a_newer_intent_on_the_branch_is_not_overwritten_a_pull_request_names_both(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, tmp_path: Path) -> None:
    """The gate fails; before the revert lands, the branch pins checkout to v2.5.0. The
    revert, re-planned against the branch head, opens a pull request (the GitHub stand-in)
    naming the failed release and the newer pin, and changes neither the branch nor the
    live side."""
    import asyncio

    from reconciler import engine
    from reconciler.core import reverts
    from reconciler.shell.endpoints import Overrides
    from tests.comment.conftest import TOKEN
    from tests.comment.github_standin import StandIn

    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(repo.path, "remote", "add", "origin", str(remote))
    git(repo.path, "push", "-q", "origin", "HEAD")
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    env = repo.env()
    overrides = Overrides.from_env(env)
    run = asyncio.run(engine.apply_async(repo.path, overrides=overrides, env=env,
                                         hook=lambda _event: None,
                                         only=frozenset({"checkout"})))
    failed = reverts.failed(run.report.gate)
    assert set(failed) == {"checkout"} and failed["checkout"].digest == NEW

    newer = sandbox.push("checkout", "v2.5.0")
    path = repo.path / "services" / "checkout.yaml"
    path.write_text(path.read_text().replace(NEW, newer).replace("tag: v2.4.0", "tag: v2.5.0"))
    git(repo.path, "commit", "-qam", "promote checkout to v2.5.0")
    head = out(repo.path, "rev-parse", "HEAD")

    standin = StandIn().start()
    try:
        standin.add_user(TOKEN, "github-actions[bot]", bot=True)
        standin.state.git_remote = str(remote)
        target = engine.PullTarget(api_url=standin.api_url, repo="acme/fleet", token=TOKEN)

        async def revert() -> engine.RevertRun:
            desired, _ = engine.load_consistent(repo.path)
            async with engine.Reconciler(repo.path, desired, overrides=overrides,
                                         env=env) as reconciler:
                return await engine.revert_with(reconciler, repo.path, ["checkout"],
                                                failures=failed, pull=target,
                                                hook=lambda _event: None, rollback=True)

        done = asyncio.run(revert())
        again = asyncio.run(revert())  # a rerun finds the same pull request
        pulls = dict(standin.state.pull_requests)
    finally:
        standin.stop()
    assert done.pull is not None and done.rollback is None
    assert again.pull is not None and again.pull.number == done.pull.number
    assert not again.pull.created and len(pulls) == 1
    body = pulls[done.pull.number]["body"]
    assert NEW in body and newer in body and OLD in body, body  # both intents, and the way back
    assert "changed on the branch since the failed apply" in body
    # Nothing overwritten, nothing rolled back.
    assert out(repo.path, "rev-parse", "HEAD") == head and newer in path.read_text()
    assert not rollbacks(sandbox)
    branch = pulls[done.pull.number]["head"]["ref"]
    assert out(repo.path, "ls-remote", "origin", f"refs/heads/{branch}").strip()


def test_watch_apply_reverts_and_does_not_try_the_failed_release_again(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    from tests.watch.test_watch_e2e import watching

    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    with watching(repo, "--apply", "--on-gate-failure", "revert", "--only", "checkout",
                  "--resync", "1") as w:
        told = w.wait_for(lambda e: e["event"] == "reverted", timeout=150)
        assert any("rolled back to checkout v2.3.0 and proven" in line
                   for line in told.get("lines", [])) or \
            "rolled back" in json_text(told), told
        w.wait_for(lambda e: e["event"] == "plan" and e.get("verdict") == "no_changes",
                   timeout=60)
        promotions = [a for a in sandbox.audit() if a["method"] == "promoteServiceImageRelease"]
        w.drain(4.0)  # several resync cycles
        again = [a for a in sandbox.audit() if a["method"] == "promoteServiceImageRelease"]
        assert len(again) == len(promotions) == 1  # the failed release is not tried again
    assert len(revert_commits(repo.path)) == 1 and len(rollback_keys(sandbox)) == 1


def json_text(event: dict[str, object]) -> str:
    import json

    return json.dumps(event)


def test_reconcile_revert_by_hand_commits_once_then_apply_rolls_back(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    failed = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert failed.code == Exit.NOT_CONVERGED, failed.out + failed.err
    assert not revert_commits(repo.path)  # --on-gate-failure stop: as before

    done = repo.run("revert", "checkout", "-C", str(repo.path))
    assert done.code == 0, done.out + done.err
    assert "pinned back to v2.3.0" in done.out and "proven: journal:" in done.out
    assert "proven: control plane:" in done.out and "revert committed" in done.out
    again = repo.run("revert", "checkout", "-C", str(repo.path))
    assert again.code == 0 and "already reverted" in again.out, again.out + again.err
    assert len(revert_commits(repo.path)) == 1

    rolled = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert rolled.code == Exit.OK, rolled.out + rolled.err
    assert len(rollback_keys(sandbox)) == 1


def test_a_revert_without_a_proven_release_writes_nothing(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    head = out(repo.path, "rev-parse", "HEAD")
    refused = repo.run("revert", "checkout", "-C", str(repo.path))  # an empty journal
    assert refused.code == Exit.ERROR, refused.out + refused.err
    assert "refusing to guess" in refused.err and "nothing written" in refused.err
    assert out(repo.path, "rev-parse", "HEAD") == head


def test_two_appliers_reacting_to_one_failure_make_one_revert_and_one_rollback(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    import concurrent.futures

    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _i: apply_reverting(repo), range(2)))
    codes = sorted(code for code, _o, _e in runs)
    assert all(c in (Exit.OK, Exit.NOT_CONVERGED, Exit.CONFLICT, Exit.REFUSED_NO_GO,
                     Exit.ERROR) for c in codes), runs
    sandbox.wait_settled()
    settle = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert settle.code == Exit.OK, (runs, settle.out, settle.err)
    assert len(revert_commits(repo.path)) == 1, runs
    assert len(list((repo.path / "holds").glob("*.yaml"))) == 1
    assert len(rollback_keys(sandbox)) == 1, rollbacks(sandbox)
