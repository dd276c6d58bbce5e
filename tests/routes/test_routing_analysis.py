"""The pure routing analysis (``core.routing``): examples, and properties over a small
universe of hosts, ports and paths where a brute-force oracle can check every claim.

The oracle (``takes``) is written here apart from ``core.routing``: a route's path split
into segments is a prefix of the request path's segments (trailing slashes on the route's
path ignored), a wildcard takes one label. ``routing.matches`` is checked against it over
the universe, and every claim of the analysis against it."""

from __future__ import annotations

import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from reconciler.core import routepaths, routing
from reconciler.core.desired import Route
from reconciler.core.routing import FindingCode, GatewayRoute, Request, RouteOwnership

HOSTS = ["a.x", "b.x", "*.x", "c.y"]
#: Route paths: segment prefixes of each other ("/a", "/a/", "/a/b"), and plain string
#: prefixes that are not ("/a" and "/ab", "/b" and "/bz" below).
PATHS = ["/", "/a", "/a/", "/a/b", "/b", "/ab"]
PORTS = [80, 443]
TRANSPORTS = ["tcp", "udp", "all"]
#: Every request the routes above can tell apart (wildcards need a concrete label).
REQUEST_PATHS = [*PATHS, "/a/bc", "/a/b/", "/a/b/c", "/bz", "/ab/", "/ab/c", "/abc"]
UNIVERSE = [Request(h, p, path, t)
            for h in ["a.x", "b.x", "www.x", "c.y", routing.ANY_HOST]
            for p in PORTS for path in REQUEST_PATHS for t in ["tcp", "udp"]]


def path_takes(route_path: str, request_path: str) -> bool:
    """The oracle's path rule: whole segments, the route path's trailing slashes ignored."""
    want = route_path.rstrip("/").split("/")
    return request_path.split("/")[:len(want)] == want


