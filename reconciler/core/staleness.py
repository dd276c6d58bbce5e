"""Is a planned change still safe to send? Judged against a fresh snapshot. Pure.

Owns the rule apply uses before any write: a change whose preconditions (rollout
generation and id, egress revision, the live grant) still hold is ``fresh``; one whose
intended result is already live is ``already_live`` (a rerun after a crash, or someone
did the same thing); one this applier already sent (its idempotency key is in the
journal) is ``ours`` and is replayed with the same key; anything else moved under the
plan and is ``stale`` -- apply refuses it, naming what moved from what to what.

A ``create`` was planned against the service's absence: it is fresh (or ours) while the
control plane still has no such service, already live once the service exists with a
rollout to the pinned digest (a rerun after a crash), and stale when it exists otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from reconciler.core import routekind
from reconciler.core.evidence import egress_key
from reconciler.core.live import LiveService, LiveSnapshot, ReadFailure
from reconciler.core.plans import ROUTE_ACTIONS, Action, Change


class Freshness(StrEnum):
    FRESH = "fresh"
    ALREADY_LIVE = "already_live"
    OURS = "ours"
    STALE = "stale"


@dataclass(frozen=True)
class Check:
    change: Change
    freshness: Freshness
    detail: str = ""


def service_shows(change: Change, svc: LiveService) -> bool:
    """Does the service's own state already hold what a release or egress change wants?
    (A grant lives apart from the service: ``False`` for it.)"""
    if change.action in (Action.PROMOTE, Action.ROLLBACK, Action.CREATE):
        return change.release_after is not None and \
            svc.current_digest == change.release_after.digest
    if change.action is Action.SET_EGRESS:
        return egress_key(svc.egress or ()) == egress_key(change.egress_after or ())
    return False


def _already_live(change: Change, svc: LiveService, live: LiveSnapshot) -> bool:
    if change.action is not Action.SET_GRANT:
        return service_shows(change, svc)
    caps = _live_caps(change, live)
    return caps is not None and caps == tuple(sorted(change.capabilities_after or ()))


def _live_caps(change: Change, live: LiveSnapshot) -> tuple[str, ...] | None:
    if live.grants is None:
        return None
    for grant in live.grants:
        if grant.user_id == change.user_id and grant.service_id == change.service_id:
            return tuple(sorted(c.value for c in grant.capabilities))
    return ()


def _moved(change: Change, svc: LiveService, live: LiveSnapshot) -> str:
    """What moved, as "field: planned → now"; empty when nothing did."""
    pre = change.preconditions
    moved: list[str] = []
    if change.action in (Action.PROMOTE, Action.ROLLBACK):
        if pre.rollout_generation != svc.rollout_generation:
            moved.append(f"rollout generation {pre.rollout_generation} → "
                         f"{svc.rollout_generation}")
        now_id = svc.deployment.rollout_id if svc.deployment else None
        if pre.rollout_id != now_id:
            moved.append(f"rollout id {pre.rollout_id} → {now_id}")
    elif change.action is Action.SET_EGRESS:
        if pre.egress_revision != svc.egress_revision:
            moved.append(f"egress revision {pre.egress_revision} → {svc.egress_revision}")
    else:
        caps = _live_caps(change, live)
        if caps is None:
            moved.append("the live grants could not be read")
        elif pre.capabilities is not None and tuple(sorted(pre.capabilities)) != caps:
            moved.append(f"grant of {change.user_id} [{', '.join(pre.capabilities)}] → "
                         f"[{', '.join(caps)}]")
    return "; ".join(moved)


def check(change: Change, live: LiveSnapshot, *, journaled: bool) -> Check:
    """Judge one change against ``live``; ``journaled``: its key was sent before."""
    if change.action in ROUTE_ACTIONS:
        return _check_route(change, live, journaled=journaled)
    svc = live.services.get(change.service_id)
    if change.action is Action.CREATE:
        return _check_creation(change, svc, journaled=journaled)
    if not isinstance(svc, LiveService):
        return Check(change, Freshness.STALE, f"{change.service}: the control plane gave no "
                     "state for it now")
    moved = _moved(change, svc, live)
    if not moved:
        return Check(change, Freshness.OURS if journaled else Freshness.FRESH)
    if _already_live(change, svc, live):
        return Check(change, Freshness.ALREADY_LIVE, moved)
    if journaled:
        return Check(change, Freshness.OURS, moved)
    return Check(change, Freshness.STALE, f"{change.service}: {moved}")


def _check_route(change: Change, live: LiveSnapshot, *, journaled: bool) -> Check:
    """A route change: stale when the live route at its owner key moved since the plan
    (``core.routekind.moved``), unless it already is what the change wants."""
    key = change.route_key
    assert key is not None
    moved = routekind.moved(change.route_before, live.routes, key)
    if not moved:
        return Check(change, Freshness.OURS if journaled else Freshness.FRESH)
    if routekind.shows(change.route_after, live.routes, key):
        return Check(change, Freshness.ALREADY_LIVE, moved)
    if journaled:
        return Check(change, Freshness.OURS, moved)
    return Check(change, Freshness.STALE, f"{change.service}: {moved}")


def _check_creation(change: Change, svc: LiveService | ReadFailure | None, *,
                    journaled: bool) -> Check:
    if isinstance(svc, ReadFailure) and svc.code == "SERVICE_NOT_FOUND":
        return Check(change, Freshness.OURS if journaled else Freshness.FRESH)
    if isinstance(svc, LiveService):
        if service_shows(change, svc):
            return Check(change, Freshness.ALREADY_LIVE, f"{change.service} exists now, "
                         f"rolled out to {svc.current_digest}")
        return Check(change, Freshness.STALE, f"{change.service}: planned as a creation, but "
                     f"the control plane has it now (its rollout is to "
                     f"{svc.current_digest or 'no release'})")
    return Check(change, Freshness.STALE, f"{change.service}: the control plane gave no state "
                 "for it now, so its absence is not proven")
