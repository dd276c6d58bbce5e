"""The desired state a plan is made from: the files of one commit, never the working tree.

Owns reading the config repo as git has it: ``status`` says which commit HEAD is at and
whether tracked files differ from it; the commit's tree under the repo directory is
listed (``ls-tree``) and its YAML blobs read in one ``cat-file --batch``; they are
validated exactly like files on disk (``shell.validating``), so diagnostics name the
same repo-relative path and line. Files that are on disk but in no commit (untracked,
ignored, staged but not committed) are never desired state: they are listed apart
(``untracked``) so a plan can say it left them out.

The commit's tree id under the repo directory and its files (path -> blob id) come with
it: a saved plan is bound to them, not to the commit id (``core.binding``). Tracked files
with edits the commit does not hold are named (``Provenance.uncommitted``), so a plan can
say first that it left them out.

``load_worktree`` is ``plan --worktree``: the files as they are on disk (tracked,
modified, untracked) minus what git ignores, read like a directory outside git; a
preview with no tree to bind, which apply refuses.

Reading a commit is atomic: the files and the commit id come from one object, so no
before/after check is needed. A directory outside any git work tree is read from disk
as before, with no commit (``in_git`` is False): validate and plan work, apply has no
commit to bind and must refuse.

Callers: the engine (plan, apply) and the watcher (which passes a ``BlobCache`` so that
unchanged blobs are neither read nor validated again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.core.diagnostics import Diagnostic
from reconciler.core.planning import Provenance
from reconciler.shell import gitrepo, loading, validating
from reconciler.shell.gitrepo import GitError

__all__ = ["CommittedLoad", "GitError", "load", "load_at", "load_worktree"]

_SYMLINK = "120000"
_SUBMODULE = "160000"


@dataclass(frozen=True, slots=True)
class CommittedLoad:
    """What was loaded, from where.

    ``result``: the validated desired state or every problem (as ``load_repo`` gives).
    ``provenance``: the commit read (None outside git, or before the first commit) and
    whether tracked files under the repo directory differ from it. ``untracked``: YAML
    files under the repo directory (dot-directories skipped, like the loader) that are
    on disk but not in the commit read, so not part of the desired state; sorted,
    repo-relative. ``in_git``: False for a plain directory, read from disk.
    """

    result: validating.LoadResult
    provenance: Provenance
    untracked: tuple[str, ...]
    in_git: bool


def load(root: Path, *, cache: validating.BlobCache | None = None) -> CommittedLoad:
    """Load the desired state at ``root`` from the commit HEAD is at.

    Raises ``GitError`` when git cannot answer; never for bad input (diagnostics)."""
    refused = validating.check_root(root)
    if refused is not None:
        return CommittedLoad(refused, Provenance(path=str(root.resolve())), (), in_git=False)
    provenance = gitrepo.provenance(root)
    on_disk, refused_on_disk = loading.discover(root)
    if provenance.commit is None:
        if not _in_git(root):
            # The walk just made is the one the files are read from: no second walk.
            return CommittedLoad(validating.load_files(root, on_disk, refused_on_disk),
                                 provenance, (), in_git=False)
        problem = Diagnostic(root.as_posix(), 0, 0, "", (
            "the git repository has no commit yet: plan and apply read the desired state "
            "from the commit HEAD is at, so commit the files first (`reconcile validate` "
            "checks the working tree)"))
        result = validating.LoadResult(None, (problem,), ())
        return CommittedLoad(result, provenance, on_disk, in_git=True)

    entries = gitrepo.tree(root, provenance.commit)
    result, untracked = _load_commit(root, provenance.commit, on_disk, cache, entries)
    provenance = dataclasses.replace(
        provenance, tree=gitrepo.tree_id(root, provenance.commit),
        files=tuple((e.path, e.oid) for e in entries),
        uncommitted=gitrepo.uncommitted(root) if provenance.dirty else ())
    return CommittedLoad(result, provenance, untracked, in_git=True)


def load_worktree(root: Path) -> CommittedLoad:
    """``plan --worktree``: the desired state as the working tree holds it -- tracked,
    modified and untracked files, never one git ignores -- with the commit HEAD is at as
    information only. ``provenance.worktree`` is True and ``dirty`` says whether anything
    differs from that commit; there is no tree to bind (apply refuses a preview).

    Raises ``GitError`` when git cannot answer."""
    refused = validating.check_root(root)
    if refused is not None:
        return CommittedLoad(refused, Provenance(path=str(root.resolve()), worktree=True), (),
                             in_git=False)
    provenance = gitrepo.provenance(root)
    if provenance.commit is None and not _in_git(root):
        return CommittedLoad(validating.load_repo(root),
                             dataclasses.replace(provenance, worktree=True), (), in_git=False)
    ignored = gitrepo.ignored_files(root)
    result = validating.load_repo(root, exclude=ignored)
    committed: set[str] = set()
    if provenance.commit is not None:
        committed = {e.path for e in gitrepo.tree(root, provenance.commit)}
    # ``result.files``: what the one walk found on disk, minus what git ignores.
    untracked = tuple(rel for rel in result.files if rel not in committed)
    edited = gitrepo.uncommitted(root) if provenance.commit is not None else ()
    provenance = dataclasses.replace(provenance, worktree=True, uncommitted=edited,
                                     dirty=bool(edited or untracked or provenance.dirty))
    return CommittedLoad(result, provenance, untracked, in_git=True)


def load_at(root: Path, ref: str) -> tuple[validating.LoadResult, str]:
    """Load the desired state at ``root`` as commit ``ref`` (a branch, tag, or sha) has it,
    whatever the working tree holds; returns the result and the full commit id.

    Raises ``GitError`` when ``ref`` names no commit or git cannot answer."""
    commit = gitrepo.resolve(root, ref)
    result, _ = _load_commit(root, commit, (), None, gitrepo.tree(root, commit))
    return result, commit


def _load_commit(root: Path, commit: str, on_disk: Sequence[str],
                 cache: validating.BlobCache | None, entries: Sequence[gitrepo.TreeEntry],
                 ) -> tuple[validating.LoadResult, tuple[str, ...]]:
    files: list[tuple[str, str]] = []
    problems: list[Diagnostic] = []
    for entry in entries:
        parts = entry.path.split("/")
        if any(part.startswith(".") for part in parts):
            continue  # like the loader on disk: dot-entries are not desired state
        is_yaml = entry.path.endswith(loading.YAML_SUFFIXES)
        if entry.mode == _SUBMODULE:
            if is_yaml:
                problems.append(_file_problem(entry.path, "is a git submodule, not a file"))
            continue
        if not is_yaml:
            continue
        if entry.mode == _SYMLINK:
            problems.append(_file_problem(entry.path, "is a symbolic link; links are not "
                                                      "followed (put the file itself in the repo)"))
            continue
        files.append((entry.path, entry.oid))

    committed = {path for path, _ in files}
    untracked = tuple(rel for rel in on_disk if rel not in committed)
    if not files and on_disk:
        problems.append(Diagnostic(root.as_posix(), 0, 0, "", (
            f"commit {commit[:12]} has no YAML file here; plan and apply read "
            f"the commit, and the {len(untracked)} YAML file(s) on disk are not committed")))

    def read(oids: Sequence[str]) -> list[bytes | int]:
        return gitrepo.read_blobs(root, oids, limit=loading.MAX_FILE_BYTES)

    return validating.load_blobs(root, files, read, problems, cache=cache), untracked


def _in_git(root: Path) -> bool:
    return gitrepo.toplevel(root) is not None


def _file_problem(rel: str, message: str) -> Diagnostic:
    return Diagnostic(rel, 1, 1, "", message)
