"""What an apply did: per-change outcomes and the convergence gate's findings. Pure.

Owns the result values the executor fills and the renderers print. Every planned change
ends in exactly one outcome; nothing is left out silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from reconciler.core.evidence import ServiceProof
from reconciler.core.lean import CoreModel
from reconciler.core.plans import Change


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


class RunOutcome(StrEnum):
    """How one apply ended, in one word: the journal's run status (``reconcile history``),
    the watcher's ``reconcile_applies_total`` and ``reconcile_gate_results_total`` labels.
    Each word is written here once; ``WORDS`` is how a person reads it."""

    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"
    #: changes were sent and no gate gave the judge's word on them
    UNPROVEN = "unproven"
    #: only unanswered writes went wrong: a rerun replays their keys
    IN_DOUBT = "in_doubt"
    FAILED = "failed"
    REFUSED = "refused"  # NO-GO: nothing sent
    ERROR = "error"  # the run itself failed (the watcher's label)
    NOTHING_TO_DO = "nothing_to_do"
    INTERRUPTED = "interrupted"
    NOT_FINISHED = "not_finished"
    LEGACY = "legacy"  # journal lines older than run records


#: Each outcome as ``reconcile history`` heads a run with it.
WORDS: dict[RunOutcome, str] = {
    RunOutcome.CONVERGED: "converged",
    RunOutcome.NOT_CONVERGED: "NOT converged",
    RunOutcome.FAILED: "FAILED (a change did not go through)",
    RunOutcome.IN_DOUBT: "IN DOUBT (a change was sent and not answered; a rerun replays its "
    "key)",
    RunOutcome.UNPROVEN: "sent, convergence not proven",
    RunOutcome.REFUSED: "refused (NO-GO), nothing sent",
    RunOutcome.NOTHING_TO_DO: "nothing to do",
    RunOutcome.INTERRUPTED: "interrupted before it finished",
    RunOutcome.NOT_FINISHED: "ended without sending (refused, declined) or still running",
    RunOutcome.LEGACY: "journal lines written before run records",
    RunOutcome.ERROR: "the run failed before it finished",
}

#: What a convergence gate can end in (``gate_result``).
GATE_RESULTS = (RunOutcome.CONVERGED, RunOutcome.NOT_CONVERGED, RunOutcome.UNPROVEN)

#: What the watcher counts an apply as (``apply_outcome``, and ``ERROR``/``REFUSED`` for
#: a run that raised).
APPLY_OUTCOMES = (RunOutcome.CONVERGED, RunOutcome.NOT_CONVERGED, RunOutcome.UNPROVEN,
                  RunOutcome.FAILED, RunOutcome.REFUSED, RunOutcome.ERROR,
                  RunOutcome.NOTHING_TO_DO)


class ErrorKind(StrEnum):
    """What kind of failure the watcher counts (``reconcile_errors_total``'s ``kind``
    label). Written here once, beside the run outcomes, so the watcher compares members,
    never words it spelled again."""

    CONTROL_PLANE = "control_plane"
    CONFIG = "config"
    GIT = "git"
    JOURNAL = "journal"
    INVALID_DESIRED_STATE = "invalid_desired_state"
    APPLY_REFUSED = "apply_refused"  # an apply the gate or a check refused: nothing sent
    APPLY_FAILED = "apply_failed"  # an apply that ran and a write went wrong
    PROMOTION = "promotion"
    OTHER = "other"


def gate_word(converged: bool) -> RunOutcome:
    return RunOutcome.CONVERGED if converged else RunOutcome.NOT_CONVERGED


def ended(*, writes_ok: bool, outcomes: Iterable[str], gate: bool | None) -> RunOutcome:
    """How a finished apply ended, from what it recorded: each change's outcome and the
    gate's word (None: no gate ran). Only unanswered writes gone wrong is ``IN_DOUBT``
    (a rerun replays them), not ``FAILED``."""
    said = set(outcomes)
    if not writes_ok:
        return RunOutcome.IN_DOUBT if Outcome.IN_DOUBT in said and not said & {
            Outcome.FAILED, Outcome.REFUSED} else RunOutcome.FAILED
    if gate is None:
        return RunOutcome.UNPROVEN if said else RunOutcome.NOTHING_TO_DO
    return gate_word(gate)


#: How a change the deadline kept from being sent is described (``SKIPPED``).
EXPIRED = "not sent: --timeout expired"


class ChangeResult(CoreModel):
    change: Change
    outcome: Outcome
    detail: str = ""
    code: str | None = None  # the control plane's error code, when it gave one


class GateReport(CoreModel):
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


class ApplyReport(CoreModel):
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

    def gate_result(self) -> RunOutcome | None:
        """converged | not_converged | unproven (changes sent, no judge's word); None
        when nothing was sent and no gate ran."""
        if self.gate is not None:
            if not self.gate.proofs:
                return RunOutcome.UNPROVEN
            return gate_word(self.gate.converged)
        return RunOutcome.UNPROVEN if self.results else None

    def outcome(self) -> RunOutcome:
        """How the watcher counts this apply: any write gone wrong is ``FAILED``, else
        the gate's result, else ``NOTHING_TO_DO``."""
        if not self.writes_ok:
            return RunOutcome.FAILED
        return self.gate_result() or RunOutcome.NOTHING_TO_DO
