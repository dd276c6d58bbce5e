"""Reading the config repo's git state: which commit, whether the tree is clean, and
the commit's own files.

Owns the questions plan, apply and watch ask of git, answered with the ``git`` command
(never by parsing ``.git`` by hand): the commit HEAD is at and whether tracked files
differ from it (``status``), which files those are (``uncommitted``), the files of that
commit under a directory (``tree``), the id of that directory's tree (``tree_id``: what a
saved plan is bound to), their bytes (``read_blobs``: one ``git cat-file --batch`` for
all of them), and which files on disk git ignores (``ignored_files``: ``plan
--worktree`` leaves them out). A directory outside any git work tree has no commit;
that is reported as such, never invented.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.core.planning import Provenance


class GitError(Exception):
    """git could not answer (not installed, corrupt repository, ...)."""


_ENV = {"LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"}


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30,
            check=False, env={**os.environ, **_ENV})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git failed in {root}: {exc}") from exc


def _git_bytes(root: Path, *args: str, stdin: bytes = b"") -> bytes:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], input=stdin, capture_output=True, timeout=60,
            check=False, env={**os.environ, **_ENV})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git failed in {root}: {exc}") from exc
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip()[:300]
        raise GitError(f"git {args[0]} failed in {root}: {reason}")
    return done.stdout


def provenance(root: Path) -> Provenance:
    """The commit HEAD points at and whether tracked files under ``root`` differ from it
    (modified, staged, deleted). Untracked and ignored files are not part of any commit,
    so they are not "uncommitted changes" of the desired state: plan reads the commit
    (``shell.committed``) and lists them apart.

    One ``git status --porcelain=v2 --branch`` answers both (the watcher asks often)."""
    status = _git(root, "status", "--porcelain=v2", "--branch", "--untracked-files=no",
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


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One entry of a commit's tree: ``mode`` as git writes it (``100644``, ``120000`` for
    a symbolic link, ``160000`` for a submodule), the object id, and the path relative
    to the directory asked about."""

    mode: str
    oid: str
    path: str


def tree(root: Path, commit: str) -> tuple[TreeEntry, ...]:
    """Every file of ``commit`` under ``root`` (recursively), paths relative to ``root``.

    ``git ls-tree`` run inside ``root`` lists only that directory's part of the tree."""
    if not commit or not all(c in "0123456789abcdef" for c in commit):
        raise GitError(f"not a commit id: {commit!r}")
    out = _git_bytes(root, "ls-tree", "-r", "-z", commit)
    entries: list[TreeEntry] = []
    for record in out.split(b"\0"):
        if not record:
            continue
        head, _, name = record.partition(b"\t")
        mode, _kind, oid = head.decode("ascii", "replace").split(" ", 2)
        entries.append(TreeEntry(mode, oid, name.decode("utf-8", "surrogateescape")))
    return tuple(entries)


def read_blobs(root: Path, oids: Sequence[str], *, limit: int) -> list[bytes | int]:
    """The bytes of each blob in ``oids`` (in order), read by one ``git cat-file --batch``;
    a blob larger than ``limit`` is given as its size instead of its bytes, and is never
    read (its size is asked first)."""
    if not oids:
        return []
    # Sizes first (``--batch-check`` reads no content): a blob over the limit is never
    # read into memory, as ``validate`` never reads an oversized file from disk.
    sizes = blob_sizes(root, oids)
    wanted = [oid for oid in oids if sizes[oid] <= limit]
    out = _git_bytes(root, "cat-file", "--batch",
                     stdin="".join(f"{o}\n" for o in wanted).encode()) if wanted else b""
    read: dict[str, bytes] = {}
    at = 0
    for oid in wanted:
        end = out.index(b"\n", at)
        header = out[at:end].decode("ascii", "replace").split(" ")
        if len(header) != 3 or header[1] != "blob":
            raise GitError(f"git cat-file: object {oid} is not a readable blob "
                           f"({' '.join(header)[:100]})")
        size = int(header[2])
        start = end + 1
        read[oid] = out[start:start + size]
        at = start + size + 1
    return [read[oid] if oid in read else sizes[oid] for oid in oids]


