"""Rewriting one Service's pinned release in its YAML file, in place, byte for byte.

Owns reading the file, finding the Service's ``release.digest``/``tag``/``version`` with
ruamel.yaml's round-trip composer, writing the new values into exactly those scalars, the
parse-back check, and the atomic write. Callers: the engine (``engine.pin``). It decides
nothing about which digest (``core.pinning``) and prints nothing.

Why the scalars are spliced rather than the document dumped: ruamel's round-trip dumper
re-emits every line, and on this repo's own example Service files it changes lines far
from the release -- it folds a 71-character digest onto its own line at width 80,
re-indents ``egress:`` sequences from 4 to 2 columns, drops the spaces inside ``[ ... ]``,
writes LF for CRLF and drops a ``---`` it was not told to keep (measured with ruamel.yaml
0.19). So the composer is used for what it does exactly -- the position (``start_mark``/
``end_mark``, character offsets into the text) and the quoting style of each scalar -- and
the new value is written into that span in the same style. Every byte outside the spans is
the file's own: comments, key order, indentation, flow style, line endings, ``---``, the
``# yaml-language-server: $schema=...`` line and a byte-order mark.

Only ``digest`` and ``tag`` change, and ``version`` when the file has one. A release with
no ``tag`` key gets one, on its own line right after ``digest`` (indented like it, with the
line ending of that line), or ``, tag: X`` after the digest in a flow mapping. Nothing
else -- ``evidence``, ``create``, ``registryHost`` -- is touched.

Refused, as ``PinFileError`` naming the file and line, with nothing written: a block
(``|``/``>``) or multi-line scalar where a digest or tag belongs, a document ruamel and the
loader do not read the same way, and any rewrite whose parse-back (by ``shell.loading``,
the parser ``validate`` uses) differs from the original anywhere but the intended values.
The write is atomic: a temporary file in the same directory, the original's permission
bits, fsync, rename; the file is compared with what was read just before the rename, so an
edit made meanwhile is never overwritten.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode

from reconciler.core.desired import Service
from reconciler.core.diagnostics import Diagnostic
from reconciler.shell import loading, validating

_BOM = "\ufeff"


class PinFileError(Exception):
    """The file cannot be rewritten faithfully (or read, or written); nothing was written."""


@dataclass(frozen=True, slots=True)
class Values:
    """What pin writes into ``release``. ``version`` None: the file's version (if any) is
    left alone -- ``core.pinning`` sets it only when the file already has one."""

    digest: str
    tag: str
    version: str | None = None


@dataclass(frozen=True, slots=True)
class FileRead:
    """One file as read: its bytes and permission bits."""

    path: Path
    data: bytes
    mode: int


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    text: str


def read(root: Path, rel: str) -> FileRead:
    """The file ``rel`` under ``root``: a regular file, not a link, within the size limit."""
    reason = loading.check_relative(rel)
    if reason is not None:
        raise PinFileError(f"{rel}: {reason}")
    path = root / rel
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise PinFileError(f"{rel}: cannot read: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PinFileError(f"{rel}: is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(loading.MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PinFileError(f"{rel}: cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if len(data) > loading.MAX_FILE_BYTES:
        raise PinFileError(f"{rel}: is over the {loading.MAX_FILE_BYTES}-byte limit")
    return FileRead(path, data, stat.S_IMODE(st.st_mode))


def rewrite(data: bytes, rel: str, service: str, values: Values) -> bytes:
    """``data`` with the Service ``service``'s release set to ``values``; every other byte
    unchanged, checked by reading the result back (see the module docstring)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PinFileError(f"{rel}: is not valid UTF-8") from exc
    release = _release_node(text, rel, service)
    entries = {k.value: (k, v) for k, v in release.value if isinstance(k, ScalarNode)}
    spans: list[_Span] = []
    digest_key, digest_node = entries["digest"]
    spans.append(_replace(text, rel, "digest", digest_node, values.digest))
    if "tag" in entries:
        spans.append(_replace(text, rel, "tag", entries["tag"][1], values.tag))
    else:
        spans.append(_insert_tag(text, rel, release, digest_key, digest_node, values.tag))
    if values.version is not None and "version" in entries:
        spans.append(_replace(text, rel, "version", entries["version"][1], values.version))
    result = text
    for span in sorted(spans, key=lambda s: s.start, reverse=True):
        result = result[:span.start] + span.text + result[span.end:]
    new = result.encode("utf-8")
    verify(data, new, rel, service, values)
    return new


