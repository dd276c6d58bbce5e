"""``shell.landing``: GitHub's word on a branch's protection (the stand-in, over real HTTP),
the upstream a checkout tracks, and the revert's fast-forward push with the remote's
refusal in its own words (a real bare repository with the stand-in's GH006 hook)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.shell import landing
from tests.comment.conftest import TOKEN
from tests.comment.github_standin import StandIn
from tests.e2e_repo import git
from tests.notify.receivers import closed_port_url


@pytest.fixture
def github() -> Iterator[StandIn]:
    standin = StandIn().start()
    standin.add_user(TOKEN, "github-actions[bot]", bot=True)
    yield standin
    standin.stop()


def checkout(tmp_path: Path) -> tuple[Path, Path, str]:
    """A checkout with one commit and a bare remote (not yet tracked); its branch."""
    remote, root = tmp_path / "remote.git", tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "a.yaml").write_text("a: 1\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "one")
    git(root, "remote", "add", "origin", str(remote))
    branch = subprocess.run(["git", "-C", str(root), "branch", "--show-current"],
                            check=True, capture_output=True, text=True).stdout.strip()
    return root, remote, branch


def commit_on_top(root: Path) -> str:
    (root / "a.yaml").write_text("a: 2\n")
    git(root, "commit", "-qam", "two")
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_protection_is_githubs_word_and_unknown_when_it_cannot_be_had(
        github: StandIn, tmp_path: Path) -> None:
    root, remote, branch = checkout(tmp_path)
    git(root, "push", "-q", "origin", branch)
    github.state.git_remote = str(remote)
    free = landing.protection(github.api_url, "acme/fleet", TOKEN, branch)
    assert free.protected is False and f"{branch} is not protected" in free.said
    github.protect(branch)
    held = landing.protection(github.api_url, "acme/fleet", TOKEN, branch)
    assert held.protected is True and "protected on GitHub (acme/fleet)" in held.said
    missing = landing.protection(github.api_url, "acme/fleet", TOKEN, "no-such-branch")
    assert missing.protected is None and "Branch not found" in missing.said
    assert TOKEN not in missing.said
    started = time.monotonic()
    away = landing.protection(closed_port_url().removesuffix("/hook"), "acme/fleet", None,
                              branch)
    assert away.protected is None and "could not ask GitHub" in away.said
    assert time.monotonic() - started < landing.BUDGET + 2 * landing.TIMEOUT


def test_the_upstream_is_what_the_checkout_tracks(tmp_path: Path) -> None:
    root, _remote, branch = checkout(tmp_path)
    assert landing.upstream(root, branch) is None
    git(root, "push", "-q", "-u", "origin", branch)
    tracked = landing.upstream(root, branch)
    assert tracked == landing.Upstream("origin", branch) and str(tracked) == f"origin/{branch}"


def test_the_push_is_a_fast_forward_and_a_refusal_is_said_in_the_remotes_words(
        github: StandIn, tmp_path: Path) -> None:
    root, remote, branch = checkout(tmp_path)
    git(root, "push", "-q", "-u", "origin", branch)
    target = landing.Upstream("origin", branch)
    github.state.git_remote = str(remote)
    github.protect(branch)
    commit = commit_on_top(root)
    refused = landing.push(root, target, commit)
    assert not refused.ok and refused.refused
    assert "GH006: Protected branch update failed" in refused.said
    github.state.protected.clear()
    (remote / "hooks" / "pre-receive").unlink()
    assert landing.push(root, target, commit).ok
    assert landing.push(root, target, commit).ok  # a rerun: already there
    # A commit that is not a fast-forward of the remote branch is refused, never forced.
    git(root, "reset", "-q", "--hard", "HEAD~1")
    (root / "a.yaml").write_text("a: 3\n")
    git(root, "commit", "-qam", "three")
    other = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                           capture_output=True, text=True).stdout.strip()
    moved = landing.push(root, target, other)
    assert not moved.ok and moved.refused and "was refused" in moved.said
    assert subprocess.run(["git", "-C", str(root), "ls-remote", "origin", branch],
                          check=True, capture_output=True, text=True).stdout.startswith(commit)


def test_a_remote_that_cannot_be_reached_is_no_refusal(tmp_path: Path) -> None:
    root, _remote, branch = checkout(tmp_path)
    git(root, "push", "-q", "-u", "origin", branch)
    git(root, "remote", "set-url", "origin", str(tmp_path / "gone.git"))
    failed = landing.push(root, landing.Upstream("origin", branch), commit_on_top(root))
    assert not failed.ok and not failed.refused and "failed" in failed.said
