"""A fresh git repository holding a copy of an example directory, one commit deep: what a
user has after copying an example and committing it, without the sandbox settings that
``tests.e2e_repo`` writes in (for tests of the unedited examples)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.e2e_repo import git


def committed_copy(source: Path, path: Path, message: str) -> Path:
    """Copy ``source`` to ``path``, make it a repository and commit it all; ``path``."""
    shutil.copytree(source, path)
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-qm", message)
    return path
