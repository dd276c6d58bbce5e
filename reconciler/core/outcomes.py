"""What an apply did: per-change outcomes and the convergence gate's findings. Pure.

Owns the result values the executor fills and the renderers print. Every planned change
ends in exactly one outcome; nothing is left out silently.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from reconciler.core.evidence import Verdict as GateVerdict
from reconciler.core.plans import Change


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Outcome(StrEnum):
    APPLIED = "applied"
    ALREADY_APPLIED = "already_applied"  # idempotent replay, or the result was already live
    REFUSED = "refused"  # the control plane said no (CAS mismatch, forbidden, ...)
    FAILED = "failed"  # no answer we can trust, after bounded retries with the same key
    SKIPPED = "skipped"  # not sent: an earlier change of the same service did not succeed


class ChangeResult(_Model):
    change: Change
    outcome: Outcome
    detail: str = ""
    code: str | None = None  # the control plane's error code, when it gave one


class ClusterFinding(_Model):
    service: str
    cluster: str
    verdict: GateVerdict
    reason: str
    running: str | None = None
    wanted: str | None = None
    last_error: str | None = None


class GateReport(_Model):
    attempts: int
    waited_seconds: float
    converged: bool
    findings: tuple[ClusterFinding, ...]  # the last poll's judgement of every cluster

    @property
    def unverified(self) -> tuple[ClusterFinding, ...]:
        return tuple(f for f in self.findings if f.verdict is GateVerdict.NO_EVIDENCE)

    @property
    def diverged(self) -> tuple[ClusterFinding, ...]:
        return tuple(f for f in self.findings if f.verdict is GateVerdict.NOT_CONVERGED)


class ApplyReport(_Model):
    results: tuple[ChangeResult, ...]
    gate: GateReport | None = None

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    @property
    def writes_ok(self) -> bool:
        return all(r.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED) for r in self.results)
