"""Is a planned change still safe to send? Judged against a fresh snapshot. Pure.

Owns the rule apply uses before any write: a change whose preconditions (rollout
generation and id, egress revision, the live grant) still hold is ``fresh``; one whose
intended result is already live is ``already_live`` (a rerun after a crash, or someone
did the same thing); one this applier already sent (its idempotency key is in the
journal) is ``ours`` and is replayed with the same key; anything else moved under the
plan and is ``stale`` -- apply refuses it, naming what moved from what to what.

Which preconditions a change has, and what "already live" means for it, is its kind's
(``core.kinds``: ``Kind.moved``, ``Kind.already_live``, ``Kind.check``). A ``create``
was planned against the service's absence: it is fresh (or ours) while the control
plane still has no such service, already live once the service exists with a rollout to
the pinned digest (a rerun after a crash), and stale when it exists otherwise.
"""

from __future__ import annotations

from reconciler.core.kinds import Change, kind_of
from reconciler.core.kinds.base import ChangeBase, Check, Freshness
from reconciler.core.live import LiveService, LiveSnapshot

__all__ = ["Check", "Freshness", "check", "service_shows"]


def service_shows(change: ChangeBase, svc: LiveService) -> bool:
    """Does the service's own state already hold what the change wants? (A grant lives
    apart from the service: ``False`` for it.)"""
    return bool(kind_of(change).shows(change, svc))


def check(change: Change, live: LiveSnapshot, *, journaled: bool) -> Check[Change]:
    """Judge one change against ``live``; ``journaled``: its key was sent before."""
    result: Check[Change] = kind_of(change).check(change, live, journaled=journaled)
    return result
