"""``kind: Route`` documents: each rule with its file and line, through the real CLI.

The reference repo (valid as it stands) gains a routes file; each test breaks it one way
and requires the one problem, named at the line that is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.routes import documents
from tests.validation.conftest import Run

ROUTES = "routes/shop.yaml"

NORMAL = documents.web_route("shop.example.net")
HTTP01 = documents.acme_route("shop.example.net")


def write_routes(repo: Path, *documents: str) -> None:
    path = repo / ROUTES
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n".join(documents), encoding="utf-8")


def line_of(repo: Path, needle: str, occurrence: int = 1) -> int:
    seen = 0
    for number, line in enumerate((repo / ROUTES).read_text().splitlines(), start=1):
        if needle in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{needle!r} not in {ROUTES}")


def test_a_normal_and_an_http01_route_for_one_hostname_are_valid(
        repo: Path, validate: Callable[..., Run]) -> None:
    write_routes(repo, NORMAL, HTTP01)
    run = validate(str(repo))
    assert run.code == 0, run.out + run.err


def test_unknown_owner_service_is_named_at_its_line(
        repo: Path, validate: Callable[..., Run]) -> None:
    write_routes(repo, NORMAL.replace("service: checkout", "service: checkuot"))
    run = validate(str(repo))
    assert run.code == 1
    line = line_of(repo, "service: checkuot")
    assert any(entry.startswith(f"{ROUTES}:{line}:") and "owner.service" in entry
               and "'checkuot'" in entry and "did you mean `checkout`" in entry
               for entry in run.lines), run.out


def test_duplicate_owner_key_names_both_places(
        repo: Path, validate: Callable[..., Run]) -> None:
    twin = NORMAL.replace("name: shop-web", "name: shop-web-two")
    write_routes(repo, NORMAL, twin)
    run = validate(str(repo))
    assert run.code == 1
    # A mapping's position is its first entry's line.
    second = line_of(repo, "service: checkout", 2)
    first = line_of(repo, "service: checkout", 1)
    found = [e for e in run.lines if e.startswith(f"{ROUTES}:{second}:")]
    assert found and "owner key (service checkout, hostname shop.example.net)" in found[0], \
        run.out
    assert f"also declared at {ROUTES}:{first}" in found[0]


def test_a_routeref_tells_two_routes_of_one_hostname_apart(
        repo: Path, validate: Callable[..., Run]) -> None:
    twin = (NORMAL.replace("name: shop-web", "name: shop-api")
            .replace("  hostname: shop.example.net\n",
                     "  hostname: shop.example.net\n  routeRef: api\n")
            .replace("priority: 100", "priority: 150")
            .replace("  ports: [80, 443]\n", "  ports: [443]\n  path: /api/\n"))
    write_routes(repo, NORMAL, twin)
    run = validate(str(repo))
    assert run.code == 0, run.out


def test_http01_route_must_be_path_specific(repo: Path, validate: Callable[..., Run]) -> None:
    write_routes(repo, NORMAL, HTTP01.replace("path: /.well-known/acme-challenge/",
                                              "path: /.well-known/"))
    run = validate(str(repo))
    assert run.code == 1
    line = line_of(repo, "path: /.well-known/")
    assert any(e.startswith(f"{ROUTES}:{line}:") and "match.path" in e
               and "/.well-known/acme-challenge/" in e for e in run.lines), run.out


def test_http01_route_must_be_above_the_hostnames_normal_route(
        repo: Path, validate: Callable[..., Run]) -> None:
    write_routes(repo, NORMAL, HTTP01.replace("priority: 200", "priority: 100"))
    run = validate(str(repo))
    assert run.code == 1
    line = line_of(repo, "priority: 100", 2)
    normal_line = line_of(repo, "priority: 100", 1)
    hits = [e for e in run.lines if e.startswith(f"{ROUTES}:{line}:")]
    assert hits, run.out
    assert "'shop-web'" in hits[0] and f"{ROUTES}:{normal_line}" in hits[0]
    assert "priority 100 is not higher" in hits[0]
    assert "which matches http://shop.example.net/.well-known/acme-challenge/ (tcp)" in hits[0]


DOCS = (NORMAL.replace("name: shop-web", "name: shop-docs")
        .replace("  hostname: shop.example.net\n",
                 "  hostname: shop.example.net\n  routeRef: docs\n")
        .replace("  ports: [80, 443]\n", "  ports: [443]\n  path: /docs/\n")
        .replace("priority: 100", "priority: 300"))


def test_a_higher_route_that_cannot_take_the_challenge_requests_is_valid(
        repo: Path, validate: Callable[..., Run]) -> None:
    # /docs/ on 443 only, above the challenge route: it can never match
    # http://shop.example.net/.well-known/acme-challenge/... on port 80.
    write_routes(repo, NORMAL, HTTP01, DOCS)
    run = validate(str(repo))
    assert run.code == 0, run.out + run.err
    # Nor on port 80 under another path, nor on another host, nor over udp.
    for variant in (DOCS.replace("ports: [443]", "ports: [80, 443]"),
                    DOCS.replace("ports: [443]", "ports: [80]\n  domains: [docs.example.net, "
                                 "shop.example.net]").replace("  path: /docs/\n", ""),
                    DOCS.replace("ports: [443]", "ports: [80]\n  transport: udp")
                    .replace("  path: /docs/\n", ""),
                    # a plain string prefix of the challenge path, not a segment prefix
                    DOCS.replace("ports: [443]", "ports: [80]")
                    .replace("path: /docs/", "path: /.well-known/acme")):
        if "docs.example.net" in variant:  # the owner's hostname must stay in domains
            variant = variant.replace("hostname: shop.example.net\n  routeRef: docs",
                                      "hostname: docs.example.net\n  routeRef: docs")
            variant = variant.replace("domains: [docs.example.net, shop.example.net]",
                                      "domains: [docs.example.net]")
        write_routes(repo, NORMAL, HTTP01, variant)
        run = validate(str(repo))
        assert run.code == 0, variant + run.out + run.err


def test_a_higher_route_that_can_take_a_challenge_request_is_refused_at_both_lines(
        repo: Path, validate: Callable[..., Run]) -> None:
    # On port 80, a path above the challenge's in whole segments, a wildcard host, or
    # transport all: each takes some challenge request.
    for variant, example in (
            (DOCS.replace("ports: [443]", "ports: [80]").replace("path: /docs/",
                                                                 "path: /.well-known"),
             "http://shop.example.net/.well-known/acme-challenge/ (tcp)"),
            (DOCS.replace("ports: [443]", "ports: [80]\n  transport: all")
             .replace("  path: /docs/\n", ""),
             "http://shop.example.net/.well-known/acme-challenge/ (tcp)"),
            (DOCS.replace("hostname: shop.example.net\n  routeRef: docs", "routeRef: docs")
             .replace("ports: [443]", "ports: [80]\n  domains: ['*.example.net']")
             .replace("  path: /docs/\n", ""),
             "http://shop.example.net/.well-known/acme-challenge/ (tcp)")):
        write_routes(repo, NORMAL, HTTP01, variant)
        run = validate(str(repo))
        assert run.code == 1, variant + run.out
        acme_line = line_of(repo, "priority: 200")
        docs_line = line_of(repo, "priority: 300")
        hits = [e for e in run.lines if e.startswith(f"{ROUTES}:{acme_line}:")]
        assert len(hits) == 1, run.out
        assert "'shop-docs'" in hits[0] and f"{ROUTES}:{docs_line}" in hits[0], hits[0]
        assert example in hits[0], hits[0]


def test_an_upper_case_hostname_is_a_sentence_not_a_pattern(
        repo: Path, validate: Callable[..., Run]) -> None:
    write_routes(repo, NORMAL.replace("hostname: shop.example.net", "hostname: Shop.Example.net")
                 .replace("  ports: [80, 443]\n", "  ports: [80, 443]\n  domains: [WWW.x.net]\n"))
    run = validate(str(repo))
    assert run.code == 1
    host_line = line_of(repo, "hostname: Shop.Example.net")
    domains_line = line_of(repo, "domains: [WWW.x.net]")
    hits = [e for e in run.lines if e.startswith(f"{ROUTES}:{host_line}:")]
    assert hits and "owner.hostname" in hits[0], run.out
    assert "lower-case" in hits[0] and "shop.example.net" in hits[0], hits[0]
    assert any(e.startswith(f"{ROUTES}:{domains_line}:") and "www.x.net" in e
               for e in run.lines), run.out
    assert "(?=" not in run.out and "[a-z0-9]" not in run.out, run.out


def test_a_challenge_route_path_is_compared_in_whole_segments(
        repo: Path, validate: Callable[..., Run]) -> None:
    # Without its trailing slash the challenge path takes the same requests: valid.
    write_routes(repo, NORMAL, HTTP01.replace("path: /.well-known/acme-challenge/",
                                              "path: /.well-known/acme-challenge"))
    assert validate(str(repo)).code == 0
    # A longer name is another segment, not the challenge path.
    write_routes(repo, NORMAL, HTTP01.replace("path: /.well-known/acme-challenge/",
                                              "path: /.well-known/acme-challenges/"))
    run = validate(str(repo))
    assert run.code == 1 and "match.path" in run.out, run.out


def test_owner_needs_a_hostname_or_a_routeref(repo: Path, validate: Callable[..., Run]) -> None:
    write_routes(repo, NORMAL.replace("  hostname: shop.example.net\n", ""))
    run = validate(str(repo))
    assert run.code == 1
    line = line_of(repo, "service: checkout")
    assert any(e.startswith(f"{ROUTES}:{line}:") and "hostname, routeRef, or both" in e
               for e in run.lines), run.out


def test_priority_is_required_and_strict(repo: Path, validate: Callable[..., Run]) -> None:
    write_routes(repo, NORMAL.replace("priority: 100\n", ""))
    run = validate(str(repo))
    assert run.code == 1 and "priority" in run.out, run.out
    write_routes(repo, NORMAL.replace("priority: 100", 'priority: "100"'))
    run = validate(str(repo))
    assert run.code == 1 and "priority" in run.out, run.out


def test_unknown_keys_and_managed_kinds_are_errors(
        repo: Path, validate: Callable[..., Run]) -> None:
    write_routes(repo, NORMAL.replace("priority: 100", "priority: 100\nweight: 3"))
    assert validate(str(repo)).code == 1
    write_routes(repo, HTTP01.replace("letsencrypt-http01-forward", "letsencrypt-dns01"))
    run = validate(str(repo))
    assert run.code == 1 and "managedRouteKind" in run.out, run.out
