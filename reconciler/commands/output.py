"""Writing what commands produce: renderer choice, colour policy, plan files, errors.

Owns the terminal policy (colour only on a TTY and never with ``NO_COLOR``), the atomic
write of a saved plan, and the one way an ``EngineError`` is reported. Commands call
these; nothing else prints.

A saved plan is untrusted input: ``load_plan`` reads it unchanged (apply must execute
exactly what was planned, and an identifier "cleaned" on load would name something
else), and every rendering makes its strings safe instead: the text and Markdown
renderers through ``render.common.untrusted``, JSON through ``render.common.terminal_json``
(controls as ``\\u`` escapes: lossless, so the JSON still decodes to the same plan).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell.progress import Progress, StderrProgress

if TYPE_CHECKING:  # the renderers load when something is rendered, not to parse flags
    from reconciler.core.plans import Plan
    from reconciler.core.results import PlanResult
    from reconciler.render.said import Said


_T = TypeVar("_T")


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def render(plan: Plan, fmt: str, stream: TextIO, *, plan_file: str | None = None) -> str:
    """``plan_file``: where the plan is saved, so the Markdown names the exact apply
    command (and the digest of that file)."""
    from reconciler.render import common, jsonplan, markdown, text

    if fmt == "json":
        return common.terminal_json(jsonplan.dumps(plan))
    if fmt == "markdown":
        return markdown.render(plan, plan_file=plan_file)
    return text.render(plan, color=use_color(stream))


def show(plan: Plan, fmt: str, stream: TextIO | None = None, *,
         plan_file: str | None = None) -> None:
    """Write the plan in ``fmt`` to ``stream`` (stdout), as ``render`` makes it. The text
    plan goes straight from its renderer (``text.write``): rendered whole before anything
    is written, as 12 MB of UTF-8 rather than a 25 MB string for a 10,000 × 10 plan."""
    from reconciler.render import text

    target = stream or sys.stdout
    if fmt in ("json", "markdown"):
        write(render(plan, fmt, target, plan_file=plan_file), target)
    else:
        text.write(plan, target, color=use_color(target))


def write(content: str, stream: TextIO | None = None) -> None:
    target = stream or sys.stdout
    target.write(content)
    target.flush()


def say(lines: Iterable[Said]) -> None:
    """Print what a view in ``render/`` worded, in its order: each line to stdout or
    stderr, a raw piece (a diff) written as is and flushed."""
    for line in lines:
        if line.raw:
            write(line.text)
        else:
            print(line.text, file=sys.stderr if line.err else sys.stdout)


def progress_for_stderr() -> Progress | None:
    return StderrProgress("reading the live world") if sys.stderr.isatty() else None


def save_plan(path: Path, plan: Plan) -> None:
    """Write the plan file atomically: a reader sees the old file or the whole new one."""
    from reconciler.render import common, jsonplan

    write_atomically(path, common.terminal_json(jsonplan.dumps(plan)), "the plan")


def save_result(path: Path, result: PlanResult) -> None:
    """Write ``plan --result``'s file atomically (``render.resultfile``)."""
    from reconciler.render import common, resultfile

    write_atomically(path, common.terminal_json(resultfile.dumps(result)), "the result")


def load_result(path: Path) -> PlanResult:
    """A result file or a saved plan file (a result whose outcome is plan)."""
    from reconciler.render import jsonplan, resultfile

    return _parsed(path, "a result or plan file", resultfile.from_wire,
                   refusing="the plan in it", errors=(jsonplan.WireError, resultfile.WireError))


def write_atomically(path: Path, content: str, what: str) -> None:
    """``content`` in ``path`` whole or not at all (a temporary file, then a rename)."""
    # `cat FILE` is a terminal too: the content is terminal-safe JSON.
    directory = path.resolve().parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise EngineError(f"{path}: cannot write {what}: {exc.strerror or exc}") from exc


def _read_json(path: Path, what: str) -> Any:
    """The JSON value in ``path``, or an error naming the file and what it should be."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise EngineError(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EngineError(f"{path}: not {what} (invalid JSON: {safe(exc)})") from exc


def load_plan(path: Path) -> Plan:
    from reconciler.render import jsonplan

    return _parsed(path, "a plan file", jsonplan.from_wire, refusing="the plan file",
                   errors=(jsonplan.WireError,))


def _parsed(path: Path, what: str, parse: Callable[[Any], _T], *, refusing: str,
            errors: tuple[type[Exception], ...]) -> _T:
    """``what`` in ``path``, read by ``parse``: a plan whose content digest does not match
    is refused (``REFUSED_MISMATCH``: changed after planning, it is not the plan approved),
    anything else unusable is an error naming the file."""
    from reconciler.render import jsonplan

    data = _read_json(path, what)
    try:
        return parse(data)
    except jsonplan.DigestMismatch as exc:
        raise EngineError(f"{path}: refusing {refusing}: {safe(exc)}; plan again",
                          Exit.REFUSED_MISMATCH) from exc
    except errors as exc:
        raise EngineError(f"{path}: not a usable {what.removeprefix('a ')}: "
                          f"{safe(exc)}") from exc


def error_lines(exc: EngineError) -> list[str]:
    """The message as printed: ``error: `` and its first line, then each further line.

    A message may span lines (a refusal lists its blockers one per line); each line is
    made safe on its own, so controls cannot pass and a newline prints as a newline. A
    newline *inside* an untrusted string cannot forge a line here: whoever embeds such a
    string in a message passes it through ``safe`` first, which escapes it (``\\x0a``).
    """
    first, *rest = str(exc).split("\n")
    lines = [f"error: {safe(first, 2000)}"]
    lines.extend(safe(line, 2000) for line in rest[:200])
    if len(rest) > 200:
        lines.append(f"  …(+{len(rest) - 200} lines)")
    return lines


def report_error(exc: EngineError) -> int:
    for diagnostic in exc.diagnostics:
        print(diagnostic.render(), file=sys.stderr)
    for line in error_lines(exc):
        print(line, file=sys.stderr)
    return int(exc.code)
