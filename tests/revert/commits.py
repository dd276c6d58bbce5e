"""Reading a repository's revert commits, for the revert scenarios (single and sharded)."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: the trailer every revert commit carries: how a revert is told from any other commit
TRAILER = "Reconcile-Revert:"


def out(root: Path, *args: str) -> str:
    """What ``git -C ROOT ARGS...`` printed (it must succeed)."""
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


def revert_commits(root: Path) -> list[str]:
    """``HASH subject`` of each commit carrying the revert trailer, newest first."""
    return [line for line in out(root, "log", "--format=%H %s", "-F",
                                 f"--grep={TRAILER}").splitlines() if line]
