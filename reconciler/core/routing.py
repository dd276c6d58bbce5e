"""Gateway routes as values, and the plan-time routing analysis over them.

Owns ``GatewayRoute`` -- one route with its owner, every field a gateway would default
written out (``from_declared`` for a Route document, ``canonical`` for what was read;
``to_wire`` gives the seed's ``IGatewayRouteConfig`` with nothing left implicit, so a
default never shows as drift) -- and the analysis a gateway will not do for us
(gateway-api #303/#448/#620: ties broken by age; envoyproxy/gateway#9135: a losing route
still says Accepted):

- ``route_ambiguous``: two routes that can match one request with the same priority; the
  finding carries an example request both match.
- ``route_shadowed``: a declared route that can never match, because one route of higher
  priority -- or a union of them, each taking some of its hosts, ports or transports --
  matches every request it matches; the covering route(s) are named.

Over the declared routes *and* the live routes the repo does not declare (other
clients', and ours that stay). Findings are only about declared routes: two routes
another client owns are that client's business.

Matching, as the sandbox's gateway and docs/extensions.md §5 define it: a request
(host, port, path, transport) matches a route when the host is one of its ``domains``
(``*.x`` matches exactly one label under x; no domains: every host), the port is one of
its ``ports``, its ``path`` is a prefix of the request path *in whole segments*
(``path_matches``), and the transports agree (``all`` agrees with both). Higher
``priority`` is matched first.

Paths are compared segment by segment, as Gateway API's ``PathPrefix`` does: ``/api``
matches ``/api``, ``/api/`` and ``/api/v1``, never ``/apix``; a trailing slash on the
route's path is ignored (``/api/`` matches exactly what ``/api`` matches); ``/`` matches
every path. Every comparison of two routes here (overlap, cover, union) and the
challenge-route rule of validation (``core.routedocs``) use these same functions
(``core.routepaths``, which ``core.desired`` asks too).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict

from reconciler.core.desired import (
    DEFAULT_ROUTE_PATH,
    DEFAULT_ROUTE_PORTS,
    DEFAULT_ROUTE_TRANSPORT,
    Route,
)
from reconciler.core.lean import LeanModel
from reconciler.core.routepaths import path_covers, path_matches, path_stem, paths_meet

__all__ = ["path_covers", "path_matches", "path_stem", "paths_meet"]

#: A host the example request uses when a route matches every host.
ANY_HOST = "any-host.example"


class _Model(LeanModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class RouteOwnership(_Model):
    """Seed 11.2 ``IGatewayClientOwnership``: ``appId`` plus ``hostname`` and/or
    ``routeRef``."""

    app_id: str
    hostname: str | None = None
    route_ref: str | None = None

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        return (self.app_id, self.hostname, self.route_ref)

    def describe(self) -> str:
        parts = [f"appId {self.app_id}"]
        if self.hostname is not None:
            parts.append(f"hostname {self.hostname}")
        if self.route_ref is not None:
            parts.append(f"routeRef {self.route_ref}")
        return ", ".join(parts)


class GatewayRoute(_Model):
    """One route, every field explicit. ``client_id`` None: this client owns it."""

    ownership: RouteOwnership
    name: str
    domains: tuple[str, ...] = ()  # (): every host
    ports: tuple[int, ...] = DEFAULT_ROUTE_PORTS
    path: str = DEFAULT_ROUTE_PATH
    transport: str = DEFAULT_ROUTE_TRANSPORT
    priority: int = 0
    target_app_id: str = ""
    target_port: int = 0
    managed_route_kind: str | None = None
    remote_ingress: bool = False
    edge_filter: tuple[str, ...] = ()
    client_id: str | None = None

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        return self.ownership.key

    @property
    def target(self) -> str:
        return f"{self.target_app_id}:{self.target_port}"

    def describe(self) -> str:
        """``name`` (its owner): how every message names a route."""
        owner = self.ownership.describe()
        who = "" if self.client_id is None else f", owned by client {self.client_id}"
        return f"{self.name!r} ({owner}{who})"

    def summary(self) -> str:
        hosts = ",".join(self.domains) or "*"
        ports = ",".join(str(p) for p in self.ports)
        return (f"{hosts}:{ports}{self.path} ({self.transport}) priority {self.priority} "
                f"-> {self.target}")


def from_declared(route: Route, app_id: str) -> GatewayRoute:
    """The route a Route document asks for, its defaults written out."""
    return GatewayRoute(
        ownership=RouteOwnership(app_id=app_id, hostname=route.owner.hostname,
                                 route_ref=route.owner.route_ref),
        name=route.name,
        domains=tuple(sorted(route.domains)),
        ports=tuple(sorted(route.match.ports)),
        path=route.match.path,
        transport=route.match.transport.value,
        priority=route.priority,
        target_app_id=app_id,
        target_port=route.action.port,
        managed_route_kind=(route.managed_route_kind.value
                            if route.managed_route_kind is not None else None),
        remote_ingress=route.remote_ingress.enabled if route.remote_ingress else False,
        edge_filter=tuple(sorted(route.remote_ingress.edge_filter))
        if route.remote_ingress else (),
    )


def to_wire(route: GatewayRoute) -> dict[str, Any]:
    """The seed's ``IGatewayRouteConfig`` with every field explicit ([ext] match and
    action fields, docs/extensions.md §5)."""
    wire: dict[str, Any] = {
        "name": route.name,
        "match": {"domains": list(route.domains), "ports": list(route.ports),
                  "path": route.path, "transport": route.transport},
        "action": {"type": "forward",
                   "target": {"appId": route.target_app_id, "port": route.target_port}},
        "priority": route.priority,
        "remoteIngress": {"enabled": route.remote_ingress,
                          "edgeFilter": list(route.edge_filter)},
    }
    if route.managed_route_kind is not None:
        wire["managedRouteKind"] = route.managed_route_kind
    return wire


def ownership_wire(ownership: RouteOwnership) -> dict[str, Any]:
    """Seed ``IGatewayClientOwnership``: absent keys stay absent."""
    wire: dict[str, Any] = {"appId": ownership.app_id}
    if ownership.hostname is not None:
        wire["hostname"] = ownership.hostname
    if ownership.route_ref is not None:
        wire["routeRef"] = ownership.route_ref
    return wire


def same_config(left: GatewayRoute, right: GatewayRoute) -> bool:
    """Equal as a gateway applies them (the owner's client and key aside)."""
    return to_wire(left) == to_wire(right)


# -- matching -------------------------------------------------------------------------


def host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        suffix = pattern[1:]
        head = host[: -len(suffix)] if host.endswith(suffix) else ""
        return bool(head) and "." not in head
    return pattern == host


def _concrete(pattern: str) -> str:
    return "www" + pattern[1:] if pattern.startswith("*.") else pattern


def common_host(left: Sequence[str], right: Sequence[str]) -> str | None:
    """A host both domain lists match, or None. ``()`` matches every host."""
    if not left and not right:
        return ANY_HOST
    if not left:
        return _concrete(sorted(right)[0])
    if not right:
        return _concrete(sorted(left)[0])
    for a in sorted(left):
        for b in sorted(right):
            if a == b:
                return _concrete(a)
            if host_matches(a, b) and not b.startswith("*."):
                return b
            if host_matches(b, a) and not a.startswith("*."):
                return a
    return None


def hosts_cover(outer: Sequence[str], inner: Sequence[str]) -> bool:
    """Every host ``inner`` matches, ``outer`` matches too."""
    if not outer:
        return True
    if not inner:
        return False
    return all(any(o == i or (host_matches(o, i) and not i.startswith("*.")) for o in outer)
               for i in inner)


def _transports_meet(a: str, b: str) -> str | None:
    if a == "all":
        return "tcp" if b == "all" else b
    if b == "all" or a == b:
        return a
    return None


def _transport_covers(outer: str, inner: str) -> bool:
    return outer == "all" or outer == inner


@dataclass(frozen=True, slots=True)
class Request:
    """One request a route may take."""

    host: str
    port: int
    path: str
    transport: str

    def __str__(self) -> str:
        scheme = "http" if self.port == 80 else "https"
        port = "" if (scheme, self.port) in (("http", 80), ("https", 443)) else f":{self.port}"
        return f"{scheme}://{self.host}{port}{self.path} ({self.transport})"


def matches(route: GatewayRoute, request: Request) -> bool:
    return ((not route.domains or any(host_matches(d, request.host) for d in route.domains))
            and request.port in route.ports
            and path_matches(route.path, request.path)
            and _transports_meet(route.transport, request.transport) == request.transport)


def common_request(left: GatewayRoute, right: GatewayRoute) -> Request | None:
    """A request both routes match, or None when no request can be matched by both."""
    host = common_host(left.domains, right.domains)
    ports = sorted(set(left.ports) & set(right.ports))
    transport = _transports_meet(left.transport, right.transport)
    path = paths_meet(left.path, right.path)
    if host is None or not ports or transport is None or path is None:
        return None
    return Request(host=host, port=ports[0], path=path, transport=transport)


def covers(outer: GatewayRoute, inner: GatewayRoute) -> bool:
    """Every request ``inner`` matches, ``outer`` matches too."""
    return (hosts_cover(outer.domains, inner.domains)
            and set(inner.ports) <= set(outer.ports)
            and path_covers(outer.path, inner.path)
            and _transport_covers(outer.transport, inner.transport))


def union_cover(outers: Sequence[GatewayRoute], inner: GatewayRoute
                ) -> tuple[GatewayRoute, ...] | None:
    """Routes of ``outers`` that together match every request ``inner`` matches, or None
    when they do not.

    Exact, not a heuristic: split ``inner`` into pieces -- one host pattern (or every
    host), one port, one transport -- each piece is a set of requests that differ only in
    the host under a wildcard and in the path below ``inner.path``. A piece is covered
    by a union only if one route covers it: the request at ``inner.path`` itself must
    be matched by some route, and a route that takes it takes every path below it too
    (segment prefixes, ``path_covers``); the hosts under a wildcard (or every host) no
    concrete name lists are matched only by a route with that wildcard (or every host),
    and that route matches the named ones as well. So ``inner`` is covered iff each
    piece is covered by one route, and those routes are the cover."""
    used: list[GatewayRoute] = []
    transports = ("tcp", "udp") if inner.transport == "all" else (inner.transport,)
    hosts: tuple[tuple[str, ...], ...] = tuple((d,) for d in inner.domains) or ((),)
    for host in hosts:
        for port in inner.ports:
            for transport in transports:
                cover = next((o for o in outers if hosts_cover(o.domains, host)
                              and port in o.ports and path_covers(o.path, inner.path)
                              and _transport_covers(o.transport, transport)), None)
                if cover is None:
                    return None
                if cover not in used:
                    used.append(cover)
    return tuple(used)


# -- the analysis ---------------------------------------------------------------------


class FindingCode(StrEnum):
    AMBIGUOUS = "route_ambiguous"
    SHADOWED = "route_shadowed"


@dataclass(frozen=True, slots=True)
class Finding:
    """A routing problem about ``route`` (a declared one), caused by ``other``."""

    code: FindingCode
    route: GatewayRoute
    other: GatewayRoute
    example: Request
    #: a route shadowed by no one route but by a union: every route of the union
    #: (``other`` is the first of them)
    union: tuple[GatewayRoute, ...] = ()

    def message(self, where: Mapping[str, str] | None = None) -> str:
        """One sentence; ``where``: route name -> file:line of the declared ones."""
        def named(route: GatewayRoute) -> str:
            place = (where or {}).get(route.name) if route.client_id is None else None
            return route.describe() + (f" at {place}" if place else "")

        if self.code is FindingCode.AMBIGUOUS:
            return (f"routes {named(self.route)} and {named(self.other)} both match "
                    f"{self.example} with priority {self.route.priority}: which one wins is "
                    "up to the gateway's tie-break (age, name); give one a higher priority")
        if len(self.union) > 1:
            return (f"route {named(self.route)} can never match: together, "
                    + " and ".join(f"{named(r)} (priority {r.priority})" for r in self.union)
                    + f", all above its priority {self.route.priority}, match every "
                    f"request it matches (e.g. {self.example}); raise its priority or "
                    "narrow the other routes")
        return (f"route {named(self.route)} can never match: {named(self.other)} has "
                f"priority {self.other.priority} > {self.route.priority} and matches "
                f"every request it matches (e.g. {self.example}); raise its priority "
                "or narrow the other route")


def analyse(declared: Sequence[GatewayRoute], live: Iterable[GatewayRoute] = ()
            ) -> list[Finding]:
    """Every ambiguity and shadowing that involves a declared route.

    ``live``: routes read from the control plane that stay in effect besides the declared
    ones (other clients', and ours no document declares and no prune removes); a live
    route of ours with a declared one's owner key is replaced by it and ignored here.
    Deterministic: findings in the order of ``declared``, then of the other routes."""
    declared_keys = {r.key for r in declared}
    others = [r for r in live if r.client_id is not None or r.key not in declared_keys]
    findings: list[Finding] = []
    seen_pairs: set[tuple[int, int]] = set()
    everything = [*declared, *others]
    for i, route in enumerate(declared):
        shadowed = False
        for j, other in enumerate(everything):
            if j == i:
                continue
            example = common_request(route, other)
            if example is None:
                continue
            if other.priority == route.priority:
                pair = (min(i, j), max(i, j))
                if pair in seen_pairs:
                    continue
                seen_pairs.add(pair)
                findings.append(Finding(FindingCode.AMBIGUOUS, route, other, example))
            elif not shadowed and other.priority > route.priority and covers(other, route):
                shadowed = True  # one covering route is enough to name
                findings.append(Finding(FindingCode.SHADOWED, route, other, _witness(route)))
        if not shadowed:
            # No one route covers it; a union of the higher ones may (several hosts,
            # ports or transports, each taken by another route).
            higher = [o for j, o in enumerate(everything)
                      if j != i and o.priority > route.priority]
            union = union_cover(higher, route)
            if union:
                findings.append(Finding(FindingCode.SHADOWED, route, union[0],
                                        _witness(route), union=union))
    return findings


def _witness(route: GatewayRoute) -> Request:
    """A request ``route`` matches (its first host, port and transport, its path)."""
    return Request(host=common_host(route.domains, route.domains) or ANY_HOST,
                   port=sorted(route.ports)[0], path=route.path,
                   transport="tcp" if route.transport == "all" else route.transport)
