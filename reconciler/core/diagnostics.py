"""Diagnostics: a fixable problem in the desired state, as a value.

Owns the ``Diagnostic`` record (where: repo-relative path, 1-based line and column, the
field path inside the document; what: a plain-English message) and its one-line
rendering ``path:line:col: field: message``. The loader, the validator and the
cross-document checks produce these; ``reconcile validate`` and the watcher print them.

Pure: no I/O. Every user-derived part of a rendered diagnostic goes through
``core.sanitize.safe`` here, so no caller can forget it (a file name or a key may hold
terminal escape sequences). Problems are collected and returned, never raised: a run
reports every problem it finds, not the first (terraform ``tfdiags``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from reconciler.core.sanitize import safe


class Severity(StrEnum):
    """How bad a problem is: an error fails ``validate``; a warning is said only."""

    ERROR = "error"
    WARNING = "warning"


#: Line and column of a diagnostic that concerns the repo (or a whole file) rather
#: than a place inside a file; rendering leaves them out.
NO_POSITION = 0


@dataclass(frozen=True, slots=True, order=False)
class Diagnostic:
    """One problem: where it is and what is wrong, in a sentence.

    ``path`` is repo-relative with ``/`` separators (``.`` for the repo itself);
    ``line`` and ``column`` are 1-based (``NO_POSITION`` when the problem has no
    place inside a file); ``field`` is the dotted path inside the document, like
    ``egress[1].host`` (empty when the problem concerns the file as a whole).
    """

    path: str
    line: int
    column: int
    field: str
    message: str
    severity: Severity = Severity.ERROR

    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.path, self.line, self.column, self.field, self.message)

    def __lt__(self, other: Diagnostic) -> bool:
        return self.sort_key() < other.sort_key()

    def render(self) -> str:
        """``path:line:col: field: message`` with every user-derived part made safe."""
        where = safe(self.path, limit=500)
        if self.line != NO_POSITION:
            where = f"{where}:{self.line}:{self.column}"
        field = f" {safe(self.field, limit=200)}:" if self.field else ""
        level = " warning:" if self.severity is Severity.WARNING else ""
        return f"{where}:{level}{field} {safe(self.message, limit=1000)}"

    def to_json(self) -> dict[str, object]:
        """The wire form used by ``validate --format json`` (made safe like ``render``)."""
        return {
            "path": safe(self.path, limit=500),
            "line": self.line,
            "column": self.column,
            "field": safe(self.field, limit=200),
            "message": safe(self.message, limit=1000),
            "severity": self.severity.value,
        }


def sorted_diagnostics(items: Iterable[Diagnostic]) -> tuple[Diagnostic, ...]:
    """Deduplicated and sorted by (path, line, column, field, message)."""
    return tuple(sorted(set(items), key=Diagnostic.sort_key))


def field_path(loc: Sequence[str | int]) -> str:
    """``("egress", 1, "host")`` -> ``egress[1].host``."""
    out: list[str] = []
    for part in loc:
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            out.append(f".{part}" if out else part)
    return "".join(out)
