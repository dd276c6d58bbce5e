"""Writing a revert into git: a commit built from the branch head's own blobs, never from
the working tree, and landed on the branch only as a fast-forward.

Owns the git side of ``reconcile revert`` and ``apply --on-gate-failure revert``: reading
a file as a commit holds it (``blob``), finding a revert already made by its key (the
``Reconcile-Revert:`` trailer, ``find_keyed``) or the last commit that touched a file
(``last_touch``), building the commit in a temporary index (``make_commit``: the new
bytes are the caller's, spliced by ``shell.pinning``), and landing it
(``fast_forward``: ``git merge --ff-only``, which refuses when the branch moved
meanwhile -- the compare-and-swap that keeps a newer intent from being overwritten).

Why a temporary index and fixed dates: the commit is made without touching the working
tree or the real index, so a kill -9 before the fast-forward leaves the repo exactly as
it was (at most an unreferenced object); and the same revert built by two processes has
the same tree, message and dates, hence the same commit id, so two watchers landing it
land one commit.

Must not: decide what to revert or which digest (core), or talk to GitHub
(``shell.pullrequests``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from reconciler.core.sanitize import safe

_ENV = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
_IDENTITY = ("reconcile", "reconcile@localhost")


class RevertGitError(Exception):
    """git could not do what the revert needs; the message names the step."""


def _git(root: Path, *args: str, env: Mapping[str, str] | None = None,
         stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(root), *args], input=stdin, capture_output=True,
                              timeout=60, check=False, env={**os.environ, **_ENV, **(env or {})})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RevertGitError(f"git {args[0]} failed in {root}: {safe(exc)}") from None


def _ok(done: subprocess.CompletedProcess[bytes], what: str) -> str:
    if done.returncode != 0:
        raise RevertGitError(f"{what} failed: "
                             f"{safe(done.stderr.decode('utf-8', 'replace').strip(), 300)}")
    return done.stdout.decode("utf-8", "surrogateescape")


def prefix(root: Path) -> str:
    """The desired-state directory's path inside the repository ("" at its top)."""
    return _ok(_git(root, "rev-parse", "--show-prefix"), "git rev-parse").strip()


def head(root: Path) -> str:
    return _ok(_git(root, "rev-parse", "--verify", "HEAD^{commit}"), "git rev-parse HEAD").strip()


def branch(root: Path) -> str | None:
    """The current branch's name; None on a detached HEAD."""
    done = _git(root, "symbolic-ref", "--quiet", "--short", "HEAD")
    return done.stdout.decode().strip() or None if done.returncode == 0 else None


def blob(root: Path, commit: str, rel: str) -> bytes | None:
    """``rel`` (relative to the desired-state directory) as ``commit`` holds it; None when
    the commit has no such file."""
    done = _git(root, "cat-file", "blob", f"{commit}:{prefix(root)}{rel}")
    return done.stdout if done.returncode == 0 else None


def find_keyed(root: Path, key: str, ref: str = "HEAD") -> str | None:
    """The commit reachable from ``ref`` whose message carries ``trailer: key``."""
    done = _git(root, "log", "--format=%H", "-n", "1", "-F", f"--grep=: {key}", ref)
    found = done.stdout.decode().strip() if done.returncode == 0 else ""
    return found or None


def last_touch(root: Path, rel: str, ref: str = "HEAD") -> tuple[str, str] | None:
    """The newest commit reachable from ``ref`` that changed ``rel``, and its message."""
    done = _git(root, "log", "-n", "1", "--format=%H%x00%B", ref, "--", rel)
    text = done.stdout.decode("utf-8", "replace") if done.returncode == 0 else ""
    if "\0" not in text:
        return None
    commit, _, body = text.partition("\0")
    return commit.strip(), body


def subject_of(root: Path, commit: str) -> str:
    return _ok(_git(root, "log", "-n", "1", "--format=%s", commit), "git log").strip()


