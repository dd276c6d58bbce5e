"""``--on-gate-failure revert`` under ``--coordinate``, the parts that need no etcd: the
revert asks the fence again before anything is written (a member that lost the shard
reverts nothing and says why), the rollback's writes are given the same fence, a branch
moved by another member is re-planned against, and a shared checkout's git lock is
waited out or said -- never a traceback, never a corrupted index."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from reconciler import engine
from reconciler.core.evidence import ClusterProof, Proof, ServiceProof, Why
from reconciler.core.outcomes import ApplyReport, ChangeResult, GateReport, Outcome
from reconciler.core.planning import plan
from reconciler.core.plans import Change
from reconciler.engine import wayback
from reconciler.shell import applying
from reconciler.shell import reverting as revert_git
from tests.plan import builders as b

NEW = b.digest("checkout", "v2.4.0")


def failed_run() -> tuple[engine.ApplyRun, Change]:
    """An apply whose promotion of checkout was sent and whose gate ended with sn3
    stating it refused the image."""
    made = plan(b.reference_desired(), b.reference_live())
    change = next(c for c in made.changes if c.service == "checkout")
    refused = ClusterProof(cluster="sn3", proof=Proof.NOT_CONVERGED, why=Why.OTHER_DIGEST,
                           detail="runs the old digest", last_error="refused")
    proof = ServiceProof(service="checkout", app_id="checkout", digest=NEW,
                         proof=Proof.NOT_CONVERGED, rollout_why=Why.ROLLOUT_FAILED,
                         rollout_detail="rollout failed", clusters=(refused,))
    report = ApplyReport(results=(ChangeResult(change=change, outcome=Outcome.APPLIED),),
                         gate=GateReport(attempts=3, waited_seconds=1.0, proofs=(proof,)))
    return engine.ApplyRun(made, report), change


def test_a_member_that_lost_the_shard_reverts_nothing_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = failed_run()
    asked: list[str] = []

    async def fence(c: Change) -> dict[str, object]:
        asked.append(c.service)
        raise applying.Fenced(f"shard 2 of {c.service} is no longer ours (taken over)")

    async def never(*_a: object, **_k: object) -> engine.RevertRun:
        raise AssertionError("reverted a service whose shard is not ours")

    monkeypatch.setattr(wayback, "revert_with", never)
    got = asyncio.run(engine.revert_after(object(), Path("."), run,  # type: ignore[arg-type]
                                          "revert", None, lambda _e: None, fence=fence))
    assert asked == ["checkout"]
    assert got.reverted is None and got.revert_error is not None
    assert "checkout: shard 2 of checkout is no longer ours" in got.revert_error
    assert got.revert_story() == [f"release failed; no revert: {got.revert_error}"]


def test_an_owned_failure_is_reverted_with_the_fence_and_a_moved_branch_is_replanned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = failed_run()
    calls: list[dict[str, Any]] = []
    done = engine.RevertRun(key="k", items=(), commit="c" * 40)

    async def fence(c: Change) -> dict[str, object]:
        return {"shard": 2}

    async def revert_with(*args: object, **kwargs: Any) -> engine.RevertRun:
        calls.append(kwargs)
        if len(calls) < 3:
            raise engine.BranchMoved("the branch moved while the revert was being made")
        return done

    monkeypatch.setattr(wayback, "revert_with", revert_with)
    pull = engine.PullTarget(api_url="http://127.0.0.1:1", repo="acme/fleet", token=None,
                             requested=True)  # --pr: proposed as without coordination
    got = asyncio.run(engine.revert_after(object(), Path("."), run,  # type: ignore[arg-type]
                                          "revert", pull, lambda _e: None, fence=fence))
    assert got.reverted is done and got.revert_error is None
    assert len(calls) == 3 and all(c["fence"] is fence and c["pull"] is pull for c in calls)
    assert [sorted(c["failures"]) for c in calls] == [["checkout"]] * 3


def test_a_branch_that_keeps_moving_is_said_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = failed_run()

    async def revert_with(*args: object, **kwargs: Any) -> engine.RevertRun:
        raise engine.BranchMoved("the branch moved while the revert was being made")

    monkeypatch.setattr(wayback, "revert_with", revert_with)
    got = asyncio.run(engine.revert_after(object(), Path("."), run,  # type: ignore[arg-type]
                                          "revert", None, lambda _e: None))
    assert got.reverted is None and "branch moved" in (got.revert_error or "")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.email=t@example.net", "-c",
                           "user.name=t", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, str]:
    """A repo and a revert commit on top of its head, not yet landed."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "a.yaml").write_text("a: 1\n")
    git(root, "add", "a.yaml")
    git(root, "commit", "-qm", "first")
    commit = revert_git.make_commit(root, git(root, "rev-parse", "HEAD"),
                                    {"a.yaml": b"a: 2\n"}, "revert\n", date="@0 +0000")
    return root, commit


def test_a_lock_held_briefly_by_another_git_process_is_waited_out(
        checkout: tuple[Path, str]) -> None:
    root, commit = checkout
    lock = root / ".git" / "index.lock"
    lock.write_text("")  # another member's `git status` / merge, mid-way
    threading.Timer(0.8, lock.unlink).start()
    started = time.monotonic()
    assert revert_git.fast_forward(root, commit)
    assert time.monotonic() - started >= 0.7
    assert git(root, "rev-parse", "HEAD") == commit
    assert (root / "a.yaml").read_text() == "a: 2\n" and git(root, "status", "--porcelain") == ""


def test_a_lock_never_released_is_a_clear_error_and_changes_nothing(
        checkout: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, commit = checkout
    before = git(root, "rev-parse", "HEAD")
    (root / ".git" / "index.lock").write_text("")
    monkeypatch.setattr(revert_git, "LOCK_TRIES", 3)
    monkeypatch.setattr(revert_git, "LOCK_PAUSE", 0.05)
    with pytest.raises(revert_git.RevertGitError) as caught:
        revert_git.fast_forward(root, commit)
    said = str(caught.value)
    assert "another git process held a lock" in said and commit[:12] in said
    assert "was not landed" in said
    assert git(root, "rev-parse", "HEAD") == before
    (root / ".git" / "index.lock").unlink()
    assert (root / "a.yaml").read_text() == "a: 1\n"
