"""Executing a plan's changes, then the convergence gate.

Owns the sending: each change through the control-plane client with its idempotency key
and compare-and-swap preconditions, journalled before and after; services in parallel
(bounded), one service's changes in plan order; a change that does not succeed stops
the rest of *that* service and nothing else. Then the gate: poll every expected cluster
(fixed once, never re-resolved smaller) until each proves the pinned digest, healthy and
verified, and the declared egress -- or the budget runs out.

Must not decide what to change (the plan did) or print (it reports through ``Hook``).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from reconciler.core import evidence
from reconciler.core.live import EgressRule, Observation, ObservationKind
from reconciler.core.outcomes import ChangeResult, ClusterFinding, GateReport, Outcome
from reconciler.core.plans import Action, Change, Plan
from reconciler.core.sanitize import safe
from reconciler.core.staleness import Check, Freshness
from reconciler.shell.controlplane import (
    CasMismatch,
    ControlPlaneClient,
    ControlPlaneError,
    DomainError,
    parse_service,
)
from reconciler.shell.journal import Journal
from reconciler.shell.probing import Prober

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

#: Crash-safety test seam: ``RECONCILE_CRASH_AT=point[:action]`` kills this process
#: with SIGKILL at that point, so tests can prove a rerun converges from each of them.
CRASH_ENV = "RECONCILE_CRASH_AT"


def _crash_point(point: str, action: str = "") -> None:
    wanted = os.environ.get(CRASH_ENV)
    if wanted and wanted in (point, f"{point}:{action}"):
        os.kill(os.getpid(), signal.SIGKILL)


class Hook(Protocol):
    """Where apply reports progress (the command prints; tests collect)."""

    def line(self, text: str) -> None: ...


@dataclass(frozen=True)
class GateTarget:
    service: str
    app_id: str
    digest: str | None  # None: the release is not being changed
    egress: tuple[EgressRule, ...] | None  # None: egress is not being changed
    expected_clusters: tuple[str, ...]


async def _send(client: ControlPlaneClient, change: Change) -> None:
    pre = change.preconditions
    if change.action is Action.SET_GRANT:
        assert change.user_id is not None and change.capabilities_after is not None
        await client.configure_grant(change.user_id, change.service_id,
                                     list(change.capabilities_after))
    elif change.action is Action.SET_EGRESS:
        assert pre.egress_revision is not None
        await client.set_egress(
            change.service_id, [r.model_dump() for r in change.egress_after or ()],
            idempotency_key=change.idempotency_key, expected_revision=pre.egress_revision)
    else:
        assert change.release_after is not None and change.release_after.release_id
        assert pre.rollout_generation is not None
        if change.action is Action.PROMOTE:
            await client.promote(
                change.service_id, change.release_after.release_id,
                idempotency_key=change.idempotency_key,
                expected_generation=pre.rollout_generation, expected_rollout_id=pre.rollout_id)
        else:
            assert pre.rollout_id is not None
            await client.rollback(
                change.service_id, change.release_after.release_id,
                idempotency_key=change.idempotency_key,
                expected_generation=pre.rollout_generation, expected_rollout_id=pre.rollout_id)


async def _landed(client: ControlPlaneClient, change: Change) -> bool:
    """After a CAS refusal of a change we sent before: is its result what is live now?"""
    if change.action not in (Action.PROMOTE, Action.ROLLBACK, Action.SET_EGRESS):
        return False
    try:
        svc = parse_service(await client.get_service(change.service_id), [])
    except ControlPlaneError:
        return False
    if change.action is Action.SET_EGRESS:
        return evidence.egress_key(svc.egress or ()) == evidence.egress_key(
            change.egress_after or ())
    return change.release_after is not None and svc.current_digest == change.release_after.digest


async def _apply_one(client: ControlPlaneClient, journal: Journal, check: Check,
                     hook: Hook) -> ChangeResult:
    change = check.change
    label = f"{change.action.value} {change.service}" + (
        f" ({change.user_id})" if change.user_id else "")
    if check.freshness is Freshness.ALREADY_LIVE:
        journal.result(change, Outcome.ALREADY_APPLIED.value, "already live")
        hook.line(f"  = {label}: already live")
        return ChangeResult(change=change, outcome=Outcome.ALREADY_APPLIED, detail="already live")
    replay = check.freshness is Freshness.OURS
    journal.intent(change)
    _crash_point("before-send", change.action.value)
    try:
        await _send(client, change)
    except CasMismatch as exc:
        if await _landed(client, change):
            # Our earlier run (same key), or another applier making the very same change:
            # what is live is what this change wanted, so nothing is left to do.
            detail = "sent by an earlier run" if replay else \
                f"someone else made the same change first ({exc.code})"
            journal.result(change, Outcome.ALREADY_APPLIED.value, detail)
            hook.line(f"  = {label}: already applied: {detail}")
            return ChangeResult(change=change, outcome=Outcome.ALREADY_APPLIED, detail=detail)
        detail = (f"someone else changed {change.service} ({exc.code}): planned against "
                  f"{safe(exc.expected)}, the control plane now has {safe(exc.actual)}")
        journal.result(change, Outcome.REFUSED.value, detail)
        hook.line(f"  ✗ {label}: {detail}")
        return ChangeResult(change=change, outcome=Outcome.REFUSED, detail=detail, code=exc.code)
    except DomainError as exc:
        journal.result(change, Outcome.REFUSED.value, str(exc))
        hook.line(f"  ✗ {label}: refused: {exc}")
        return ChangeResult(change=change, outcome=Outcome.REFUSED, detail=str(exc),
                            code=exc.code)
    except ControlPlaneError as exc:
        # The write may or may not have landed; the journal keeps the key for a rerun.
        journal.result(change, Outcome.FAILED.value, str(exc))
        hook.line(f"  ✗ {label}: failed: {exc} (a rerun replays key {change.idempotency_key})")
        return ChangeResult(change=change, outcome=Outcome.FAILED, detail=str(exc))
    _crash_point("after-send", change.action.value)
    # A replayed key either made the change now or returned the earlier run's result;
    # the control plane's answer is the same either way, so say what we know.
    detail = "sent with the key of an interrupted earlier run" if replay else ""
    journal.result(change, Outcome.APPLIED.value, detail)
    hook.line(f"  ✓ {label}" + (f" ({detail})" if replay else ""))
    return ChangeResult(change=change, outcome=Outcome.APPLIED, detail=detail)


async def execute(checks: Sequence[Check], *, client: ControlPlaneClient, journal: Journal,
                  hook: Hook, concurrency: int) -> list[ChangeResult]:
    """Send every change; services in parallel, each service's changes in plan order."""
    by_service: dict[str, list[Check]] = {}
    for check in checks:
        by_service.setdefault(check.change.service_id, []).append(check)
    semaphore = asyncio.Semaphore(max(1, concurrency))
    results: dict[str, ChangeResult] = {}

    async def run_service(group: list[Check]) -> None:
        async with semaphore:
            stopped: ChangeResult | None = None
            for check in group:
                if stopped is not None:
                    results[check.change.idempotency_key] = ChangeResult(
                        change=check.change, outcome=Outcome.SKIPPED,
                        detail=f"not sent: {stopped.change.action.value} of "
                        f"{stopped.change.service} was {stopped.outcome.value}")
                    continue
                result = await _apply_one(client, journal, check, hook)
                results[check.change.idempotency_key] = result
                if result.outcome not in (Outcome.APPLIED, Outcome.ALREADY_APPLIED):
                    stopped = result

    await asyncio.gather(*(run_service(g) for g in by_service.values()))
    return [results[c.change.idempotency_key] for c in checks]


