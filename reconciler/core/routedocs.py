"""The repo-wide rules of ``kind: Route`` documents: what no single Route can check alone.

Owns: a route's owner names a declared Service; one route per owner key (service's
appId, hostname, routeRef -- the seed's ownership); one route per name; and a
``letsencrypt-http01-forward`` route above every normal route that can take one of its
challenge requests (else the gateway gives the challenge to the normal route and the
certificate never renews) -- "can take" asked of ``core.routing``, the plan's analysis.
Called by ``core.crosscheck`` with the validated documents and their positions.

Pure: returns diagnostics, reads nothing, raises nothing for bad input.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from reconciler.core import routing
from reconciler.core.desired import ManagedRouteKind, Route, Service, Settings
from reconciler.core.diagnostics import Diagnostic

Loc = tuple[str | int, ...]


class LocatedRoute(Protocol):
    """``core.crosscheck.Located`` as seen here (that module imports this one)."""

    @property
    def document(self) -> Settings | Service | Route | object: ...

    @property
    def path(self) -> str: ...

    def at(self, loc: Loc, message: str) -> Diagnostic: ...


def _line(doc: LocatedRoute, loc: Loc) -> str:
    return f"{doc.path}:{doc.at(loc, '').line}"


def check_documents(documents: Sequence[LocatedRoute], services: Collection[str], *,
                    complete: bool = True) -> list[Diagnostic]:
    """Every cross-document problem of the Route documents (``services``: the declared
    Service names). ``complete`` False: a Service document failed on its own, so an
    owner naming an undeclared service is not said (it may be the one that failed)."""
    problems: list[Diagnostic] = []
    routes = [(doc, doc.document) for doc in documents if isinstance(doc.document, Route)]
    by_key: dict[tuple[str, str | None, str | None], list[LocatedRoute]] = {}
    by_name: dict[str, list[LocatedRoute]] = {}
    for doc, route in routes:
        if complete and route.owner.service not in services:
            message = f"no Service named {route.owner.service!r} is declared in this repo"
            close = difflib.get_close_matches(route.owner.service, sorted(services), n=1)
            problems.append(doc.at(("owner", "service"), message + (
                f"; did you mean `{close[0]}`?" if close else "")))
        by_key.setdefault(route.owner_key, []).append(doc)
        by_name.setdefault(route.name, []).append(doc)
    for key, places in by_key.items():
        for doc in places[1:] if len(places) > 1 else ():
            first = places[0]
            problems.append(doc.at(("owner",), f"owner key {_key(key)} is also declared at "
                                   f"{_line(first, ('owner',))}; the gateway keeps one route "
                                   "per owner key (add or change routeRef to tell them apart)"))
    for name, places in by_name.items():
        for doc in places[1:] if len(places) > 1 else ():
            problems.append(doc.at(("name",), f"route name {name!r} is also declared at "
                                   f"{_line(places[0], ('name',))}; it must be unique"))
    problems.extend(_http01_above_normal(routes))
    return problems


def _key(key: tuple[str, str | None, str | None]) -> str:
    service, hostname, route_ref = key
    parts = [f"service {service}"]
    if hostname is not None:
        parts.append(f"hostname {hostname}")
    if route_ref is not None:
        parts.append(f"routeRef {route_ref}")
    return "(" + ", ".join(parts) + ")"


def _http01_above_normal(routes: Sequence[tuple[LocatedRoute, Route]]) -> list[Diagnostic]:
    """A normal route at or above a challenge route's priority that can take one of its
    challenge requests takes it (higher priority is matched first; equal is a tie the
    gateway breaks by a rule of its own) and the certificate never renews.

    "Can take" is the plan's own analysis (``routing.common_request``: hosts with their
    wildcards, ports, transport and path in whole segments), so a route that cannot meet
    the challenge requests -- ``/docs/`` on 443 beside the challenge on 80 -- is fine
    whatever its priority."""
    problems: list[Diagnostic] = []
    normal = [(doc, r, routing.from_declared(r, r.owner.service))
              for doc, r in routes if r.managed_route_kind is None]
    for doc, route in routes:
        if route.managed_route_kind is not ManagedRouteKind.LETSENCRYPT_HTTP01_FORWARD:
            continue
        challenge = routing.from_declared(route, route.owner.service)
        for other_doc, other, gateway_route in normal:
            if other.priority < route.priority:
                continue
            example = routing.common_request(challenge, gateway_route)
            if example is None:
                continue
            problems.append(doc.at(("priority",), (
                "a letsencrypt-http01-forward route must be above every route that can "
                f"take its challenge requests: its priority {route.priority} is not higher "
                f"than the {other.priority} of route {other.name!r} "
                f"({_line(other_doc, ('priority',))}), which matches {example}, so that "
                "route would take the challenge requests")))
    return problems


def routes_by_owner(routes: Sequence[Route],
                    app_ids: Mapping[str, str]) -> dict[tuple[str, str | None, str | None], Route]:
    """Declared routes by the wire's owner key (appId, hostname, routeRef);
    ``app_ids``: service name -> appId. Routes whose service is unknown are left out."""
    out: dict[tuple[str, str | None, str | None], Route] = {}
    for route in routes:
        app_id = app_ids.get(route.owner.service)
        if app_id is not None:
            out[(app_id, route.owner.hostname, route.owner.route_ref)] = route
    return out
