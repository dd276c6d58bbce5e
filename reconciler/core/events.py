"""What apply reports while it runs: typed events, rendered by views, never pre-formatted.

Owns the event values (terraform's hook shape: before a write, after a write, each poll
of the gate, the end). The executor and the engine emit them through ``Hook``; the views
in ``render.applyview`` turn them into terminal lines or JSON lines. Must not format for a
terminal or do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from reconciler.core.evidence import ServiceProof
from reconciler.core.outcomes import ApplyReport, ChangeResult
from reconciler.core.plans import Change


@dataclass(frozen=True)
class NothingToDo:
    """The fresh judge proved every service in scope converged and there is no change.
    ``selected``: the scope is an ``--only`` selection, not the whole repo."""

    services: tuple[str, ...] = ()
    selected: bool = False


@dataclass(frozen=True)
class ApplyStarted:
    changes: int


@dataclass(frozen=True)
class PreApply:
    change: Change
    replay: bool  # sent with the key of an earlier, interrupted run


@dataclass(frozen=True)
class PostApply:
    result: ChangeResult


@dataclass(frozen=True)
class GateStarted:
    services: tuple[str, ...]
    clusters: tuple[str, ...]
    attempts: int
    interval: float


@dataclass(frozen=True)
class GatePolled:
    attempt: int
    attempts: int
    proofs: tuple[ServiceProof, ...]


@dataclass(frozen=True)
class Finished:
    report: ApplyReport


@dataclass(frozen=True)
class JournalRepaired:
    """The journal's torn last line (a crash or a full disk) was dropped before this run;
    ``message`` names the file, the line and what was dropped."""

    path: str
    line: int
    message: str


Event = (NothingToDo | ApplyStarted | PreApply | PostApply | GateStarted | GatePolled
         | Finished | JournalRepaired)


class Hook(Protocol):
    """Where apply's events go (a view prints them; tests collect them)."""

    def __call__(self, event: Event) -> None: ...
