"""The desired state a plan is made from: the files of one commit, never the working tree.

Owns reading the config repo as git has it: ``status`` says which commit HEAD is at and
whether tracked files differ from it; the commit's tree under the repo directory is
listed (``ls-tree``) and its YAML blobs read in one ``cat-file --batch``; they are
validated exactly like files on disk (``shell.validating``), so diagnostics name the
same repo-relative path and line. Files that are on disk but in no commit (untracked,
ignored, staged but not committed) are never desired state: they are listed apart
(``untracked``) so a plan can say it left them out.

Reading a commit is atomic: the files and the commit id come from one object, so no
before/after check is needed. A directory outside any git work tree is read from disk
as before, with no commit (``in_git`` is False): validate and plan work, apply has no
commit to bind and must refuse.

Callers: the engine (plan, apply) and the watcher (which passes a ``BlobCache`` so that
unchanged blobs are neither read nor validated again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.core.diagnostics import Diagnostic
from reconciler.core.planning import Provenance
from reconciler.shell import gitrepo, loading, validating
from reconciler.shell.gitrepo import GitError

__all__ = ["CommittedLoad", "GitError", "load", "load_at"]

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
    on_disk, _ = loading.discover(root)
    if provenance.commit is None:
        if not _in_git(root):
            return CommittedLoad(validating.load_repo(root), provenance, (), in_git=False)
        problem = Diagnostic(root.as_posix(), 0, 0, "", (
            "the git repository has no commit yet: plan and apply read the desired state "
            "from the commit HEAD is at, so commit the files first (`reconcile validate` "
            "checks the working tree)"))
        result = validating.LoadResult(None, (problem,), ())
        return CommittedLoad(result, provenance, on_disk, in_git=True)

    result, untracked = _load_commit(root, provenance.commit, on_disk, cache)
    return CommittedLoad(result, provenance, untracked, in_git=True)


def load_at(root: Path, ref: str) -> tuple[validating.LoadResult, str]:
    """Load the desired state at ``root`` as commit ``ref`` (a branch, tag, or sha) has it,
    whatever the working tree holds; returns the result and the full commit id.

    Raises ``GitError`` when ``ref`` names no commit or git cannot answer."""
    commit = gitrepo.resolve(root, ref)
    result, _ = _load_commit(root, commit, (), None)
    return result, commit


def _load_commit(root: Path, commit: str, on_disk: Sequence[str],
                 cache: validating.BlobCache | None,
                 ) -> tuple[validating.LoadResult, tuple[str, ...]]:
    files: list[tuple[str, str]] = []
    problems: list[Diagnostic] = []
    for entry in gitrepo.tree(root, commit):
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