def verify(old: bytes, new: bytes, rel: str, service: str, values: Values) -> None:
    """Read both versions back with the loader ``validate`` uses: every document equal
    (values and key order) except the Service's ``release.digest``/``tag``/``version``,
    which must be ``values``. Raises ``PinFileError`` otherwise."""
    before, problems_before = loading.parse_bytes(old, rel)
    after, problems_after = loading.parse_bytes(new, rel)
    if problems_before or problems_after or len(before) != len(after):
        problem = (problems_after or problems_before or (None,))[0]
        where = f"{rel}:{problem.line}" if problem is not None else rel
        raise PinFileError(f"{where}: the rewritten file does not read back as the original "
                           "did; nothing written (edit the release by hand)")
    targets = 0
    for old_doc, new_doc in zip(before, after, strict=True):
        old_value, new_value = old_doc.value, new_doc.value
        if _is_service(old_value, service):
            targets += 1
            new_release = new_value.get("release") if isinstance(new_value, dict) else None
            if not isinstance(new_release, dict) or not _holds(new_release, values):
                raise PinFileError(f"{rel}:{new_doc.line}: the rewritten release does not "
                                   "read back as the values written; nothing written")
            old_value = _without_pin(old_value, values)
            new_value = _without_pin(new_value, values)
        if json.dumps(old_value) != json.dumps(new_value):
            raise PinFileError(f"{rel}:{new_doc.line}: rewriting the release would change "
                               "something else in the file; nothing written (edit it by hand)")
    if targets != 1:
        raise PinFileError(f"{rel}: holds {targets} Service documents named {service}")


def candidate(rel: str, data: bytes, service: str,
              ) -> tuple[Service | None, tuple[Diagnostic, ...]]:
    """The Service ``service`` as the rewritten file declares it, validated by the model
    (``validate``'s own check), or the problems the rewrite leaves in that document (an
    evidence attestation still bound to the old digest, say)."""
    loaded = loading.load_bytes(rel, data)
    if loaded.diagnostics:
        return None, loaded.diagnostics
    for document in loaded.documents:
        if _is_service(document.value, service):
            model, problems = validating.validate_document(document)
            if isinstance(model, Service):
                return model, ()
            return None, tuple(problems)
    return None, (Diagnostic(rel, 1, 1, "", f"holds no Service named {service}"),)


def write(file: FileRead, new: bytes) -> None:
    """Replace ``file`` with ``new`` atomically, keeping its permission bits; refuses when
    the file changed since it was read (nothing is overwritten then)."""
    path = file.path
    directory = path.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".pin", dir=directory)
    except OSError as exc:
        raise PinFileError(f"{path}: cannot write next to it: {exc.strerror or exc}; "
                           "nothing written") from exc
    try:
        try:
            os.fchmod(fd, file.mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(new)
                handle.flush()
                os.fsync(handle.fileno())
            now = path.read_bytes() if not path.is_symlink() else None
            if now != file.data:
                raise PinFileError(f"{path}: changed while pin ran; nothing written (run it "
                                   "again)")
            os.replace(tmp, path)
        except OSError as exc:
            raise PinFileError(f"{path}: cannot write: {exc.strerror or exc}; the file is "
                               "unchanged") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # durability of the rename; the write itself is done
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def comment_mentions(data: bytes, words: Sequence[str]) -> list[int]:
    """1-based lines whose comment mentions any of ``words`` (the old tag or digest):
    pin never edits comments, so it says which ones may now be out of date."""
    wanted = [w for w in words if w]
    if not wanted:
        return []
    pattern = re.compile("|".join(rf"(?<![\w.-]){re.escape(w)}(?![\w-])" for w in wanted))
    lines = []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        hash_at = line.find("#")
        if hash_at >= 0 and pattern.search(line, hash_at):
            lines.append(number)
    return lines


# -- finding the scalars -------------------------------------------------------------------


def _release_node(text: str, rel: str, service: str) -> MappingNode:
    try:
        documents = list(YAML(typ="rt").compose_all(text))
    except Exception as exc:  # ruamel's parser errors, whatever their type
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PinFileError(f"{rel}{line}: ruamel.yaml cannot read this file for a round "
                           "trip; nothing written") from exc
    found = [doc for doc in documents if _node_is_service(doc, service)]
    if len(found) != 1:
        raise PinFileError(f"{rel}: holds {len(found)} Service documents named {service} "
                           "for ruamel.yaml (the loader found one); nothing written")
    release = _get(found[0], "release")
    if not isinstance(release, MappingNode):
        raise PinFileError(f"{rel}:{found[0].start_mark.line + 1}: release is not a mapping")
    if not isinstance(_get(release, "digest"), ScalarNode):
        raise PinFileError(f"{rel}:{release.start_mark.line + 1}: release has no digest")
    return release


def _get(node: Node, key: str) -> Node | None:
    if not isinstance(node, MappingNode):
        return None
    return next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key),
                None)


