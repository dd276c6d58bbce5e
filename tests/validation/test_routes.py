"""``kind: Route`` documents: each rule with its file and line, through the real CLI.

The reference repo (valid as it stands) gains a routes file; each test breaks it one way
and requires the one problem, named at the line that is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.validation.conftest import Run

ROUTES = "routes/shop.yaml"

NORMAL = """\
apiVersion: reconcile/v1
kind: Route
name: shop-web
owner:
  service: checkout
  hostname: shop.example.net
match:
  ports: [80, 443]
action:
  port: 8080
priority: 100
"""

HTTP01 = """\
apiVersion: reconcile/v1
kind: Route
name: shop-acme
owner:
  service: checkout
  hostname: shop.example.net
  routeRef: acme
match:
  ports: [80]
  path: /.well-known/acme-challenge/
action:
  port: 8089
priority: 200
managedRouteKind: letsencrypt-http01-forward
"""


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
