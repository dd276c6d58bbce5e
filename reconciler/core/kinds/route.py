"""The route kind (issue 21): ``sync_route`` and ``delete_route``, one gateway route of
this client, by its owner key (appId, hostname, routeRef).

Owns, for ``kind: Route`` documents against the routes the control plane lists
(``getGatewayClientRoutes``: ours, and [ext] other clients'):

- the diff: a declared route absent or different live is a ``sync_route`` change (its
  ownership key, before and after, every default written out); a live route of ours no
  document declares, for a service this repo declares, is a ``delete_route`` change only
  with ``policy.routes.prune: true``, else drift (``route_not_declared``). A route
  another client owns is never a change: it is read, analysed, and left alone;
- the blockers: ``route_ambiguous`` and ``route_shadowed`` (``core.routing.analyse``,
  over the declared routes and every live route that stays), a declared key another
  client owns (``route_owned_by_another_client``), and ``routes_unreadable``;
- the idempotency key (the key, the route wanted and the route planned against) and the
  staleness rule (the live route at the key moved since the plan);
- ``expected_routes``: the routes the judge requires in effect on every expected cluster
  for a service (``core.evidence.Target.routes``); None when the repo declares none for
  it, so a repo without routes is judged exactly as before; ``gone_keys``: the owner keys
  no expected cluster may still serve (``Target.routes_gone``: the routes a change being
  applied deletes, and -- with pruning on -- any route of the app a cluster serves that
  is neither declared nor another client's); ``assess``: that part of a cluster's proof
  (a cluster still serving the old route, or a deleted one, is named, with what it
  serves);
- through ``Kind`` (the dispatch): its codes and reasons with their sentences, its
  review target (``hostname/routeRef``), its order in a plan, its count and wire fields
  (added in format 2.4: written only on plans that hold a route change) and its detail.

Must not send anything (``shell.applying`` does). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal

from reconciler.core import routing
from reconciler.core.codes import BlockerCode, DriftCode, ReasonCode
from reconciler.core.desired import DesiredState, Service
from reconciler.core.findings import Blocker, Drift
from reconciler.core.kinds.base import (
    Action,
    ChangeBase,
    Check,
    Diff,
    Expecting,
    Freshness,
    Kind,
    Preconditions,
)
from reconciler.core.live import LiveService, LiveSnapshot, Observation
from reconciler.core.routing import GatewayRoute
from reconciler.core.sanitize import safe
from reconciler.core.targets import Target
from reconciler.core.whys import Assessment, Why

Key = tuple[str, str | None, str | None]


@dataclass(frozen=True, slots=True)
class Planned:
    """One route change before it becomes a ``core.plans.Change`` (the planner does that)."""

    delete: bool
    service: Service
    reason: ReasonCode
    summary: str
    before: GatewayRoute | None
    after: GatewayRoute | None
    idempotency_key: str

    @property
    def ownership(self) -> routing.RouteOwnership:
        route = self.after or self.before
        assert route is not None
        return route.ownership


@dataclass
class RoutePlan:
    """What the route kind contributes to a plan."""

    changes: list[Planned] = field(default_factory=list)
    #: (code, service or None, message)
    blockers: list[tuple[BlockerCode, str | None, str]] = field(default_factory=list)
    drift: list[tuple[DriftCode, str | None, str]] = field(default_factory=list)
    #: the live routes read for the fingerprint (sorted wire JSON of ours)
    preconditions: list[str] = field(default_factory=list)


def wanted(desired: DesiredState) -> dict[Key, tuple[GatewayRoute, Service]]:
    """Declared routes by wire ownership key (appId, hostname, routeRef), defaults
    written out; a route whose service the repo does not declare is left out (validation
    already said so)."""
    services = {s.name: s for s in desired.services}
    out: dict[Key, tuple[GatewayRoute, Service]] = {}
    for route in sorted(desired.routes, key=lambda r: r.name):
        svc = services.get(route.owner.service)
        if svc is not None:
            gateway_route = routing.from_declared(route, svc.app_id)
            out[gateway_route.key] = (gateway_route, svc)
    return out


def expected_routes(desired: DesiredState, svc: Service) -> tuple[GatewayRoute, ...] | None:
    """The routes every expected cluster must report in effect for ``svc``; None when
    the repo declares no route for it (routes are then not judged)."""
    if not desired.routes:
        return None
    return _by_service(desired).get(svc.name)


#: The last desired state's routes by owner service: asked once per service by the judge,
#: so building them again each time would make a 10,000-service plan quadratic.
_LAST: list[tuple[DesiredState, dict[str, tuple[GatewayRoute, ...]]]] = []


def _by_service(desired: DesiredState) -> dict[str, tuple[GatewayRoute, ...]]:
    last = _LAST[0] if _LAST else None  # one read: another thread may replace it
    if last is not None and last[0] is desired:
        return last[1]
    grouped: dict[str, list[GatewayRoute]] = {}
    for route, owner in wanted(desired).values():
        grouped.setdefault(owner.name, []).append(route)
    index = {name: tuple(routes) for name, routes in grouped.items()}
    _LAST[:] = [(desired, index)]
    return index


def route_key(action: str, key: Key, after: GatewayRoute | None,
              before: GatewayRoute | None) -> str:
    """A pure function of the change and what it was planned against."""
    payload = json.dumps([action, list(key), routing.to_wire(after) if after else None,
                          routing.to_wire(before) if before else None],
                         sort_keys=True, separators=(",", ":"))
    return "rcl-" + hashlib.sha256(payload.encode()).hexdigest()[:32]


def relevant(desired: DesiredState) -> bool:
    """Whether routes must be read at all: the repo declares one, or prunes routes."""
    return bool(desired.routes) or desired.settings.policy.routes.prune


def plan_routes(desired: DesiredState, live: Sequence[GatewayRoute] | None,
                error: str | None, where: Mapping[str, str]) -> RoutePlan:
    """The route changes, blockers and drift; ``live``: the routes read (ours with
    ``client_id`` None, others' with it), None when they could not be read (``error``);
    ``where``: route name -> file:line of its document."""
    result = RoutePlan()
    if not relevant(desired):
        return result
    if live is None:
        result.blockers.append((BlockerCode.ROUTES_UNREADABLE, None,
                                "the control plane's gateway routes could not be read ("
                                f"{safe(error or 'no answer')}); route changes cannot be "
                                "planned"))
        return result
    declared = wanted(desired)
    ours = {r.key: r for r in live if r.client_id is None}
    theirs = [r for r in live if r.client_id is not None]
    app_services = {s.app_id: s for s in desired.services}
    prune = desired.settings.policy.routes.prune
    result.preconditions = sorted(json.dumps([list(k), routing.to_wire(r)], sort_keys=True)
                                  for k, r in ours.items())

    for foreign in theirs:
        hit = declared.get(foreign.key)
        if hit is not None:
            route, svc = hit
            result.blockers.append((
                BlockerCode.ROUTE_OWNED_BY_ANOTHER_CLIENT, svc.name,
                f"{svc.name}: route {route.name!r} ({where.get(route.name, '?')}) has the "
                f"owner key ({route.ownership.describe()}) of route {foreign.name!r}, which "
                f"client {foreign.client_id} owns; reconcile never writes another client's "
                "route: choose another routeRef"))

    for key, (route, svc) in declared.items():
        have = ours.get(key)
        if have is not None and routing.same_config(have, route):
            continue
        reason = ReasonCode.ROUTE_MISSING if have is None else ReasonCode.ROUTE_DIFFERS
        if have is None:
            summary = f"{svc.name}: route {route.name} {route.summary()} (new)"
        else:
            summary = f"{svc.name}: route {route.name} {have.summary()} → {route.summary()}"
        result.changes.append(Planned(
            delete=False, service=svc, reason=reason, summary=summary, before=have,
            after=route, idempotency_key=route_key("sync_route", key, route, have)))

    staying: list[GatewayRoute] = list(theirs)
    for key, have in sorted(ours.items(), key=lambda kv: kv[1].name):
        if key in declared:
            continue
        owner = app_services.get(key[0])
        if owner is not None and prune:
            result.changes.append(Planned(
                delete=True, service=owner, reason=ReasonCode.ROUTE_NOT_DECLARED,
                summary=f"{owner.name}: route {have.name} {have.summary()} (not declared; "
                "pruned)", before=have, after=None,
                idempotency_key=route_key("delete_route", key, None, have)))
            continue
        staying.append(have)
        if owner is not None:
            result.drift.append((DriftCode.ROUTE_NOT_DECLARED, owner.name,
                                 f"{owner.name}: live route {safe(have.name)} ({have.summary()}) "
                                 "is ours but no Route document declares it (pruning of "
                                 "routes is off: policy.routes.prune)"))

    services = {route.name: svc.name for route, svc in declared.values()}
    for finding in routing.analyse([r for r, _ in declared.values()], staying):
        code = BlockerCode.ROUTE_AMBIGUOUS if finding.code is routing.FindingCode.AMBIGUOUS \
            else BlockerCode.ROUTE_SHADOWED
        service = services.get(finding.route.name)
        result.blockers.append((code, service, f"{service}: {safe(finding.message(where))}"))
    return result


def moved(before: GatewayRoute | None, live: Sequence[GatewayRoute] | None,
          key: Key) -> str:
    """Staleness: what happened to the route at ``key`` since the plan ("" when nothing)."""
    if live is None:
        return "the gateway routes could not be read"
    now = next((r for r in live if r.client_id is None and r.key == key), None)
    if now is None and before is None:
        return ""
    if now is not None and before is not None and routing.same_config(now, before):
        return ""
    owner = routing.RouteOwnership(app_id=key[0], hostname=key[1], route_ref=key[2])
    return (f"route at {owner.describe()}: {before.summary() if before else 'absent'} → "
            f"{now.summary() if now else 'absent'}")


def shows(after: GatewayRoute | None, live: Sequence[GatewayRoute] | None, key: Key) -> bool:
    """Does the control plane already hold what the change wants?"""
    if live is None:
        return False
    now = next((r for r in live if r.client_id is None and r.key == key), None)
    if after is None:
        return now is None
    return now is not None and routing.same_config(now, after)


# -- the kind behind the dispatch -------------------------------------------------------


class RouteChange(ChangeBase):
    """Create, replace or delete one gateway route of this client."""

    action: Literal[Action.SYNC_ROUTE, Action.DELETE_ROUTE]
    #: the live route of this client at the owner key (None: a new route)
    route_before: GatewayRoute | None = None
    #: what the gateway must hold there (None: deleted)
    route_after: GatewayRoute | None = None

    @property
    def route_key(self) -> Key:
        route = self.route_after or self.route_before
        assert route is not None
        return route.key


#: The route actions: counted in a plan's ``counts`` only when it holds one, and their
#: fields written only on route changes (format 2.4), so every plan without routes reads
#: as it always did.
ROUTE_ACTIONS = (Action.SYNC_ROUTE, Action.DELETE_ROUTE)
ROUTE_FIELDS = ("route_before", "route_after")


def diff(desired: DesiredState, live: LiveSnapshot) -> Diff | None:
    """``plan_routes`` as a plan takes it; None when the repo has no routes to reconcile."""
    if not relevant(desired):
        return None
    where = {key.split("/", 1)[1]: f"{ref.path}:{ref.line}"
             for key, ref in desired.sources.items() if key.startswith("Route/")}
    found = plan_routes(desired, live.routes, live.routes_error, where)
    result = Diff(preconditions={"routes": found.preconditions})
    result.blockers.extend(Blocker(code=code, service=service, message=message)
                           for code, service, message in found.blockers)
    result.drift.extend(Drift(code=code, service=service, message=message)
                        for code, service, message in found.drift)
    for planned in found.changes:
        svc = planned.service
        result.changes.append(RouteChange(
            action=Action.DELETE_ROUTE if planned.delete else Action.SYNC_ROUTE,
            service=svc.name, service_id=svc.service_id, app_id=svc.app_id,
            reason=planned.reason, summary=planned.summary, preconditions=Preconditions(),
            idempotency_key=planned.idempotency_key, route_before=planned.before,
            route_after=planned.after))
    return result


def assess(observation: Observation, routes: tuple[GatewayRoute, ...] | None,
           running: str | None, last_error: str | None,
           gone: tuple[Key, ...] = ()) -> Assessment | None:
    """The routes' part of the judge's proof of one answered cluster: every declared route
    of the app in effect there with its priority and target, and no route at a ``gone``
    owner key (deleted: pruned) still in effect. None: proven (or nothing to check)."""
    runtime = observation.runtime
    if (routes is None and not gone) or runtime is None:
        return None
    if runtime.routes is None:
        return (Why.NO_ROUTES, "sent no gateway routes: which route serves is unproven",
                running, last_error)
    serving = {r.key: r for r in runtime.routes}
    for want in routes or ():
        have = serving.get(want.key)
        if have is None:
            return (Why.ROUTE_NOT_IN_EFFECT, f"does not serve route {want.name!r} (priority "
                    f"{want.priority} -> {want.target})", running, last_error)
        if not routing.same_config(have, want):
            return (Why.ROUTE_NOT_IN_EFFECT,
                    f"still serves the old route {safe(have.name)!r}: {safe(have.summary())}, "
                    f"not {want.summary()}", running, last_error)
    for key in gone:
        kept = serving.get(key)
        if kept is not None:
            return (Why.ROUTE_NOT_IN_EFFECT,
                    f"still serves the deleted route {safe(kept.name)!r} "
                    f"({safe(kept.ownership.describe())}): {safe(kept.summary())}",
                    running, last_error)
    return None


def gone_keys(ask: Expecting, declared: tuple[GatewayRoute, ...] | None) -> tuple[Key, ...]:
    """The owner keys of the app that must be in effect on no expected cluster: each
    route a change being applied deletes, and -- with ``policy.routes.prune: true`` and
    the control plane's routes read -- each route of the app a cluster still serves that
    no document declares and no other client owns (deleted before: the repo's routes
    are all of ours)."""
    gone = {c.route_key for c in ask.changes if isinstance(c, RouteChange)
            and c.action is Action.DELETE_ROUTE and c.service == ask.svc.name}
    desired, snapshot = ask.desired, ask.snapshot
    if desired is not None and desired.settings.policy.routes.prune and snapshot is not None \
            and snapshot.routes is not None:
        keep = {r.key for r in declared or ()}
        keep.update(r.key for r in snapshot.routes if r.client_id is not None)
        for observation in ask.observations:
            runtime = observation.runtime
            if runtime is not None and runtime.routes:
                gone.update(r.key for r in runtime.routes
                            if r.key not in keep and r.ownership.app_id == ask.svc.app_id)
    return tuple(sorted(gone, key=lambda k: tuple(part or "" for part in k)))


class _Route(Kind[RouteChange]):
    target = "route"
    models: ClassVar[tuple[type[ChangeBase], ...]] = (RouteChange,)
    #: after the release it forwards to; deletions are in the same step (their own keys)
    order = 3
    verbs: ClassVar[dict[Action, str]] = {Action.SYNC_ROUTE: "sync route",
                                          Action.DELETE_ROUTE: "delete route"}
    proves = 2  # after the release and the egress
    whys: ClassVar[Mapping[Why, str]] = {
        Why.NO_ROUTES: "Routes must be checked and the cluster's status carries no route "
        "view (unproven).",
        Why.ROUTE_NOT_IN_EFFECT: "A declared gateway route is not in effect on the cluster "
        "with its priority and target, or a deleted one still is (the message names what "
        "it still serves; not converged).",
    }
    unproven = frozenset({Why.NO_ROUTES})
    codes: ClassVar[Mapping[StrEnum, str]] = {
        BlockerCode.ROUTE_AMBIGUOUS: "Two gateway routes, at least one declared, can match "
        "the same request with the same priority (the message names both and an example "
        "request): which wins would be the gateway's tie-break (age, name), not the repo's.",
        BlockerCode.ROUTE_SHADOWED: "A declared gateway route can never match: a route of "
        "higher priority matches every request it matches (named in the message).",
        BlockerCode.ROUTE_OWNED_BY_ANOTHER_CLIENT: "A declared route has the owner key "
        "(appId, hostname, routeRef) of a route another client owns; reconcile never "
        "writes it.",
        BlockerCode.ROUTES_UNREADABLE: "The gateway routes (getGatewayClientRoutes) could "
        "not be read, so route changes cannot be planned.",
        DriftCode.ROUTE_NOT_DECLARED: "A live gateway route this client owns for a declared "
        "service that no Route document declares (not pruned: policy.routes.prune is off).",
        ReasonCode.ROUTE_MISSING: "Sync route: a declared gateway route the control plane "
        "does not hold for this client.",
        ReasonCode.ROUTE_DIFFERS: "Sync route: the live route at the owner key differs "
        "(match, priority, target, managed kind or remote ingress).",
        ReasonCode.ROUTE_NOT_DECLARED: "Delete route: pruned, no Route document declares it "
        "(policy.routes.prune).",
    }
    optional_actions = ROUTE_ACTIONS
    optional_fields = ROUTE_FIELDS
    counted_as = "route"

    def diff_all(self, desired: DesiredState, live: LiveSnapshot) -> Diff | None:
        return diff(desired, live)

    def check(self, change: RouteChange, live: LiveSnapshot, *,
              journaled: bool) -> Check[RouteChange]:
        """Stale when the live route at the owner key moved since the plan, unless it
        already is what the change wants. A route lives apart from the service."""
        key = change.route_key
        now = moved(change.route_before, live.routes, key)
        if not now:
            return Check(change, Freshness.OURS if journaled else Freshness.FRESH)
        if shows(change.route_after, live.routes, key):
            return Check(change, Freshness.ALREADY_LIVE, now)
        if journaled:
            return Check(change, Freshness.OURS, now)
        return Check(change, Freshness.STALE, f"{change.service}: {now}")

    def shows(self, change: RouteChange, svc: LiveService) -> bool:
        return False

    def modification(self, base: RouteChange, head: RouteChange) -> dict[str, object]:
        return {}

    def expect(self, ask: Expecting) -> dict[str, object]:
        """The routes of the app every expected cluster must serve (None: the repo
        declares none for it, so none is checked) and the owner keys none may serve."""
        routes = expected_routes(ask.desired, ask.svc) if ask.desired is not None else None
        return {"routes": routes, "routes_gone": gone_keys(ask, routes)}

    def assess(self, observation: Observation, target: Target, running: str | None,
               last_error: str | None) -> Assessment | None:
        return assess(observation, target.routes, running, last_error, target.routes_gone)

    def review_key(self, change: RouteChange) -> str | None:
        _, hostname, route_ref = change.route_key
        return f"{hostname or ''}/{route_ref or ''}"

    def sort_key(self, change: RouteChange) -> tuple[str, ...]:
        return tuple(k or "" for k in change.route_key[1:])

    def detail(self, change: RouteChange) -> list[str] | None:
        before = change.route_before.summary() if change.route_before else "absent"
        after = change.route_after.summary() if change.route_after else "deleted"
        route = change.route_after or change.route_before
        owner = route.ownership.describe() if route is not None else "?"
        return [f"route {safe(route.name if route else '?')} ({safe(owner)}): "
                f"{safe(before)} → {safe(after)}"]

    def touched(self, base: DesiredState, head: DesiredState) -> set[str]:
        before = {r.name: r for r in base.routes}
        after = {r.name: r for r in head.routes}
        return {r.owner.service for name in before.keys() | after.keys()
                if before.get(name) != after.get(name)
                for r in (before.get(name), after.get(name)) if r is not None}


KIND = _Route()
