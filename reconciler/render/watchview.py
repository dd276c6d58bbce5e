"""The view of ``reconcile watch``: the words of its log events about plans and applies.

Owns what the watcher says when a plan differs from the last one (the verdict, its
counts, each item that appeared or went away), when an apply ends (each outcome counted,
every reason the gate is still waiting on) and while an apply runs (each change's
outcome, the gate's start and polls), and about the promotions ``watch --promote-from``
proposes (proposed, waiting until a time, failed). The watcher (``shell.watching``) writes them
through its ``Log`` (text or JSON lines, timestamps, levels); the metrics are the
watcher's. Pure: returns strings and the structured fields that go with them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from reconciler.core.events import Event, GatePolled, GateStarted, PostApply
from reconciler.core.outcomes import ApplyReport, Outcome
from reconciler.core.pipeline import eligible_shown
from reconciler.core.plandiff import PlanDiff
from reconciler.core.plans import Plan
from reconciler.core.proposals import Decision, Step


@dataclass(frozen=True)
class Line:
    """One log event: its name, its message, its level (None: the event's own) and its
    structured fields (``lines`` are shown under the message in text)."""

    event: str
    message: str
    level: str | None = None
    fields: dict[str, object] = field(default_factory=dict)


def planned(why: str, new: Plan, delta: PlanDiff, elapsed_ms: float) -> Line:
    """A new plan: what differs from the last one, or that nothing does."""
    if delta.empty:
        return Line("plan", f"{why}: no difference from the last plan ({new.verdict.value})",
                    fields={"verdict": new.verdict.value, "commit": new.commit,
                            "elapsed_ms": elapsed_ms})
    lines = [f"+ {x}" for x in delta.added] + [f"- {x}" for x in delta.removed]
    verdict = new.verdict.value if delta.verdict_before in (None, new.verdict.value) \
        else f"{delta.verdict_before} → {new.verdict.value}"
    return Line("plan", f"{why}: {verdict}, {len(new.changes)} change(s), "
                f"{len(new.blockers)} blocker(s), {len(new.drift)} drift",
                fields={"verdict": new.verdict.value, "commit": new.commit, "lines": lines,
                        "counts": new.counts(), "elapsed_ms": elapsed_ms})


def applied(commit: str, report: ApplyReport, ok: bool) -> Line:
    """An apply that ran to its end: each outcome counted; when it did not converge,
    every reason the gate is still waiting on."""
    summary = ", ".join(f"{report.count(o)} {o.value}" for o in Outcome if report.count(o))
    failed = [] if report.gate is None else [
        f"{p.service}: {reason}" for p in report.gate.pending() for reason in p.reasons()]
    return Line("applied" if ok else "apply-failed",
                f"commit {commit[:12]}: {summary or 'nothing to send'}"
                + ("" if ok else "; not converged"), fields={"lines": failed, "commit": commit})


def progress(event: Event) -> Line | None:
    """An apply's progress, as the watcher logs it (None: not logged)."""
    if isinstance(event, PostApply):
        r = event.result
        return Line("apply-progress", f"{r.outcome.value}: {r.change.action.value} "
                    f"{r.change.service}", fields={"key": r.change.idempotency_key})
    if isinstance(event, GateStarted):
        return Line("apply-progress", f"Convergence gate: {len(event.services)} "
                    f"service(s) × {len(event.clusters)} cluster(s), up to "
                    f"{event.attempts} polls", fields={"clusters": list(event.clusters)})
    if isinstance(event, GatePolled):
        pending = [f"{p.service}: {x}" for p in event.proofs for x in p.reasons()]
        return Line("apply-progress", f"gate {event.attempt}/{event.attempts}: "
                    + (f"waiting on {len(pending)}" if pending else "every cluster "
                       "converged"), level="debug", fields={"lines": pending[:5]})
    return None


def _at(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def proposal(environment: str, decision: Decision, *, number: int | None = None,
             url: str = "", created: bool = True, error: str | None = None,
             failures: int = 0) -> Line | None:
    """``watch --promote-from``: a promotion proposed (``promotion-proposed``), held with
    when it becomes eligible (``promotion-waiting``; ``eligible_at`` RFC 3339, null when
    the rules cannot say), or a proposal that failed (``promotion-failed``, counted).
    None: nothing to say (nothing to promote, pinned already, proposed already)."""
    base: dict[str, object] = {"environment": environment, "service": decision.service,
                               "digest": decision.digest}
    short = (decision.digest or "")[:19]
    if error is not None:
        return Line("promotion-failed", f"{decision.service} {short} → {environment}: could "
                    f"not propose it ({error}); tried again at the next resync",
                    fields={**base, "branch": decision.branch, "error": error,
                            "failures": failures})
    if decision.step is Step.PROPOSE:
        older = decision.supersedes
        said = (f"; supersedes the proposal of {older.digest[:19]}"
                + (f" (#{older.number})" if older.number else "")) if older else ""
        verb = "proposed" if created else "already open"
        return Line("promotion-proposed", f"{decision.service} {short} → {environment}: "
                    f"{verb} as pull request #{number} {url}{said}",
                    fields={**base, "tag": decision.tag, "branch": decision.branch,
                            "pull": number, "url": url, "created": created,
                            "supersedes": older.digest if older else None})
    if decision.step is Step.WAITING:
        when = (f"eligible at {_at(eligible_shown(decision.eligible_at))}"
                if decision.eligible_at is not None
                else "no eligible time yet")
        return Line("promotion-waiting", f"{decision.service} {short or '(none)'} → "
                    f"{environment}: {when}: {decision.reason}",
                    fields={**base, "eligible_at": None if decision.eligible_at is None
                            else _at(eligible_shown(decision.eligible_at)),
                            "codes": list(decision.codes), "reason": decision.reason})
    return None