def blob_sizes(root: Path, oids: Sequence[str]) -> dict[str, int]:
    """The size of each blob in ``oids`` (one ``git cat-file --batch-check``)."""
    out = _git_bytes(root, "cat-file", "--batch-check",
                     stdin="".join(f"{o}\n" for o in oids).encode())
    sizes: dict[str, int] = {}
    for oid, line in zip(oids, out.decode("ascii", "replace").splitlines(), strict=False):
        header = line.split(" ")
        if len(header) != 3 or header[1] != "blob":
            raise GitError(f"git cat-file: object {oid} is not a readable blob "
                           f"({line[:100]})")
        sizes[oid] = int(header[2])
    if len(sizes) != len(set(oids)):
        raise GitError("git cat-file --batch-check answered fewer objects than asked")
    return sizes


def tree_id(root: Path, commit: str) -> str:
    """The id of the tree ``commit`` holds at ``root`` (``git rev-parse COMMIT:./``, the
    path read relative to ``root``): equal ids mean byte-identical directories, whatever
    else the commits differ in."""
    if not commit or not all(c in "0123456789abcdef" for c in commit):
        raise GitError(f"not a commit id: {commit!r}")
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}:./")
    if done.returncode != 0 or not done.stdout.strip():
        raise GitError(f"git rev-parse {commit[:12]}:./ failed in {root}: "
                       f"{done.stderr.strip()[:300] or 'no such tree'}")
    return done.stdout.strip()


def uncommitted(root: Path) -> tuple[str, ...]:
    """Tracked files under ``root`` whose working-tree or staged content differs from HEAD
    (modified, added to the index, deleted), paths relative to ``root``, sorted."""
    out = _git_bytes(root, "diff", "HEAD", "--name-only", "-z", "--relative", "--", ".")
    return tuple(sorted(p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p))


def ignored_files(root: Path) -> frozenset[str]:
    """Files under ``root`` that git ignores and does not track, relative to ``root``.
    ``plan --worktree`` plans what a commit could hold: an ignored file never could."""
    out = _git_bytes(root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                     "--", ".")
    return frozenset(p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p)


def resolve(root: Path, ref: str) -> str:
    """The full commit id ``ref`` names (``git rev-parse --verify REF^{commit}``)."""
    if ref.startswith("-"):
        raise GitError(f"{ref!r} is not a git revision")
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise GitError(f"{ref!r} names no commit in {root} (fetch it first? a shallow CI "
                       "checkout may lack the base: fetch-depth 0)")
    return done.stdout.strip()


def toplevel(root: Path) -> Path | None:
    """The work tree ``root`` is in, or None outside git."""
    done = _git(root, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        if "not a git repository" in done.stderr:
            return None
        raise GitError(f"git rev-parse failed in {root}: {done.stderr.strip()[:300]}")
    return Path(done.stdout.strip())


def state_dir_inside_repo(root: Path, path: Path) -> bool:
    """Whether ``path`` (the apply journal's directory, relative paths read against
    ``root``) resolves, links followed, inside the config repo: inside ``root`` or inside
    the git work tree ``root`` belongs to. The journal there would make the repo dirty."""
    target = (root / path).resolve()
    bases = [root.resolve()]
    top = toplevel(root) if root.is_dir() else None
    if top is not None:
        bases.append(top.resolve())
    return any(target == base or target.is_relative_to(base) for base in bases)


def ignored(root: Path, path: Path) -> bool:
    """Whether git ignores ``path`` (a journal there can never be committed or make the
    tree dirty, e.g. a git-ignored ``.state/``). False outside git."""
    # The trailing slash: a directory that does not exist yet still matches `dir/`.
    done = _git(root, "check-ignore", "-q", "--no-index", str((root / path).resolve()) + "/")
    return done.returncode == 0