def _node_is_service(node: Node, service: str) -> bool:
    kind, name = _get(node, "kind"), _get(node, "name")
    return (isinstance(kind, ScalarNode) and kind.value == "Service"
            and isinstance(name, ScalarNode) and name.value == service)


def _replace(text: str, rel: str, key: str, node: Node, value: str) -> _Span:
    line = node.start_mark.line + 1
    if not isinstance(node, ScalarNode):
        raise PinFileError(f"{rel}:{line}: release.{key} is not a scalar")
    if node.style in ("|", ">") or node.start_mark.line != node.end_mark.line:
        raise PinFileError(f"{rel}:{line}: release.{key} is written over several lines; "
                           "write it on one line, then pin again")
    start, end = node.start_mark.index, node.end_mark.index
    if node.value != _unquote(text[start:end], node.style):
        raise PinFileError(f"{rel}:{line}: release.{key} is not where ruamel.yaml says it is; "
                           "nothing written")
    return _Span(start, end, _render(value, node.style))


def _insert_tag(text: str, rel: str, release: MappingNode, key: Node, digest: Node,
                tag: str) -> _Span:
    """A ``tag`` entry right after ``digest``: ``, tag: X`` in a flow mapping; else its
    own line, indented like ``digest`` (only when ``digest`` starts its line)."""
    at = digest.end_mark.index
    if release.flow_style:
        return _Span(at, at, f", tag: {_render(tag, None)}")
    line_start = text.rfind("\n", 0, key.start_mark.index) + 1
    indent = text[line_start:key.start_mark.index]
    if indent.strip(" "):
        raise PinFileError(f"{rel}:{key.start_mark.line + 1}: cannot add release.tag after "
                           "digest (digest does not start its line); add a tag line by hand")
    newline = text.find("\n", at)
    entry = f"{indent}tag: {_render(tag, None)}"
    if newline < 0:  # the last line, without a line break: keep the file ending as it did
        return _Span(len(text), len(text), _line_ending(text) + entry)
    eol = "\r\n" if newline > 0 and text[newline - 1] == "\r" else "\n"
    return _Span(newline + 1, newline + 1, entry + eol)


def _line_ending(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _render(value: str, style: str | None) -> str:
    """``value`` in the scalar style it replaces; plain only when it reads back as this
    very string (a tag ``1.10`` or ``true`` would not), else double-quoted."""
    if style == "'":
        return "'" + value.replace("'", "''") + "'"
    if style == '"' or loading.resolve_plain(value) != value or _needs_quotes(value):
        return json.dumps(value)
    return value


def _needs_quotes(value: str) -> bool:
    return (not value or value[0] in "-?:,[]{}#&*!|>'\"%@`"
            or any(c in value for c in " #,[]{}\t") or value.endswith(":"))


def _unquote(source: str, style: str | None) -> str:
    if style == "'":
        return source[1:-1].replace("''", "'")
    if style == '"':
        try:
            loaded = json.loads(source)
        except ValueError:
            return source
        return loaded if isinstance(loaded, str) else source
    return source


# -- reading back ----------------------------------------------------------------------------


def _is_service(value: object, service: str) -> bool:
    return isinstance(value, dict) and value.get("kind") == "Service" \
        and value.get("name") == service


def _holds(release: dict[str, Any], values: Values) -> bool:
    if release.get("digest") != values.digest or release.get("tag") != values.tag:
        return False
    return values.version is None or "version" not in release \
        or release.get("version") == values.version


def _without_pin(document: Any, values: Values) -> Any:
    """The document without the values pin may change (``version`` only when it does)."""
    stripped = copy.deepcopy(document)
    release = stripped.get("release")
    if isinstance(release, dict):
        for key in ("digest", "tag") + (("version",) if values.version is not None else ()):
            release.pop(key, None)
    return stripped
