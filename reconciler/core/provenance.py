"""Where the desired state came from: ``Provenance`` (commit, cleanliness, tree).

Owns the value only; ``core.planning`` re-exports it (the planner's input) and the
creation kind (``core.kinds.create``) binds its preflight request to its commit.

Pure: no I/O imports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Provenance:
    """Where the desired state came from: the commit and whether the tree was clean."""

    commit: str | None = None
    dirty: bool = False
    path: str | None = None  # the repo directory the plan was made from
    root: str | None = None  # the git work tree holding it; None: not a git repository
    untracked: tuple[str, ...] = ()  # YAML under ``path`` in no commit: reported, never read
    #: the git tree id of ``path`` at ``commit`` and its files (path -> blob id): what a
    #: saved plan is bound to (``core.binding``); None/empty outside git or for a preview
    tree: str | None = None
    files: tuple[tuple[str, str], ...] = ()
    #: tracked files under ``path`` whose edits the commit does not hold (never read,
    #: except by a worktree preview)
    uncommitted: tuple[str, ...] = ()
    #: ``plan --worktree``: the working tree as it is, a preview never applied
    worktree: bool = False
