"""Where the desired state is, found from where the user stands (as git finds its repo).

Owns the search rule, the one wording of a path a command cannot use, and validating a
single file. Callers: ``validate``, ``plan``, ``apply`` (``watch`` may use it too).

**The rule.** Start at PATH (default: the current directory) and walk up, PATH itself
first, to the first directory that *directly* holds a YAML file (``*.yaml``/``*.yml``,
not hidden, a regular file of at most 1 MiB, parsed as the loader parses it) with a
document whose ``kind`` is ``Settings``. That directory is the
desired-state root: everything below it is loaded, any layout. The walk never goes above
the git work tree holding PATH (the first directory with a ``.git`` entry), nor above
the filesystem root outside git. When no directory on the way holds a Settings file,
PATH itself is the root, exactly as given (so a repo whose Settings lives in a
subdirectory still works when you name its top, and one with no Settings is told so).

Keep the Settings file at the top of the desired-state directory and every command
finds it from any subdirectory.

**Outside any desired state** (``absent``): when no directory on the way up holds a
Settings file, PATH is used only inside a git repository, and only if something below it
is desired state -- a Settings document, or any ``apiVersion: reconcile/v1`` document (a
repo that lost its Settings is still validated, and told so). **No repository, no
scan**: outside git, with no Settings file at PATH or above, nothing below PATH is read
at all -- nothing there can be told apart from any other YAML -- and the command says
there is no desired-state repository here. The search below skips hidden entries, links, and
directories holding their own ``.git`` (other checkouts: they belong to something else).
Otherwise every command that acts on a desired state (validate, plan, apply, watch,
config, history, pin) says there is none here and stops, instead of loading every YAML
file under PATH -- run from a directory holding other checkouts it would report their
files by the thousand. Git repositories just below PATH that hold a Settings file at
their top are named, as the paths to give instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from reconciler.core import crosscheck
from reconciler.core.diagnostics import Diagnostic, sorted_diagnostics
from reconciler.shell import loading, validating

#: Files without this word are not parsed at all.
_MENTIONS_SETTINGS = re.compile(rb"\bSettings\b")
#: A document of this tool's own kind (any kind): the tree is desired state.
_OURS = re.compile(rb"^apiVersion:[ \t]*[\"']?reconcile/v1\b", re.MULTILINE)
#: Nested git repositories holding a Settings file named in ``absent``'s message.
_MAX_NAMED = 5


@dataclass(frozen=True, slots=True)
class Found:
    """The desired-state root (``root``, relative when the start was) and the git work
    tree holding it (``repo``, None outside git); ``moved`` when the root is not the
    start itself."""

    root: Path
    repo: Path | None
    moved: bool


def _small_yaml(entry: os.DirEntry[str]) -> bytes | None:
    """The bytes of a directory entry that may be desired state: a YAML file, not hidden,
    a regular file (never a link, FIFO or device) of at most ``loading.MAX_FILE_BYTES``;
    None for anything else or what cannot be read."""
    if entry.name.startswith(".") or not entry.name.endswith(loading.YAML_SUFFIXES):
        return None
    try:
        if not entry.is_file(follow_symlinks=False) \
                or entry.stat(follow_symlinks=False).st_size > loading.MAX_FILE_BYTES:
            return None
        with open(entry.path, "rb") as handle:
            return handle.read(loading.MAX_FILE_BYTES + 1)
    except OSError:
        return None


def holds_settings(directory: Path) -> bool:
    """Whether ``directory`` directly holds a YAML file with a ``kind: Settings`` document."""
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return False
    for entry in entries:
        data = _small_yaml(entry)
        if data is not None and _MENTIONS_SETTINGS.search(data) \
                and _is_settings_file(data, entry.name):
            return True
    return False


def _is_settings_file(data: bytes, name: str) -> bool:
    documents, _ = loading.parse_bytes(data, name)
    return any(isinstance(d.value, dict) and d.value.get("kind") == "Settings"
               for d in documents)


def find_root(start: Path) -> Found:
    """The desired-state root for ``start`` (an existing directory), by the module's rule."""
    here = start.resolve()
    found: Path | None = None
    repo: Path | None = None
    for directory in (here, *here.parents):
        if found is None and holds_settings(directory):
            found = directory
        if os.path.lexists(directory / ".git"):
            repo = directory
            break
    if found is None or found == here:
        return Found(start, _shown(repo, start), moved=False)
    return Found(_shown(found, start) or found, _shown(repo, start), moved=True)


def absent(found: Found, *, command: str) -> str | None:
    """The message for a start outside any desired state (see the module docstring), or
    None when ``found`` is one. ``found`` is ``find_root``'s answer."""
    root = found.root
    if found.moved or holds_settings(root):
        return None
    if found.repo is None:
        # No repository, no scan: outside git nothing tells desired state from any other
        # YAML below (a home directory, a download folder), so none of it is read; only
        # other checkouts below are named, as the paths to give instead.
        message = (f"no desired state here: {root} is in no git repository, and there is "
                   f"no Settings document in {root} or above it (up to the filesystem "
                   "root); no desired-state repository here, so nothing below it was "
                   "read. Run it inside a desired-state repository, or give its path: "
                   f"reconcile {command} PATH")
        return message + _named(_nested_repos(root), command)
    ours, nested = _search_below(root)
    if ours:
        return None
    top = (f"up to the git work tree {found.repo}" if found.repo is not None
           else "up to the filesystem root")
    message = (f"no desired state here: no Settings document in "
               f"{root} or above it ({top}), and no reconcile/v1 document below it "
               "(directories holding their own .git are other repositories and were not "
               "searched); nothing was read. Run it inside a desired-state repo, or give "
               f"its path: reconcile {command} PATH")
    return message + _named(nested, command)


