"""Executing a plan's changes: the writes, nothing else.

Owns the sending: each change through the control-plane client with its idempotency key
and compare-and-swap preconditions, journalled before and after; services in parallel
(bounded), one service's changes in plan order; a change that does not succeed stops
the rest of *that* service and nothing else. The request each kind is written with is
its sender's (``shell.sending``); a creation goes through ``shell.greenfield.create``
(``createGreenfieldDeployment`` [ext]) the same way: journal, key, result; the gate then
judges it like a promotion.

Must not decide what to change (the plan did), sequence anything around the writes (the
engine does: observe, plan, execute, gate), judge convergence (``core.evidence``) or
print (it emits typed events through ``Hook``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence

from reconciler.core.events import Hook, PostApply, PreApply
from reconciler.core.outcomes import EXPIRED, ChangeResult, Outcome
from reconciler.core.plans import Change
from reconciler.core.sanitize import safe
from reconciler.core.staleness import Check, Freshness
from reconciler.shell.controlplane import (
    CasMismatch,
    ControlPlaneClient,
    ControlPlaneError,
    DomainError,
)
from reconciler.shell.journal import Journal
from reconciler.shell.sending import sender_of


class Fenced(Exception):
    """The fence refused a write: this process no longer owns the change's service (its
    shard was taken over, its lease expired, or the coordination store is unreachable)."""


#: Asked just before each write (sharded watching, ``engine.ShardedWatchSteps.fence``):
#: returns the fencing token the journal records with the intent, or raises ``Fenced``.
Fence = Callable[[Change], Awaitable[dict[str, object]]]

#: Crash-safety test seam: ``RECONCILE_CRASH_AT=point[:action]`` kills this process
#: with SIGKILL at that point, so tests can prove a rerun converges from each of them.
CRASH_ENV = "RECONCILE_CRASH_AT"


def crash_point(point: str, action: str = "") -> None:
    wanted = os.environ.get(CRASH_ENV)
    if wanted and wanted in (point, f"{point}:{action}"):
        os.kill(os.getpid(), signal.SIGKILL)


#: Pause seam of the sharded-watching tests: ``RECONCILE_PAUSE_AT=before-fence`` stops
#: this process (SIGSTOP) once, just before its first fenced write, as a GC pause or a
#: partition would; the test resumes it (SIGCONT) after another member took its shards.
PAUSE_ENV = "RECONCILE_PAUSE_AT"
_paused: set[str] = set()


def pause_point(point: str) -> None:
    if os.environ.get(PAUSE_ENV) == point and point not in _paused:
        _paused.add(point)
        os.kill(os.getpid(), signal.SIGSTOP)


async def _apply_one(client: ControlPlaneClient, journal: Journal, check: Check[Change],
                     hook: Hook, fence: Fence | None = None) -> ChangeResult:
    change = check.change
    sender = sender_of(change)  # how the change's kind is sent (``shell.sending``)
    if check.freshness is Freshness.ALREADY_LIVE:
        journal.result(change, Outcome.ALREADY_APPLIED.value, "already live")
        return ChangeResult(change=change, outcome=Outcome.ALREADY_APPLIED, detail="already live")
    token: dict[str, object] | None = None
    if fence is not None:
        pause_point("before-fence")
        try:
            token = await fence(change)
        except Fenced as exc:
            # Nothing was sent, and no intent is journalled: the new owner sends it.
            return ChangeResult(change=change, outcome=Outcome.SKIPPED,
                                detail=f"not sent: {exc}")
    replay = check.freshness is Freshness.OURS
    hook(PreApply(change=change, replay=replay))
    journal.intent(change, fence=token)
    crash_point("before-send", change.action.value)
    try:
        replayed, said = await sender.send(client, change)
    except CasMismatch as exc:
        if await sender.landed(client, change):
            # Our earlier run (same key), or another applier making the very same change:
            # what is live is what this change wanted, so nothing is left to do.
            detail = "sent by an earlier run" if replay else \
                f"someone else made the same change first ({exc.code})"
            journal.result(change, Outcome.ALREADY_APPLIED.value, detail)
            return ChangeResult(change=change, outcome=Outcome.ALREADY_APPLIED, detail=detail)
        detail = (f"someone else changed {change.service} ({exc.code}): planned against "
                  f"{safe(exc.expected)}, the control plane now has {safe(exc.actual)}")
        journal.result(change, Outcome.REFUSED.value, detail)
        return ChangeResult(change=change, outcome=Outcome.REFUSED, detail=detail, code=exc.code)
    except DomainError as exc:
        if sender.made_elsewhere(exc) and await sender.landed(client, change):
            # Another apply (another commit: same key, other payload; or another key)
            # created the very service first, rolled out to this digest: nothing is left
            # to send. The gate still judges everything else the repo declares.
            detail = f"someone else created {change.service} with this release first " \
                f"({exc.code})"
            journal.result(change, Outcome.ALREADY_APPLIED.value, detail)
            return ChangeResult(change=change, outcome=Outcome.ALREADY_APPLIED, detail=detail)
        detail = sender.refusal(exc)
        journal.result(change, Outcome.REFUSED.value, detail)
        return ChangeResult(change=change, outcome=Outcome.REFUSED, detail=detail,
                            code=exc.code)
    except ControlPlaneError as exc:
        if exc.in_doubt:
            # Sent and unanswered: the control plane may have committed it. The journal
            # keeps the key (in doubt), so a rerun replays it, never a fresh one.
            detail = (f"in doubt — a rerun replays key {change.idempotency_key} ({exc}; the "
                      "request was sent and no answer came back, so the control plane may "
                      "have committed it)")
            journal.result(change, Outcome.IN_DOUBT.value, detail)
            return ChangeResult(change=change, outcome=Outcome.IN_DOUBT, detail=detail)
        # Not sent, or refused in a way the client could not read: the journal still
        # keeps the key for a rerun.
        detail = f"{exc} (a rerun replays key {change.idempotency_key})"
        journal.result(change, Outcome.FAILED.value, detail)
        return ChangeResult(change=change, outcome=Outcome.FAILED, detail=detail)
    crash_point("after-send", change.action.value)
    if replayed:
        # The control plane answered with an earlier call's result: this run changed
        # nothing (ours, interrupted; or another apply of the same plan got there first).
        detail = "replayed: an interrupted earlier run of this apply had sent it" if replay \
            else "replayed: another apply sent this very change (same key) first"
        detail += f" ({said})" if said else ""
        journal.result(change, Outcome.ALREADY_APPLIED.value, detail)
        return ChangeResult(change=change, outcome=Outcome.ALREADY_APPLIED, detail=detail)
    # Without the [ext] marker a replayed key and a first send look the same.
    detail = "; ".join(d for d in ("sent with the key of an interrupted earlier run"
                                   if replay else "", said) if d)
    journal.result(change, Outcome.APPLIED.value, detail)
    return ChangeResult(change=change, outcome=Outcome.APPLIED, detail=detail)


async def execute(checks: Sequence[Check[Change]], *, client: ControlPlaneClient, journal: Journal,
                  hook: Hook, concurrency: int,
                  deadline: float | None = None,
                  fence: Fence | None = None) -> list[ChangeResult]:
    """Send every change; services in parallel, each service's changes in plan order.

    ``deadline`` (``time.monotonic()``; ``apply --timeout``): no change is *started* after
    it (each is skipped, said so); a write already sent is never abandoned mid-flight --
    its own call deadline bounds it -- so it ends applied, refused, failed or in doubt.
    ``fence`` (sharded watching) is asked before each write; a refusal skips the write."""
    by_service: dict[str, list[Check[Change]]] = {}
    for check in checks:
        by_service.setdefault(check.change.service_id, []).append(check)
    semaphore = asyncio.Semaphore(max(1, concurrency))
    results: dict[str, ChangeResult] = {}

    async def run_service(group: list[Check[Change]]) -> None:
        async with semaphore:
            stopped: ChangeResult | None = None
            for check in group:
                if stopped is None and deadline is not None and time.monotonic() >= deadline:
                    results[check.change.idempotency_key] = ChangeResult(
                        change=check.change, outcome=Outcome.SKIPPED,
                        detail=f"{EXPIRED} before it was sent")
                    continue
                if stopped is not None:
                    results[check.change.idempotency_key] = ChangeResult(
                        change=check.change, outcome=Outcome.SKIPPED,
                        detail=f"not sent: {stopped.change.action.value} of "
                        f"{stopped.change.service} was {stopped.outcome.value}")
                    continue
                result = await _apply_one(client, journal, check, hook, fence)
                hook(PostApply(result=result))
                results[check.change.idempotency_key] = result
                if result.outcome not in (Outcome.APPLIED, Outcome.ALREADY_APPLIED):
                    stopped = result

    # Every service's sequence settles before a failure is raised: a journal that stops
    # taking lines stops every other sequence at its next intent (before its send), and
    # the caller can then name everything that was sent.
    settled = await asyncio.gather(*(run_service(g) for g in by_service.values()),
                                   return_exceptions=True)
    for outcome in settled:
        if isinstance(outcome, BaseException):
            raise outcome
    return [results[c.change.idempotency_key] for c in checks]
