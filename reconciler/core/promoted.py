"""What ``reconcile promote`` did: per service, the digest the previous environment
proves, the gate it met and what was written (or why not); for the run, the
environment's plan with the pins. Pure values.

Declared here, below the engine and the views, so ``engine.promote`` hands them back and
``render.promoteview`` (and ``watch --promote-from``'s proposer, which words the same
evidence line) read them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciler.core import promotion

if TYPE_CHECKING:  # annotations only: the planner's models load with the preview
    from reconciler.core.plans import Plan


@dataclass(frozen=True)
class Promotion:
    """One service of ``reconcile promote``: the digest the previous environment proves,
    the gate it met (soak, windows, freezes), and what was written (or why not)."""

    service: str
    digest: str | None = None
    tag: str | None = None
    gate: promotion.Gate | None = None
    refused: str | None = None
    path: str | None = None
    before: bytes = b""
    after: bytes = b""
    written: bool = False
    evidence: str = ""

    @property
    def changes(self) -> bool:
        return self.before != self.after


@dataclass(frozen=True)
class PromoteRun:
    environment: str
    upstream: str
    promotions: tuple[Promotion, ...]
    preview: Plan | None = None
    preview_error: str | None = None
    commit: str | None = None
