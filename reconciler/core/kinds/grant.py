"""The grant kind: ``set_grant``, one user's deployment capabilities on one service.

Owns the change model, the diff (the repo's Grant documents against the control plane's
grants; an undeclared live grant is pruned only when the repo says ``prune: true`` and
the service's live state is known, else it is drift), the precondition (the live
grant), the idempotency key (user and capabilities against it), its part of the
staleness rule, its summary and its part of a review's modification. A grant lives apart
from the service, so the gate does not wait for it.

Must not send anything (``shell.applying`` does). Pure: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import ClassVar, Literal

from reconciler.core.codes import BlockerCode, DriftCode, ReasonCode
from reconciler.core.desired import DesiredState
from reconciler.core.findings import Blocker, Drift
from reconciler.core.kinds.base import (
    Action,
    ChangeBase,
    Diff,
    Kind,
    Preconditions,
    idempotency_key,
)
from reconciler.core.live import LiveService, LiveSnapshot
from reconciler.core.sanitize import safe


class GrantChange(ChangeBase):
    """Set one user's capabilities on one service."""

    action: Literal[Action.SET_GRANT]
    user_id: str
    capabilities_before: tuple[str, ...] | None = None
    capabilities_after: tuple[str, ...]
    capabilities_added: tuple[str, ...] = ()
    capabilities_removed: tuple[str, ...] = ()


def diff(desired: DesiredState, live: LiveSnapshot) -> Diff:
    """Every grant change the repo needs against ``live``; what the repo does not declare
    and does not prune is drift; unreadable grants block every grant change."""
    found = Diff()
    if live.grants is None:
        found.blockers.append(Blocker(
            code=BlockerCode.GRANTS_UNREADABLE,
            message="the control plane's deployment grants could not be read "
            f"({safe(live.grants_error or 'no answer')}); "
            "grant changes cannot be planned"))
        return found
    names = {s.service_id: s.name for s in desired.services}
    apps = {s.service_id: s.app_id for s in desired.services}
    known = {sid for sid in names if isinstance(live.services.get(sid), LiveService)}
    live_map: dict[tuple[str, str], tuple[str, ...]] = {
        (g.user_id, g.service_id): tuple(sorted(c.value for c in g.capabilities))
        for g in live.grants
    }
    declared = desired.desired_grants()
    want_map = {key: tuple(sorted(c.value for c in caps)) for key, caps in declared.items()}
    found.preconditions["grants"] = sorted(
        [u, s, list(c)] for (u, s), c in live_map.items() if s in names)
    prune = desired.settings.policy.prune
    for (user, sid), caps in sorted(live_map.items()):
        if sid in names and (user, sid) not in want_map:
            if prune and sid in known:
                want_map[(user, sid)] = ()
            else:
                why = "pruning is off" if not prune else \
                    "not pruned: the service's live state is unknown"
                found.drift.append(Drift(
                    code=DriftCode.GRANT_NOT_DECLARED, service=names[sid],
                    message=f"{names[sid]}: user {safe(user)} holds {', '.join(caps) or '[]'} "
                    f"live, which no Grant document declares ({why})"))
    for (user, sid), want in sorted(want_map.items()):
        if sid not in known:
            continue  # the service's live state is unknown: blocked elsewhere, never guessed
        have = live_map.get((user, sid), ())
        if want == have:
            continue
        pre = Preconditions(capabilities=have)
        added = tuple(sorted(set(want) - set(have)))
        removed = tuple(sorted(set(have) - set(want)))
        pruned = (user, sid) not in declared
        found.changes.append(GrantChange(
            action=Action.SET_GRANT, service=names[sid], service_id=sid, app_id=apps[sid],
            reason=ReasonCode.GRANT_NOT_DECLARED if pruned else ReasonCode.GRANT_DIFFERS,
            summary=f"{names[sid]}: {user} " + "; ".join(
                ([f"gains {', '.join(added)}"] if added else [])
                + ([f"loses {', '.join(removed)}"] if removed else []))
            + (" (not declared; pruned)" if pruned else ""),
            preconditions=pre, user_id=user,
            idempotency_key=idempotency_key(Action.SET_GRANT, sid, [user, list(want)], pre),
            capabilities_before=have, capabilities_after=want,
            capabilities_added=added, capabilities_removed=removed,
        ))
    return found


def _live_caps(change: GrantChange, live: LiveSnapshot) -> tuple[str, ...] | None:
    if live.grants is None:
        return None
    for grant in live.grants:
        if grant.user_id == change.user_id and grant.service_id == change.service_id:
            return tuple(sorted(c.value for c in grant.capabilities))
    return ()


class _Grant(Kind[GrantChange]):
    target = "grant"
    models: ClassVar[tuple[type[ChangeBase], ...]] = (GrantChange,)
    order = 0
    verbs: ClassVar[dict[Action, str]] = {Action.SET_GRANT: "set grant"}
    codes: ClassVar[Mapping[StrEnum, str]] = {
        BlockerCode.GRANTS_UNREADABLE:
            "The deployment grants could not be read.",
        DriftCode.GRANT_NOT_DECLARED:
            "Set grant to []: pruned, no Grant document declares it.",
        ReasonCode.GRANT_DIFFERS:
            "Set grant: capabilities added and/or removed.",
        ReasonCode.GRANT_NOT_DECLARED:
            "Set grant to []: pruned, no Grant document declares it.",
    }
    waits_for_convergence = False

    def diff_all(self, desired: DesiredState, live: LiveSnapshot) -> Diff:
        return diff(desired, live)

    def already_live(self, change: GrantChange, svc: LiveService, live: LiveSnapshot) -> bool:
        caps = _live_caps(change, live)
        return caps is not None and caps == tuple(sorted(change.capabilities_after))

    def moved(self, change: GrantChange, svc: LiveService, live: LiveSnapshot) -> str:
        pre = change.preconditions
        caps = _live_caps(change, live)
        if caps is None:
            return "the live grants could not be read"
        if pre.capabilities is not None and tuple(sorted(pre.capabilities)) != caps:
            return (f"grant of {change.user_id} [{', '.join(pre.capabilities)}] → "
                    f"[{', '.join(caps)}]")
        return ""

    def modification(self, base: GrantChange, head: GrantChange) -> dict[str, object]:
        before, after = set(base.capabilities_after), set(head.capabilities_after)
        return {"capabilities_added_vs_base": tuple(sorted(after - before)),
                "capabilities_dropped_vs_base": tuple(sorted(before - after))}

    def review_key(self, change: GrantChange) -> str | None:
        return change.user_id  # one user's grant on one service

    def touched(self, base: DesiredState, head: DesiredState) -> set[str]:
        before, after = base.desired_grants(), head.desired_grants()
        ids = {s.service_id: s.name for s in (*base.services, *head.services)}
        return {ids.get(key[1], key[1]) for key in before.keys() | after.keys()
                if before.get(key) != after.get(key)}


KIND = _Grant()
