"""Reading the config repo's git state: which commit, and whether the tree is clean.

Owns the two questions apply and watch ask of git, answered with the ``git`` command
(never by parsing ``.git`` by hand). A directory outside any git work tree has no commit;
that is reported as such, never invented.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from reconciler.core.planning import Provenance


class GitError(Exception):
    """git could not answer (not installed, corrupt repository, ...)."""


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30,
            check=False, env={**os.environ, "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git failed in {root}: {exc}") from exc


def provenance(root: Path) -> Provenance:
    """The commit HEAD points at and whether ``root`` has uncommitted changes under it.

    One ``git status --porcelain=v2 --branch`` answers both (the watcher asks often)."""
    status = _git(root, "status", "--porcelain=v2", "--branch", "--untracked-files=all",
                  "--", ".")
    path = str(root.resolve())
    if status.returncode != 0:
        if "not a git repository" in status.stderr:
            return Provenance(commit=None, dirty=False, path=path)
        raise GitError(f"git status failed in {root}: {status.stderr.strip()[:300]}")
    commit = None
    dirty = False
    for line in status.stdout.splitlines():
        if line.startswith("# branch.oid "):
            oid = line.split(" ", 2)[2].strip()
            commit = None if oid == "(initial)" else oid
        elif line and not line.startswith("#"):
            dirty = True
    return Provenance(commit=commit, dirty=dirty, path=path)