def host_takes(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        label, _, rest = host.partition(".")
        return bool(label) and rest == pattern[2:]
    return pattern == host


def takes(route: GatewayRoute, request: Request) -> bool:
    """Brute force: does the gateway give ``request`` to ``route`` (priority aside)?"""
    return ((not route.domains or any(host_takes(d, request.host) for d in route.domains))
            and request.port in route.ports and path_takes(route.path, request.path)
            and route.transport in ("all", request.transport))


def route(name: str, priority: int, *, domains: tuple[str, ...] = ("a.x",),
          ports: tuple[int, ...] = (443,), path: str = "/", transport: str = "tcp",
          client: str | None = None) -> GatewayRoute:
    return GatewayRoute(ownership=RouteOwnership(app_id="app", route_ref=name), name=name,
                        domains=domains, ports=ports, path=path, transport=transport,
                        priority=priority, target_app_id="app", target_port=8080,
                        client_id=client)


routes = st.builds(
    lambda name, priority, domains, ports, path, transport: route(
        name, priority, domains=tuple(sorted(set(domains))), ports=tuple(sorted(set(ports))),
        path=path, transport=transport),
    name=st.sampled_from(["r1", "r2", "r3", "r4"]),
    priority=st.integers(0, 2),
    domains=st.lists(st.sampled_from(HOSTS), max_size=2),
    ports=st.lists(st.sampled_from(PORTS), min_size=1, max_size=2),
    path=st.sampled_from(PATHS),
    transport=st.sampled_from(TRANSPORTS),
)


def test_same_priority_overlap_is_ambiguous_with_an_example_then_a_raise_fixes_it() -> None:
    web = route("web", 100, path="/")
    api = route("api", 100, path="/api/")
    [finding] = routing.analyse([web, api])
    assert finding.code is FindingCode.AMBIGUOUS
    assert {finding.route.name, finding.other.name} == {"web", "api"}
    assert str(finding.example) == "https://a.x/api/ (tcp)"
    assert "'web'" in finding.message() and "'api'" in finding.message()
    assert routing.analyse([web, api.model_copy(update={"priority": 101})]) == []


def test_narrow_route_under_a_broader_higher_one_is_shadowed_naming_the_cover() -> None:
    broad = route("broad", 200, path="/")
    narrow = route("narrow", 100, path="/api/")
    [finding] = routing.analyse([broad, narrow])
    assert finding.code is FindingCode.SHADOWED
    assert finding.route.name == "narrow" and finding.other.name == "broad"
    assert "can never match" in finding.message() and "'broad'" in finding.message()


def test_http01_above_normal_is_neither() -> None:
    normal = route("web", 100, ports=(80, 443))
    acme = route("acme", 200, ports=(80,), path="/.well-known/acme-challenge/")
    assert routing.analyse([normal, acme]) == []


def test_a_foreign_route_counts_but_two_foreign_routes_are_not_ours() -> None:
    ours = route("ours", 10, domains=("a.x",))
    theirs = route("theirs", 10, domains=("*.x",), client="other-client")
    theirs_too = route("theirs-too", 10, domains=("*.x",), client="other-client")
    findings = routing.analyse([ours], [theirs, theirs_too])
    assert [(f.route.name, f.other.name) for f in findings] == [("ours", "theirs"),
                                                               ("ours", "theirs-too")]
    assert "owned by client other-client" in findings[0].message()


def test_a_live_route_of_ours_with_a_declared_key_is_replaced_not_compared() -> None:
    declared = route("web", 10)
    live_old = route("web", 10, path="/old/")
    assert routing.analyse([declared], [live_old]) == []


def test_disjoint_hosts_ports_transports_or_paths_never_meet() -> None:
    base = route("a", 1, path="/p")
    for other in (route("b", 1, domains=("b.x",)), route("b", 1, ports=(80,)),
                  route("b", 1, transport="udp"), route("b", 1, path="/q"),
                  route("b", 1, domains=("*.y",))):
        assert routing.common_request(base, other) is None, other.summary()
    assert routing.analyse([base, route("b", 1, path="/q")]) == []


@settings(max_examples=300, deadline=None)
@given(routes)
def test_matches_is_the_oracle_on_the_universe(route_: GatewayRoute) -> None:
    for request in UNIVERSE:
        assert routing.matches(route_, request) == takes(route_, request), request


def test_paths_are_matched_in_whole_segments_and_a_trailing_slash_is_ignored() -> None:
    assert routepaths.path_matches("/api", "/api")
    assert routepaths.path_matches("/api", "/api/")
    assert routepaths.path_matches("/api", "/api/v1")
    assert not routepaths.path_matches("/api", "/apix")
    assert not routepaths.path_matches("/api/", "/apix")
    assert routepaths.path_matches("/api/", "/api")  # the trailing slash is ignored
    assert routepaths.path_matches("/", "/anything/at/all")
    assert routepaths.path_covers("/api", "/api/") and routepaths.path_covers("/api/", "/api")
    assert not routepaths.path_covers("/api", "/apix/")
    assert routepaths.paths_meet("/api", "/apix") is None
    assert routepaths.paths_meet("/api", "/api/v1/") == "/api/v1/"


def test_a_plain_string_prefix_neither_overlaps_nor_shadows() -> None:
    api = route("api", 100, path="/api")
    apix = route("apix", 100, path="/apix/")
    assert routing.common_request(api, apix) is None
    assert routing.analyse([api, apix]) == []
    assert routing.analyse([api.model_copy(update={"priority": 200}), apix]) == []
    # "/api" and "/api/" take the same requests: same priority is a tie.
    [finding] = routing.analyse([api, route("api-slash", 100, path="/api/")])
    assert finding.code is FindingCode.AMBIGUOUS


@settings(max_examples=300, deadline=None)
@given(routes, routes)
def test_overlap_is_exactly_what_the_brute_force_oracle_finds(
        left: GatewayRoute, right: GatewayRoute) -> None:
    example = routing.common_request(left, right)
    both = [r for r in UNIVERSE if takes(left, r) and takes(right, r)]
    assert (example is not None) == bool(both)
    if example is not None:
        assert takes(left, example) and takes(right, example)
    assert (routing.common_request(right, left) is None) == (example is None)


@settings(max_examples=300, deadline=None)
@given(routes, routes)
def test_covers_is_exact_on_the_universe(outer: GatewayRoute, inner: GatewayRoute) -> None:
    # Sound: a route called covered really is (a shadowed blocker is never false); and
    # complete. A route covered only by a union of routes is ``union_cover``'s (below).
    assert routing.covers(outer, inner) == all(
        takes(outer, r) for r in UNIVERSE if takes(inner, r))


@settings(max_examples=200, deadline=None)
@given(st.lists(routes, min_size=1, max_size=4, unique_by=lambda r: r.name))
@example([route("r1", 1, domains=(), ports=(80,), transport="udp"),  # a union: r3 never wins
          route("r2", 1, domains=(), ports=(443,), transport="udp"),
          route("r3", 0, domains=(), ports=(80, 443), transport="udp")])
def test_every_finding_is_true_of_the_gateway_and_no_same_priority_overlap_is_missed(
        declared: list[GatewayRoute]) -> None:
    findings = routing.analyse(declared)
    for finding in findings:
        assert takes(finding.route, finding.example)
        if finding.code is FindingCode.AMBIGUOUS:
            assert finding.route.priority == finding.other.priority
            assert takes(finding.other, finding.example)
        else:  # covered by one higher route, or by the union it names
            cover = finding.union or (finding.other,)
            assert finding.other in cover
            assert all(o.priority > finding.route.priority for o in cover)
            assert all(any(takes(o, r) for o in cover) for r in UNIVERSE
                       if takes(finding.route, r))
    flagged = {frozenset((f.route.name, f.other.name)) for f in findings
               if f.code is FindingCode.AMBIGUOUS}
    for a, b in itertools.combinations(declared, 2):
        if a.priority == b.priority and any(
                takes(a, r) and takes(b, r) for r in UNIVERSE):
            assert frozenset((a.name, b.name)) in flagged


def test_from_declared_writes_every_default_out() -> None:
    doc = Route.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Route", "name": "web",
        "owner": {"service": "checkout", "hostname": "shop.example.net"},
        "action": {"port": 8080}, "priority": 5})
    wire = routing.to_wire(routing.from_declared(doc, "checkout"))
    assert wire == {
        "name": "web",
        "match": {"domains": ["shop.example.net"], "ports": [443], "path": "/",
                  "transport": "tcp"},
        "action": {"type": "forward", "target": {"appId": "checkout", "port": 8080}},
        "priority": 5,
        "remoteIngress": {"enabled": False, "edgeFilter": []},
    }