def gate_targets(plan: Plan, results: Iterable[ChangeResult]) -> list[GateTarget]:
    """What the gate must see: every release or egress change that went through, and
    every pinned rollout the plan found still converging or diverged."""
    ok = {r.change.idempotency_key for r in results
          if r.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED)}
    evidence_of = {e.service: e for e in plan.evidence}
    targets: dict[str, GateTarget] = {}
    for change in plan.changes:
        if change.idempotency_key not in ok or not change.waits_for_convergence:
            continue
        ev = evidence_of.get(change.service)
        expected = ev.expected_clusters if ev else plan.expected_clusters
        prior = targets.get(change.service)
        digest = prior.digest if prior else None
        egress = prior.egress if prior else None
        if change.action is Action.SET_EGRESS:
            egress = change.egress_after
        elif change.release_after is not None:
            digest = change.release_after.digest
        targets[change.service] = GateTarget(change.service, change.app_id, digest, egress,
                                             expected)
    for name in plan.unconverged():
        ev = evidence_of.get(name)
        if ev is not None and name not in targets:
            targets[name] = GateTarget(name, ev.app_id, ev.desired_digest, None,
                                       ev.expected_clusters)
    return [targets[k] for k in sorted(targets)]


def _judge(targets: Sequence[GateTarget],
           observations: dict[str, tuple[Observation, ...]]) -> list[ClusterFinding]:
    findings = []
    for target in targets:
        rows = {o.cluster_id: o for o in observations.get(target.app_id, ())}
        for cluster in target.expected_clusters:
            obs = rows.get(cluster) or Observation(
                cluster_id=cluster, kind=ObservationKind.SILENT, reason="not probed")
            judged = evidence.judge_convergence(obs, digest=target.digest, egress=target.egress)
            findings.append(ClusterFinding(
                service=target.service, cluster=cluster, verdict=judged.verdict,
                reason=judged.reason, running=judged.running, wanted=target.digest,
                last_error=judged.last_error))
    return findings


async def gate(targets: Sequence[GateTarget], *, prober: Prober, attempts: int,
               interval: float, hook: Hook) -> GateReport:
    """Poll until every target cluster converges or ``attempts`` polls have been made."""
    _crash_point("gate")
    started = time.monotonic()
    extra = sorted({c for t in targets for c in t.expected_clusters})
    findings: list[ClusterFinding] = []
    attempt = 0
    for attempt in range(1, attempts + 1):
        observations = await prober.observe_apps([t.app_id for t in targets],
                                                 extra_expected=extra)
        findings = _judge(targets, observations)
        pending = [f for f in findings if f.verdict is not evidence.Verdict.CONVERGED]
        if not pending:
            hook.line(f"  gate {attempt}/{attempts}: every cluster converged "
                      f"({len(findings)} service×cluster checks)")
            return GateReport(attempts=attempt, waited_seconds=time.monotonic() - started,
                              converged=True, findings=tuple(findings))
        shown = "; ".join(
            f"{f.service}@{f.cluster} "
            f"{'no evidence' if f.verdict is evidence.Verdict.NO_EVIDENCE else 'not converged'}"
            f": {_DIGEST.sub(lambda m: m.group()[:19], f.reason)}" for f in pending[:3])
        more = f" (+{len(pending) - 3} more)" if len(pending) > 3 else ""
        hook.line(f"  gate {attempt}/{attempts}: waiting on {len(pending)} of "
                  f"{len(findings)}: {shown}{more}")
        if attempt < attempts:
            await asyncio.sleep(interval)
    return GateReport(attempts=attempt, waited_seconds=time.monotonic() - started,
                      converged=False, findings=tuple(findings))
