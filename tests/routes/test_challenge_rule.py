"""Validation's challenge-route rule (``core.routedocs``) against a brute-force oracle: a
normal route at or above a ``letsencrypt-http01-forward`` route's priority is refused
exactly when some request the challenge route takes is one it takes too (hosts,
wildcards, ports, transport, path in whole segments) -- the same analysis the plan makes,
never "shares a hostname"."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from reconciler.core import routedocs, routing
from reconciler.core.crosscheck import Located
from reconciler.core.desired import Route
from reconciler.core.routing import Request
from tests.routes.test_routing_analysis import takes

HOST = "shop.ex.net"
CHALLENGE_PATHS = ["/.well-known/acme-challenge/", "/.well-known/acme-challenge",
                   "/.well-known/acme-challenge/t"]
NORMAL_PATHS = ["/", "/docs/", "/.well-known", "/.well-known/", "/.well-known/acme",
                "/.well-known/acme-challenge", "/.well-known/acme-challenge/t",
                "/.well-known/acme-challenge/u", "/.well-known/acme-challengex"]
REQUEST_PATHS = ["/", "/docs/", "/.well-known/", "/.well-known/acme", "/.well-known/acmex",
                 "/.well-known/acme-challenge", "/.well-known/acme-challenge/",
                 "/.well-known/acme-challenge/t", "/.well-known/acme-challenge/t/x",
                 "/.well-known/acme-challenge/u", "/.well-known/acme-challengex"]
UNIVERSE = [Request(h, p, path, t) for h in [HOST, "www.ex.net", "other.net", routing.ANY_HOST]
            for p in (80, 443, 8080) for path in REQUEST_PATHS for t in ("tcp", "udp")]


def document(name: str, priority: int, hostname: str | None, match: dict[str, Any],
             challenge: bool = False) -> Route:
    owner: dict[str, Any] = {"service": "shop", "routeRef": name}
    if hostname is not None:
        owner["hostname"] = hostname
    raw: dict[str, Any] = {"apiVersion": "reconcile/v1", "kind": "Route", "name": name,
                           "owner": owner, "match": match, "action": {"port": 8080},
                           "priority": priority}
    if challenge:
        raw["managedRouteKind"] = "letsencrypt-http01-forward"
    return Route.model_validate(raw)


def located(route: Route, line: int) -> Located:
    return Located(route, "routes.yaml", line, 1, {})


challenges = st.builds(
    lambda priority, ports, path, transport: document(
        "acme", priority, HOST, {"ports": sorted(set(ports)), "path": path,
                                 "transport": transport}, challenge=True),
    priority=st.integers(0, 2), ports=st.lists(st.sampled_from([80, 443]), min_size=1),
    path=st.sampled_from(CHALLENGE_PATHS), transport=st.sampled_from(["tcp", "all"]))

normals = st.builds(
    lambda priority, domains, ports, path, transport: document(
        "web", priority, None, {"domains": sorted(set(domains)), "ports": sorted(set(ports)),
                                "path": path, "transport": transport}),
    priority=st.integers(0, 2),
    domains=st.lists(st.sampled_from([HOST, "*.ex.net", "other.net"]), max_size=2),
    ports=st.lists(st.sampled_from([80, 443, 8080]), min_size=1, max_size=2),
    path=st.sampled_from(NORMAL_PATHS), transport=st.sampled_from(["tcp", "udp", "all"]))


def refused(challenge: Route, normal: Route) -> list[str]:
    problems = routedocs.check_documents([located(challenge, 1), located(normal, 20)],
                                         {"shop"})
    return [p.render() for p in problems]


@settings(max_examples=400, deadline=None)
@given(challenges, normals)
@example(document("acme", 200, HOST, {"ports": [80], "path": CHALLENGE_PATHS[0]},
                  challenge=True),
         document("docs", 300, HOST, {"ports": [443], "path": "/docs/"}))
def test_refused_exactly_when_the_normal_route_can_take_a_challenge_request(
        challenge: Route, normal: Route) -> None:
    acme, web = (routing.from_declared(r, "shop") for r in (challenge, normal))
    shared = [r for r in UNIVERSE if takes(acme, r) and takes(web, r)]
    oracle = bool(shared) and normal.priority >= challenge.priority
    said = refused(challenge, normal)
    assert bool(said) == oracle, (acme.summary(), web.summary(), said)
    if said:
        [message] = said
        # At the challenge route's line, naming the other route's file:line.
        assert message.startswith("routes.yaml:1:") and "routes.yaml:20" in message, message
        assert "would take the challenge requests" in message


def test_docs_on_443_above_the_challenge_on_80_is_valid_and_on_80_under_it_is_not() -> None:
    acme = document("acme", 200, HOST, {"ports": [80], "path": CHALLENGE_PATHS[0]},
                    challenge=True)
    assert refused(acme, document("docs", 300, HOST, {"ports": [443], "path": "/docs/"})) == []
    assert refused(acme, document("docs", 300, HOST, {"ports": [80], "path": "/docs/"})) == []
    [message] = refused(acme, document("web", 300, HOST, {"ports": [80, 443]}))
    assert "http://shop.ex.net/.well-known/acme-challenge/ (tcp)" in message, message
