"""Loading YAML from a config repo safely: files -> plain values with positions.

Owns everything between the bytes on disk and plain Python values: finding the
``*.yaml``/``*.yml`` files of a repo (deterministic order, dot-directories skipped),
reading them without following symbolic links or leaving the repo root, decoding
UTF-8, parsing YAML at the *event* level and building ``dict``/``list``/``str``/
``int``/``float``/``bool``/``None`` values iteratively, with a side map from each
value's path to its 1-based (line, column). Each file is read and parsed once per
load; nothing is kept between loads (the watcher reuses validated files by blob id,
``shell.validating.BlobCache``). Callers: ``shell.validating`` (and through it every
command and the watcher), ``shell.discovery`` and ``shell.pinning``.

It must not know the document kinds or any rule about their content: that is
``core.desired`` (models) and ``core.crosscheck``. It never raises for bad input:
every problem becomes a ``Diagnostic`` naming the file and line.

What is refused, and why (the input is hostile until proven otherwise):

- any explicit tag (``!!python/object``, ``!include``, even ``!!str``): tags are how
  YAML loaders are talked into constructing objects or reading other files;
- anchors and aliases: "billion laughs" and values that silently change in two places;
- ``%YAML`` other than 1.2, and ``%TAG``: 1.1 brings back ``no`` -> false;
- duplicate keys and non-string keys: the second ``port:`` must not win silently;
- nesting deeper than ``MAX_DEPTH`` (built iteratively, so no ``RecursionError``),
  files over ``MAX_FILE_BYTES``, bytes that are not UTF-8;
- symbolic links anywhere (pointing in or out of the repo) and paths leaving the root.

Scalars are typed by this module's own resolver, strict and YAML-1.2-core-like: only
plain ``true``/``false``, ``null``/``~``/empty, ``[-+]?(0|[1-9][0-9]*)`` and decimal
floats (with a ``.`` or an exponent) are typed; ``no``, ``on``, ``0443``, ``0x1F`` and
``True`` stay strings; quoted and block scalars are always strings. The models are
strict, so ``port: "0443"`` is then an error rather than a surprise.

The libyaml-based C parser (``ruamel.yaml.clib``) is used when installed -- it is
about 25 times faster and gives the same events and marks; the pure-Python parser of
ruamel.yaml is the fallback, and the authority where libyaml (YAML 1.1) disagrees
(see ``_rebuild``).
"""

from __future__ import annotations

import importlib
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ruamel.yaml import events
from ruamel.yaml.loader import BaseLoader

from reconciler.core.diagnostics import NO_POSITION, Diagnostic, field_path

MAX_FILE_BYTES: Final = 1 << 20
MAX_DEPTH: Final = 64
YAML_SUFFIXES: Final = (".yaml", ".yml")

#: A path inside a document: mapping keys and sequence indexes, from the root.
Key = str | int
PathKey = tuple[Key, ...]
#: 1-based (line, column).
Position = tuple[int, int]

try:  # The C parser: same events, same marks, much faster.
    _CParser: Callable[[str], Any] | None = importlib.import_module("_ruamel_yaml").CParser
except ImportError:  # pragma: no cover - depends on the installation
    _CParser = None

PARSER_NAME: Final = "libyaml (ruamel.yaml.clib)" if _CParser is not None else "pure Python"

