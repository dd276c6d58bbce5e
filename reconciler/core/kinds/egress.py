"""The egress kind: ``set_egress``, the destinations a service may reach.

Owns the change model, the diff (the repo's declared destinations against the control
plane's; omitted in the repo: left alone), the precondition (the egress revision,
compared and swapped), the idempotency key (the whole list against that revision), the
egress's part of the judge's proof (the declared egress in effect on a cluster, nothing
its operator dropped), its part of the staleness rule, its summary and its part of a
review's modification.

Must not send anything (``shell.applying`` does). Pure: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import ClassVar, Literal

from reconciler.core.codes import ReasonCode
from reconciler.core.desired import Service
from reconciler.core.kinds.base import (
    Action,
    ChangeBase,
    Diff,
    Expecting,
    Kind,
    Preconditions,
    idempotency_key,
)
from reconciler.core.live import EgressRule, LiveService, LiveSnapshot, Observation
from reconciler.core.sanitize import safe
from reconciler.core.targets import Target
from reconciler.core.whys import Assessment, Why


class EgressChange(ChangeBase):
    """Replace the service's declared egress with the repo's list."""

    action: Literal[Action.SET_EGRESS]
    egress_before: tuple[EgressRule, ...] | None = None
    egress_after: tuple[EgressRule, ...]
    egress_added: tuple[EgressRule, ...] = ()
    egress_removed: tuple[EgressRule, ...] = ()


def egress_key(rules: Iterable[EgressRule]) -> frozenset[tuple[str, int]]:
    return frozenset((r.host, r.port) for r in rules)


def rules(pairs: Iterable[tuple[str, int]]) -> tuple[EgressRule, ...]:
    return tuple(EgressRule(host=h, port=p) for h, p in sorted(pairs))


def diff(svc: Service, live: LiveService) -> Diff:
    """The egress change ``svc`` needs against ``live``: none when the repo omits egress
    (the live declaration is left alone) or declares what is live."""
    found = Diff()
    if svc.egress is None:  # omitted: leave the live declaration alone
        return found
    want = {(d.host, d.port) for d in svc.egress}
    have = egress_key(live.egress or ())
    if want == have:
        return found
    added, removed = want - have, have - want
    pre = Preconditions(egress_revision=live.egress_revision)
    after = rules(want)
    bits = []
    if added:
        bits.append("opens " + ", ".join(f"{h}:{p}" for h, p in sorted(added)))
    if removed:
        bits.append("revokes " + ", ".join(f"{h}:{p}" for h, p in sorted(removed)))
    found.changes.append(EgressChange(
        action=Action.SET_EGRESS, service=svc.name, service_id=svc.service_id,
        app_id=svc.app_id,
        reason=ReasonCode.EGRESS_REVOKE_ALL if not want else ReasonCode.EGRESS_DIFFERS,
        summary=f"{svc.name}: egress {'; '.join(bits)}",
        preconditions=pre,
        idempotency_key=idempotency_key(
            Action.SET_EGRESS, svc.service_id, [[r.host, r.port] for r in after], pre),
        egress_before=rules(have), egress_after=after,
        egress_added=rules(added), egress_removed=rules(removed),
    ))
    return found


def _pairs(pairs: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{safe(h)}:{p}" for h, p in sorted(pairs))


def assess(observation: Observation, egress: tuple[EgressRule, ...] | None,
           running: str | None, last_error: str | None) -> Assessment | None:
    """The egress's part of the judge's proof of one answered cluster: the declared
    egress (None: none is declared anywhere, nothing to check) is what the cluster says
    is in effect, and its operator dropped none of it. None: proven."""
    runtime = observation.runtime
    if egress is None or runtime is None:
        return None
    if runtime.egress is None:
        return Why.NO_EGRESS, "sent no effective egress", running, last_error
    declared = egress_key(egress)
    dropped = declared & egress_key(runtime.egress_dropped)
    in_effect = egress_key(runtime.egress)
    if dropped:
        # The operator's allow-list refused it: the destination is not in effect, and
        # no amount of waiting will change that. Reported, never counted as converged.
        return (Why.EGRESS_DROPPED,
                f"its operator allow-list dropped egress to {_pairs(dropped)}",
                running, last_error)
    if in_effect != declared:
        bits = []
        if declared - in_effect:
            bits.append("missing " + _pairs(declared - in_effect))
        if in_effect - declared:
            bits.append("still allows " + _pairs(in_effect - declared))
        return Why.EGRESS_DIFFERS, "egress " + "; ".join(bits), running, last_error
    return None


def _sorted(items: Iterable[EgressRule]) -> tuple[EgressRule, ...]:
    return tuple(sorted(items, key=lambda r: (r.host, r.port)))


def _minus(a: Sequence[EgressRule] | None, b: Sequence[EgressRule] | None
           ) -> tuple[EgressRule, ...]:
    seen = {(r.host, r.port) for r in b or ()}
    return _sorted(r for r in a or () if (r.host, r.port) not in seen)


def _both(a: Sequence[EgressRule] | None, b: Sequence[EgressRule] | None
          ) -> tuple[EgressRule, ...]:
    seen = {(r.host, r.port) for r in b or ()}
    return _sorted(r for r in a or () if (r.host, r.port) in seen)


class _Egress(Kind[EgressChange]):
    target = "egress"
    models: ClassVar[tuple[type[ChangeBase], ...]] = (EgressChange,)
    order = 1
    verbs: ClassVar[dict[Action, str]] = {Action.SET_EGRESS: "set egress"}
    whys: ClassVar[Mapping[Why, str]] = {
        Why.NO_EGRESS:
            "Egress must be checked and the cluster sent none (unproven).",
        Why.EGRESS_DROPPED:
            "A declared destination was dropped by the cluster's operator (not converged).",
        Why.EGRESS_DIFFERS:
            "The effective egress differs from the declared list (not converged).",
    }
    unproven = frozenset({Why.NO_EGRESS})
    proves = 1  # after the release
    codes: ClassVar[Mapping[StrEnum, str]] = {
        ReasonCode.EGRESS_DIFFERS:
            "Set egress: destinations opened and/or revoked.",
        ReasonCode.EGRESS_REVOKE_ALL:
            "Set egress to []: every destination revoked.",
    }

    def shows(self, change: EgressChange, svc: LiveService) -> bool:
        return egress_key(svc.egress or ()) == egress_key(change.egress_after)

    def moved(self, change: EgressChange, svc: LiveService, live: LiveSnapshot) -> str:
        pre = change.preconditions
        if pre.egress_revision != svc.egress_revision:
            return f"egress revision {pre.egress_revision} → {svc.egress_revision}"
        return ""

    def modification(self, base: EgressChange, head: EgressChange) -> dict[str, object]:
        return {
            "egress_added_vs_base": _minus(head.egress_after, base.egress_after),
            "egress_dropped_vs_base": _minus(base.egress_after, head.egress_after),
            "egress_pending_on_base": _both(head.egress_added, base.egress_added),
            "egress_added_vs_live": _sorted(head.egress_added),
            "egress_removed_vs_live": _sorted(head.egress_removed),
        }

    def expect(self, ask: Expecting) -> dict[str, object]:
        """The egress the repo declares -- or, when the repo leaves egress alone, the
        control plane's declaration (None when it is unknown: nothing is checked)."""
        svc, live = ask.svc, ask.live
        if svc.egress is not None:
            return {"egress": rules((d.host, d.port) for d in svc.egress)}
        return {"egress": live.egress if isinstance(live, LiveService) else None}

    def assess(self, observation: Observation, target: Target, running: str | None,
               last_error: str | None) -> Assessment | None:
        return assess(observation, target.egress, running, last_error)


KIND = _Egress()
