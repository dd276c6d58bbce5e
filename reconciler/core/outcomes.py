"""What an apply did: per-change outcomes and the convergence gate's findings. Pure.

Owns the result values the executor fills and the renderers print. Every planned change
ends in exactly one outcome; nothing is left out silently.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from reconciler.core.evidence import ServiceProof
from reconciler.core.plans import Change


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Outcome(StrEnum):
    APPLIED = "applied"
    ALREADY_APPLIED = "already_applied"  # idempotent replay, or the result was already live
    REFUSED = "refused"  # the control plane said no (CAS mismatch, forbidden, ...)
    FAILED = "failed"  # no answer we can trust, after bounded retries with the same key
    #: sent, and no answer came back (the reply timed out, or the connection dropped after
    #: the request went out): the control plane may have committed it. Not "failed": a
    #: rerun replays the same idempotency key, and gets the first result if it landed.
    IN_DOUBT = "in_doubt"
    SKIPPED = "skipped"  # not sent: an earlier change of the same service did not succeed


#: How a change the deadline kept from being sent is described (``SKIPPED``).
EXPIRED = "not sent: --timeout expired"


class ChangeResult(_Model):
    change: Change
    outcome: Outcome
    detail: str = ""
    code: str | None = None  # the control plane's error code, when it gave one


class GateReport(_Model):
    """The convergence gate: the judge's word on every gated service at the last poll."""

    attempts: int
    waited_seconds: float
    proofs: tuple[ServiceProof, ...]
    #: ``apply --timeout`` expired before the judge proved every service: the polls
    #: stopped there, and ``proofs`` are the judge's word at the last poll that finished
    #: (or, when none did, its word on services it was given no evidence for).
    expired: bool = False

    @property
    def converged(self) -> bool:
        return bool(self.proofs) and all(p.converged for p in self.proofs)

    def pending(self) -> tuple[ServiceProof, ...]:
        return tuple(p for p in self.proofs if not p.converged)

    def stopped(self) -> tuple[ServiceProof, ...]:
        """The services the gate stopped polling: the judge found their rollout terminal
        (the control plane reports it failed or mismatched)."""
        return tuple(p for p in self.pending() if p.terminal)


class ApplyReport(_Model):
    results: tuple[ChangeResult, ...]
    gate: GateReport | None = None
    #: ``apply --timeout``, in seconds, when one bounds the run
    timeout_seconds: float | None = None
    #: the timeout expired before the run ended: changes not yet sent were skipped
    #: (``SKIPPED``, said so), the gate stopped where it was (``GateReport.expired``)
    expired: bool = False

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    def failures(self) -> tuple[ChangeResult, ...]:
        """The changes that went wrong by themselves: refused, failed, in doubt, or skipped
        because an earlier change of their service did (not those the deadline skipped)."""
        return tuple(r for r in self.results
                     if r.outcome in (Outcome.REFUSED, Outcome.FAILED, Outcome.IN_DOUBT)
                     or (r.outcome is Outcome.SKIPPED and not r.detail.startswith(EXPIRED)))

    @property
    def writes_ok(self) -> bool:
        return all(r.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED) for r in self.results)