def make_commit(root: Path, parent: str, files: Mapping[str, bytes | None], message: str,
                *, date: str) -> str:
    """A commit whose parent is ``parent`` and whose tree is ``parent``'s with ``files``
    (paths relative to the desired-state directory; None: removed) -- built in a
    temporary index, nothing else touched. ``date`` (git's ``@SECONDS +0000``) is both the
    author and committer date, so the same revert is the same commit."""
    base = prefix(root)
    with tempfile.TemporaryDirectory(prefix="reconcile-revert-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _ok(_git(root, "read-tree", parent, env=env), "git read-tree")
        for rel, data in sorted(files.items()):
            path = base + rel
            if data is None:
                # A path after ``--`` is relative to the directory git runs in (``root``,
                # an environment's directory in a pipeline repo), not to the top: the
                # prefixed path would name nothing there and remove nothing.
                _ok(_git(root, "update-index", "--force-remove", "--", rel, env=env),
                    "git update-index")
                continue
            oid = _ok(_git(root, "hash-object", "-w", "--stdin", stdin=data),
                      "git hash-object").strip()
            _ok(_git(root, "update-index", "--add", "--cacheinfo", f"100644,{oid},{path}",
                     env=env), "git update-index")
        tree = _ok(_git(root, "write-tree", env=env), "git write-tree").strip()
    who = _identity(root)
    stamp = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date,
             "GIT_AUTHOR_NAME": who[0], "GIT_AUTHOR_EMAIL": who[1],
             "GIT_COMMITTER_NAME": who[0], "GIT_COMMITTER_EMAIL": who[1]}
    return _ok(_git(root, "commit-tree", tree, "-p", parent, "-F", "-", env=stamp,
                    stdin=message.encode()), "git commit-tree").strip()


def _identity(root: Path) -> tuple[str, str]:
    name = _git(root, "config", "user.name").stdout.decode().strip()
    email = _git(root, "config", "user.email").stdout.decode().strip()
    return (name or _IDENTITY[0], email or _IDENTITY[1])


#: How often, and how far apart, a fast-forward is tried again while another git process
#: holds the checkout's index lock (several watchers of one group sharing a checkout, each
#: reading ``git status``, or another member landing its own revert): git never waits for
#: the lock itself, and a lock held that long is not a brief one.
LOCK_TRIES, LOCK_PAUSE = 40, 0.25


def _locked(done: subprocess.CompletedProcess[bytes]) -> bool:
    """git refused because another git process holds a lock of this repository."""
    said = done.stderr.decode("utf-8", "replace")
    return done.returncode != 0 and ".lock" in said and "File exists" in said


def fast_forward(root: Path, commit: str) -> bool:
    """Move the current branch (index and working tree too) to ``commit`` when that is a
    fast-forward; False when the branch moved and it is not (nothing changed then).

    A lock held by another git process of the same checkout (``index.lock``, the
    branch's ref lock) is waited out for ``LOCK_TRIES`` × ``LOCK_PAUSE`` seconds, then
    is a clear error naming it: git's lock is what keeps two writers from corrupting
    the index, never something to remove."""
    done = _git(root, "merge", "--ff-only", "--quiet", commit)
    for _ in range(LOCK_TRIES):
        if not _locked(done):
            break
        time.sleep(LOCK_PAUSE)
        done = _git(root, "merge", "--ff-only", "--quiet", commit)
    if done.returncode == 0:
        return True
    if _locked(done):
        raise RevertGitError(f"git merge --ff-only: another git process held a lock of "
                             f"{root} for {LOCK_TRIES * LOCK_PAUSE:g}s; the revert commit "
                             f"{commit[:12]} was not landed: "
                             f"{safe(done.stderr.decode('utf-8', 'replace').strip(), 300)}")
    if _git(root, "merge-base", "--is-ancestor", "HEAD", commit).returncode == 1:
        return False
    raise RevertGitError("git merge --ff-only failed: "
                         f"{safe(done.stderr.decode('utf-8', 'replace').strip(), 300)}")
