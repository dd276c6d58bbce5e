"""Writing what commands produce: renderer choice, colour policy, plan files, errors.

Owns the terminal policy (colour only on a TTY and never with ``NO_COLOR``), the atomic
write of a saved plan, and the one way an ``EngineError`` is reported. Commands call
these; nothing else prints.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from reconciler.core.plans import Plan
from reconciler.core.sanitize import safe
from reconciler.failures import EngineError
from reconciler.render import jsonplan, markdown, text
from reconciler.shell.progress import Progress, StderrProgress


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def render(plan: Plan, fmt: str, stream: TextIO) -> str:
    if fmt == "json":
        return jsonplan.dumps(plan)
    if fmt == "markdown":
        return markdown.render(plan)
    return text.render(plan, color=use_color(stream))


def write(content: str, stream: TextIO | None = None) -> None:
    target = stream or sys.stdout
    target.write(content)
    target.flush()


def progress_for_stderr() -> Progress | None:
    return StderrProgress("reading the live world") if sys.stderr.isatty() else None


def save_plan(path: Path, plan: Plan) -> None:
    """Write the plan file atomically: a reader sees the old file or the whole new one."""
    content = jsonplan.dumps(plan)
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
        raise EngineError(f"{path}: cannot write the plan: {exc.strerror or exc}") from exc


def load_plan(path: Path) -> Plan:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise EngineError(f"{path}: cannot read the plan: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EngineError(f"{path}: not a plan file (invalid JSON: {safe(exc)})") from exc
    try:
        return jsonplan.from_wire(data)
    except jsonplan.WireError as exc:
        raise EngineError(f"{path}: not a usable plan file: {safe(exc)}") from exc


def report_error(exc: EngineError) -> int:
    for diagnostic in exc.diagnostics:
        print(diagnostic.render(), file=sys.stderr)
    print(f"error: {safe(str(exc), 2000)}", file=sys.stderr)
    return int(exc.code)