def _named(nested: list[Path], command: str) -> str:
    if not nested:
        return ""
    shown = ", ".join(str(p) for p in nested[:_MAX_NAMED])
    more = f" (+{len(nested) - _MAX_NAMED} more)" if len(nested) > _MAX_NAMED else ""
    return (f". Below it, these git repositories hold a Settings document: "
            f"{shown}{more} (e.g. reconcile {command} {nested[0]})")


def _nested_repos(root: Path) -> list[Path]:
    """The git repositories below ``root`` that hold a Settings file at their top; no
    other file is read (directories only, hidden entries and links skipped)."""
    return _search_below(root, documents=False)[1]


def _search_below(root: Path, *, documents: bool = True) -> tuple[bool, list[Path]]:
    """Whether a desired-state document lies below ``root`` (own tree only), and the
    nested git repositories that hold a Settings file at their top. ``documents=False``
    reads no file (outside a repository nothing below is read: only directories)."""
    nested: list[Path] = []
    pending: list[Path] = [root]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    sub = Path(entry.path)
                    if os.path.lexists(sub / ".git"):
                        if holds_settings(sub):
                            nested.append(sub)
                        continue
                    pending.append(sub)
                    continue
            except OSError:
                continue
            if not documents:
                continue
            data = _small_yaml(entry)
            if data is None:
                continue
            if _OURS.search(data) or (_MENTIONS_SETTINGS.search(data)
                                      and _is_settings_file(data, entry.name)):
                return True, nested
    return False, sorted(nested)


def _shown(path: Path | None, start: Path) -> Path | None:
    """``path`` as the user would write it: relative to the current directory when
    ``start`` was relative, else absolute."""
    if path is None or start.is_absolute():
        return path
    try:
        return Path(os.path.relpath(path, Path.cwd()))
    except ValueError:  # another drive (Windows)
        return path


def unusable(path: Path, *, want: str) -> str | None:
    """The one sentence every command prints for a path it cannot use, or None.

    ``want``: ``"directory"``, ``"file"`` or ``"any"``. Missing: ``PATH: does not exist``.
    """
    try:
        if not path.exists():
            return f"{path}: does not exist"
        if want == "directory" and not path.is_dir():
            return f"{path}: is not a directory (give the desired-state directory)"
        if want == "file" and path.is_dir():
            return f"{path}: is a directory, not a file"
    except OSError as exc:
        return f"{path}: cannot be read: {exc.strerror or type(exc).__name__}"
    return None


# --------------------------------------------------------------------------- one file

@dataclass(frozen=True, slots=True)
class FileCheck:
    """``validate FILE``: the file's own diagnostics (paths: the file's name), the
    documents that passed their model, and where it was checked: ``repo`` is the
    desired-state root it was validated within, or None when it was checked alone."""

    diagnostics: tuple[Diagnostic, ...]
    documents: tuple[crosscheck.Located, ...]
    repo: Path | None

    @property
    def valid(self) -> bool:
        return not self.diagnostics


def check_file(path: Path) -> FileCheck:
    """Validate one file, as far as it can be judged.

    Inside a desired-state root (found from the file's directory by the module's rule)
    that loads the file, the whole root is validated and the problems *in this file* are
    kept: its syntax, each document against its kind, and the rules between documents
    (a duplicate name, a grant naming an undeclared service). Otherwise (no Settings
    above it, or a file the repo would not load, like a hidden one) it is checked alone:
    syntax, each document against its kind, and duplicates within the file; the rules
    that need the rest of the repo (exactly one Settings, granted services declared) are
    not checked. Never raises for bad input.
    """
    root = find_root(path.parent).root
    if holds_settings(root):
        try:
            rel: str | None = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            rel = None
        if rel is not None:
            result = validating.load_repo(root)
            if rel in result.files:
                return FileCheck(
                    _renamed(tuple(d for d in result.diagnostics if d.path == rel), path.name),
                    tuple(d for d in result.documents if d.path == rel), root)
    return _alone(path)


def _alone(path: Path) -> FileCheck:
    documents, found = validating.validate_file(loading.load_file(path.parent, path.name))
    diagnostics: list[Diagnostic] = [*found, *crosscheck.check(documents, complete=False,
                                                               repo=path.name)]
    return FileCheck(tuple(sorted_diagnostics(diagnostics)), documents, None)


def _renamed(diagnostics: Sequence[Diagnostic], name: str) -> tuple[Diagnostic, ...]:
    return tuple(replace(d, path=name) for d in diagnostics)