def test_a_route_whose_hosts_ports_and_transports_are_split_among_higher_ones_is_shadowed(
        ) -> None:
    inner = route("inner", 1, domains=("a.x", "b.x"), ports=(80, 443), transport="all")
    tcp_a = route("tcp-a", 2, domains=("a.x",), ports=(80, 443), transport="tcp")
    udp_a = route("udp-a", 3, domains=("*.x",), ports=(80, 443), transport="udp")
    b_any = route("b-any", 2, domains=("b.x",), ports=(80, 443), transport="all")
    [finding] = routing.analyse([inner, tcp_a, udp_a, b_any])
    assert finding.code is FindingCode.SHADOWED and finding.route.name == "inner"
    assert {r.name for r in finding.union} == {"tcp-a", "udp-a", "b-any"}
    message = finding.message()
    assert all(f"'{name}'" in message for name in ("tcp-a", "udp-a", "b-any")), message
    # One piece left uncovered (udp on b.x at a lower priority): no longer shadowed.
    low = b_any.model_copy(update={"priority": 1, "transport": "tcp"})
    assert not [f for f in routing.analyse([inner, tcp_a, udp_a, low])
                if f.code is FindingCode.SHADOWED and f.route.name == "inner"]


@settings(max_examples=400, deadline=None)
@given(st.lists(routes, min_size=1, max_size=4, unique_by=lambda r: r.name), st.data())
def test_shadowed_is_exactly_what_the_brute_force_oracle_finds(
        others: list[GatewayRoute], data: st.DataObject) -> None:
    """A route is shadowed iff every request it matches in the universe is matched by
    some route of higher priority -- one route or a union of them."""
    inner = data.draw(routes).model_copy(update={"name": "inner",
                                                  "ownership": RouteOwnership(
                                                      app_id="app", route_ref="inner")})
    higher = [r for r in others if r.priority > inner.priority]
    mine = [r for r in UNIVERSE if takes(inner, r)]
    assert mine, "every generated route matches a request of the universe"
    oracle = all(any(takes(h, r) for h in higher) for r in mine)
    findings = [f for f in routing.analyse([inner], others)
                if f.code is FindingCode.SHADOWED and f.route.name == "inner"]
    assert bool(findings) == oracle
    cover = routing.union_cover(higher, inner)
    assert (cover is not None) == oracle
    if cover is not None:  # the routes named really are the cover
        assert all(any(takes(h, r) for h in cover) for r in mine)