_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+)")
_FLOAT_EXP = re.compile(r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")
_DIRECTIVE = re.compile(r"^%(YAML|TAG)\b", re.MULTILINE)
#: A private-use character standing in for ``:`` in the masked fast path (``_rebuild``).
MASK: Final = "\ue000"
_COLON_IN_WORD = re.compile(r":(?=[^ \t\r\n])")


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """One non-empty YAML document as plain values, with where each value was written.

    ``positions`` maps the path of every value (``()`` is the root) to its position;
    ``key_positions`` maps the path of every mapping entry to the position of its key.
    """

    path: str
    line: int
    column: int
    value: object
    positions: Mapping[PathKey, Position]
    key_positions: Mapping[PathKey, Position]

    def position_of(self, loc: PathKey, *, key: bool = False) -> Position:
        """Where ``loc`` was written, or its nearest written ancestor (for missing keys)."""
        if key and loc in self.key_positions:
            return self.key_positions[loc]
        for end in range(len(loc), -1, -1):
            found = self.positions.get(loc[:end])
            if found is not None:
                return found
        return (self.line, self.column)


@dataclass(frozen=True, slots=True)
class LoadedFile:
    """A file's documents, or the problems that stopped them being trusted.

    When ``diagnostics`` is not empty, ``documents`` is empty: a file with a duplicate
    key or a tag is not half-believed.
    """

    path: str
    documents: tuple[YamlDocument, ...]
    diagnostics: tuple[Diagnostic, ...]


class _Refused(Exception):
    """Internal: a problem after which the rest of the file cannot be trusted."""

    def __init__(self, line: int, column: int, field: str, message: str) -> None:
        super().__init__(message)
        self.line, self.column, self.field, self.message = line, column, field, message


# --------------------------------------------------------------------------- files


def discover(root: Path) -> tuple[tuple[str, ...], tuple[Diagnostic, ...]]:
    """Repo-relative paths of every YAML file under ``root``, sorted; and what was refused.

    Iterative (no recursion on deep trees). Entries whose name starts with ``.``
    (``.git``, ``.reconcile``, ``.pre-commit-config.yaml``) are not desired state and
    are skipped. Symbolic links are reported, never followed: a linked directory or
    YAML file is a diagnostic.
    """
    found: list[str] = []
    problems: list[Diagnostic] = []
    pending: list[str] = [""]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(root / rel_dir if rel_dir else root) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            problems.append(
                _file_problem(rel_dir or ".", f"cannot list directory: {_os_reason(exc)}"))
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            is_yaml = entry.name.endswith(YAML_SUFFIXES)
            try:
                if entry.is_symlink():
                    if is_yaml or _points_to_directory(entry):
                        problems.append(_file_problem(
                            rel, "is a symbolic link; links are not followed "
                            "(put the file itself in the repo)"))
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(rel)
                elif is_yaml:
                    if entry.is_file(follow_symlinks=False):
                        found.append(rel)
                    else:
                        problems.append(_file_problem(rel, "is not a regular file"))
            except OSError as exc:
                problems.append(_file_problem(rel, f"cannot inspect: {_os_reason(exc)}"))
    return tuple(sorted(found)), tuple(problems)


def _points_to_directory(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def check_relative(rel: str) -> str | None:
    """Why ``rel`` is not a plain path inside the repo, or None when it is."""
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        return "is not a relative path inside the repo"
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "leaves the repo root or is not normalised (no '.', '..' or '//')"
    return None


def load_file(root: Path, rel: str) -> LoadedFile:
    """Read and parse one repo-relative file; never raises for bad input or I/O errors."""
    reason = check_relative(rel)
    if reason is not None:
        return LoadedFile(rel, (), (_file_problem(rel, reason),))
    try:
        link = _first_symlink(root, rel)
        if link is not None:
            return LoadedFile(rel, (), (_file_problem(
                rel, f"{link!r} is a symbolic link; links are not followed"),))
        data = _read_regular(os.path.join(root, rel))
    except _Refused as exc:
        return LoadedFile(rel, (), (_file_problem(rel, exc.message),))
    except OSError as exc:
        return LoadedFile(rel, (), (_file_problem(rel, f"cannot read: {_os_reason(exc)}"),))
    documents, problems = parse_bytes(data, rel)
    return LoadedFile(rel, () if problems else documents, problems)


def load_bytes(rel: str, data: bytes | int) -> LoadedFile:
    """Parse one file's bytes read from elsewhere than the disk (a commit's blob), named
    ``rel``; ``data`` is the file's size instead when it was too large to read. Problems
    name ``rel`` and the line, exactly as ``load_file`` does for a file on disk."""
    reason = check_relative(rel)
    if reason is not None:
        return LoadedFile(rel, (), (_file_problem(rel, reason),))
    if isinstance(data, int):
        return LoadedFile(rel, (), (_file_problem(
            rel, f"is {data} bytes; the limit is {MAX_FILE_BYTES}"),))
    documents, problems = parse_bytes(data, rel)
    return LoadedFile(rel, () if problems else documents, problems)


def _first_symlink(root: Path, rel: str) -> str | None:
    base = os.fspath(root)
    parts = rel.split("/")
    for end in range(1, len(parts) + 1):
        if stat.S_ISLNK(os.lstat(os.path.join(base, *parts[:end])).st_mode):
            return "/".join(parts[:end])
    return None


def _read_regular(path: str) -> bytes:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Refused(1, 1, "", "is not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise _Refused(1, 1, "", f"is {st.st_size} bytes; the limit is {MAX_FILE_BYTES}")
        chunks: list[bytes] = []
        remaining = MAX_FILE_BYTES + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > MAX_FILE_BYTES:
            raise _Refused(1, 1, "", f"is over the {MAX_FILE_BYTES}-byte limit")
        return data
    finally:
        os.close(fd)


def _file_problem(rel: str, message: str) -> Diagnostic:
    return Diagnostic(rel, 1 if rel != "." else NO_POSITION, 1 if rel != "." else NO_POSITION,
                      "", message)


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# --------------------------------------------------------------------------- parsing


def parse_bytes(data: bytes, path: str, *, pure: bool = False,
                ) -> tuple[tuple[YamlDocument, ...], tuple[Diagnostic, ...]]:
    """Parse a file's bytes into documents; never raises (problems are diagnostics).

    ``path`` is only used to label documents and diagnostics. ``pure`` forces ruamel's
    pure-Python parser (the tests compare it with the libyaml fast path).
    """
    if len(data) > MAX_FILE_BYTES:
        return (), (Diagnostic(path, 1, 1, "", f"is over the {MAX_FILE_BYTES}-byte limit"),)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        return (), (Diagnostic(path, line, column, "",
                               f"is not valid UTF-8 (byte 0x{data[exc.start]:02x})"),)
    if text.startswith("\ufeff"):
        text = text[1:]
    fast = _CParser is not None and not pure
    builder = _build(path, text, fast=fast)
    if builder.failed_in_parser and fast:
        builder = _rebuild(path, text)
    if builder.problems:
        return (), tuple(builder.problems)
    return tuple(builder.documents), ()


def _rebuild(path: str, text: str) -> _Builder:
    """After libyaml refused ``text``: the masked fast path, else ruamel's own parser.

    libyaml reads YAML 1.1, where a plain ``deployment:preflight`` inside ``[...]`` is
    an error; in 1.2 a ``:`` followed by a non-blank is part of a plain scalar, except
    right after a quoted key in a flow mapping (``{"a":1}``). So every such ``:`` is
    replaced by ``MASK`` (one character: columns are unchanged) and libyaml tries
    again; values get their ``:`` back. When the ``:`` was an indicator after all, the
    masked text is malformed (a quoted scalar followed by a stray character), libyaml
    fails again, and ruamel's pure-Python parser -- authoritative, and 50 times
    slower -- decides. A file that holds ``MASK`` itself goes straight there.
    """
    if MASK not in text:
        masked = _build(path, _COLON_IN_WORD.sub(MASK, text), fast=True, unmask=True)
        if not masked.failed_in_parser:
            return masked
    return _build(path, text, fast=False)


def _build(path: str, text: str, *, fast: bool, unmask: bool = False) -> _Builder:
    builder = _Builder(path, text, unmask=unmask)
    try:
        builder.run(fast=fast)
    except _Refused as exc:
        builder.problems.append(Diagnostic(path, exc.line, exc.column, exc.field, exc.message))
    except Exception as exc:  # the YAML parser's errors, whatever their type
        line, column, message = _describe_parser_error(exc, text)
        builder.problems.append(Diagnostic(path, line, column, "", message))
        builder.failed_in_parser = True
    return builder


def _describe_parser_error(exc: Exception, text: str) -> tuple[int, int, str]:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem:
        message = f"YAML syntax error: {problem}"
        if context:
            message += f" ({context})"
    elif type(exc).__name__ == "ReaderError":
        message = "contains a character YAML does not allow (a control character?)"
        position = getattr(exc, "position", 0)
        position = position if isinstance(position, int) else 0
        line = text.count("\n", 0, position) + 1
        return line, position - (text.rfind("\n", 0, position) + 1) + 1, message
    else:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        message = f"YAML syntax error: {first}"
    if mark is not None:
        return mark.line + 1, mark.column + 1, message
    return 1, 1, message


def _parser(text: str, *, fast: bool) -> Any:
    """A parser of ``text`` whose ``get_event`` gives its events up to ``StreamEndEvent``."""
    return _CParser(text) if fast and _CParser is not None else BaseLoader(text).parser


_SCALAR: Final = events.ScalarEvent
_MAPPING_START: Final = events.MappingStartEvent
_MAPPING_END: Final = events.MappingEndEvent
_SEQUENCE_START: Final = events.SequenceStartEvent
_SEQUENCE_END: Final = events.SequenceEndEvent
_ALIAS: Final = events.AliasEvent
_DOCUMENT_START: Final = events.DocumentStartEvent
_DOCUMENT_END: Final = events.DocumentEndEvent
_STREAM_START: Final = events.StreamStartEvent
_STREAM_END: Final = events.StreamEndEvent


def resolve_plain(value: str) -> object:
    """Type a plain (unquoted, untagged) scalar; see the module docstring."""
    if value in ("", "~", "null"):
        return None
    if value == "true":
        return True
    if value == "false":
        return False
    first = value[0]
    if first.isdigit() or first in "-+.":
        if _INT.fullmatch(value):
            try:
                return int(value)
            except ValueError:  # longer than sys.get_int_max_str_digits()
                return value
        if _FLOAT.fullmatch(value) and ("." in value or "e" in value or "E" in value):
            number = float(value)
            # 1e999 overflows to inf, which JSON (and so the models) cannot carry.
            return number if number not in (float("inf"), float("-inf")) else value
    return value


_UNSET: Final = object()


class _Frame:
    __slots__ = ("container", "is_map", "key", "key_pos", "path", "skip")

    def __init__(self, container: dict[str, object] | list[object], path: PathKey) -> None:
        self.container = container
        self.is_map = isinstance(container, dict)
        self.path = path
        self.key: object = _UNSET
        self.key_pos: Position = (0, 0)
        self.skip = False


class _Builder:
    """Turns the event stream into documents; one instance per file."""

    def __init__(self, path: str, text: str, *, unmask: bool = False) -> None:
        self.path = path
        self.text = text
        self.unmask = unmask
        self.documents: list[YamlDocument] = []
        self.problems: list[Diagnostic] = []
        self.failed_in_parser = False

    def _problem(self, pos: Position, field: PathKey, message: str) -> None:
        self.problems.append(Diagnostic(self.path, pos[0], pos[1], field_path(field), message))

    def run(self, *, fast: bool) -> None:
        # The hot loop of a load: once per event of every file (350,000 events for
        # 10,000 service files), so the common cases come first and nothing is asked
        # twice -- a scalar's tag is ``ctag`` (``tag`` is a property that builds a
        # string), only nodes get a position, and the refusals (anchors, aliases, tags)
        # are looked at only when the event carries one.
        directive_lines = iter(
            self.text.count("\n", 0, m.start()) + 1 for m in _DIRECTIVE.finditer(self.text))
        get_event = _parser(self.text, fast=fast).get_event
        unmask = self.unmask
        stack: list[_Frame] = []
        top: _Frame | None = None
        root: object = _UNSET
        root_empty = False
        doc_pos: Position = (1, 1)
        positions: dict[PathKey, Position] = {}
        key_positions: dict[PathKey, Position] = {}
        while True:
            event = get_event()
            kind = type(event)
            # A node: scalar, alias, or the start of a collection.
            value: object
            container: dict[str, object] | list[object] | None = None
            if kind is _SCALAR:
                text = event.value.replace(MASK, ":") if unmask else event.value
                tagged = event.ctag is not None
                value = text if tagged or event.style else resolve_plain(text)
            elif kind is _MAPPING_END or kind is _SEQUENCE_END:
                stack.pop()
                top = stack[-1] if stack else None
                continue
            elif kind is _MAPPING_START:
                value = container = {}
                tagged = event.ctag is not None
            elif kind is _SEQUENCE_START:
                value = container = []
                tagged = event.ctag is not None
            elif kind is _ALIAS:
                value, tagged = None, False
            elif kind is _DOCUMENT_START:
                mark = event.start_mark
                pos = (mark.line + 1, mark.column + 1)
                self._check_directives(event, pos, directive_lines)
                stack, top, root, root_empty = [], None, _UNSET, False
                positions, key_positions = {}, {}
                doc_pos = pos
                continue
            elif kind is _DOCUMENT_END:
                if root is not _UNSET and not root_empty:
                    line, column = positions.get((), doc_pos)
                    self.documents.append(YamlDocument(
                        self.path, line, column, root, positions, key_positions))
                continue
            elif kind is _STREAM_END:
                return
            elif kind is _STREAM_START:
                continue
            else:  # pragma: no cover - every event is handled above
                mark = event.start_mark
                raise _Refused(mark.line + 1, mark.column + 1, "",
                               f"unexpected YAML event {kind.__name__}")
            mark = event.start_mark
            pos = (mark.line + 1, mark.column + 1)

            # Where it goes.
            if top is None:
                node_path: PathKey = ()
                root = value
                root_empty = kind is _SCALAR and not event.style and event.value == ""
            elif top.is_map:
                key = top.key
                if key is _UNSET:  # this node is a key
                    if kind is not _SCALAR:
                        raise _Refused(pos[0], pos[1], _dotted(top.path), "mapping keys must "
                                       "be plain strings, not lists, mappings or aliases")
                    if not isinstance(value, str):
                        raise _Refused(pos[0], pos[1], _dotted(top.path),
                                       f"mapping key {value!r} must be a string (quote it)")
                    top.key, top.key_pos, top.skip = value, pos, False
                    if value in top.container:
                        self._problem(pos, (*top.path, value), "duplicate key (already set above)")
                        top.skip = True
                    continue
                node_path = (*top.path, key)  # type: ignore[arg-type]
                key_positions[node_path] = top.key_pos
                if not top.skip:
                    top.container[key] = value  # type: ignore[index, call-overload]
                top.key = _UNSET
            else:
                items = top.container
                node_path = (*top.path, len(items))
                items.append(value)  # type: ignore[union-attr]
            positions[node_path] = pos

            # What is refused about it (after placing, so the field is known).
            anchor = event.anchor
            if anchor is not None or tagged or kind is _ALIAS:
                self._refuse_node(event, kind, anchor, pos, node_path)
            if container is not None:
                if len(stack) >= MAX_DEPTH:
                    raise _Refused(pos[0], pos[1], "",
                                   f"nesting is deeper than {MAX_DEPTH} levels")
                top = _Frame(container, node_path)
                stack.append(top)

    def _refuse_node(self, event: Any, kind: type, anchor: str | None, pos: Position,
                     node_path: PathKey) -> None:
        if anchor is not None and self.unmask:
            anchor = anchor.replace(MASK, ":")
        if kind is _ALIAS:
            self._problem(pos, node_path,
                          f"aliases (*{anchor}) are not allowed; write the value out")
        elif anchor is not None:
            self._problem(pos, node_path, f"anchors (&{anchor}) are not allowed")
        tag = getattr(event, "tag", None)
        if tag is not None:
            shown = _show_tag(tag).replace(MASK, ":")
            self._problem(pos, node_path, f"tags are not allowed (found {shown})")

    def _check_directives(self, event: Any, pos: Position, lines: Iterator[int]) -> None:
        version = getattr(event, "version", None)
        tags = getattr(event, "tags", None)
        if version is not None:
            line = next(lines, pos[0])
            if tuple(version) != (1, 2):
                shown = ".".join(str(v) for v in version)
                self.problems.append(Diagnostic(
                    self.path, line, 1, "",
                    f"%YAML {shown} is not supported; only YAML 1.2 (1.1 turns `no` into false)"))
        if tags:
            line = next(lines, pos[0])
            self.problems.append(
                Diagnostic(self.path, line, 1, "", "%TAG directives are not allowed"))


def _dotted(path: PathKey) -> str:
    return field_path(path)


def _show_tag(tag: object) -> str:
    text = str(getattr(tag, "value", tag))
    if text.startswith("tag:yaml.org,2002:"):
        return "!!" + text[len("tag:yaml.org,2002:"):]
    return text if text.startswith("!") else f"!<{text}>"
