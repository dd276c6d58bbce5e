"""A validated document keeps only the positions later rules point at
(``core.crosscheck.keep``), and every repo-wide rule still names the same line.

Each rule of ``core.crosscheck`` and ``core.routedocs`` is broken at once, in files
whose lines are shifted (comments, blank lines, flow style) so that a wrong fallback
shows as a wrong line; the diagnostics are compared with those the same documents give
when they keep every value's position.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.core import crosscheck
from reconciler.core.desired import Service, Settings
from reconciler.shell import loading, validating

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "desired-state"
LEDGER = (Path(__file__).resolve().parent / "fixtures" / "ledger.yaml").read_text()

EXTRA = {
    # Another Settings (one per repo), shifted by comments.
    "twin/settings.yaml": "# a\n\n# b\n" + (EXAMPLES / "settings.yaml").read_text(),
    # The same service names, ids and appIds again, and the same proposed namespace.
    "twin/ledger.yaml": "\n\n\n# shifted\n" + LEDGER,
    "twin/checkout.yaml": "# c\n" + (EXAMPLES / "services" / "checkout.yaml").read_text(),
    # A grant naming an undeclared service, and a second entry for a granted pair.
    "twin/grants.yaml": """\
apiVersion: reconcile/v1
kind: Grant
userId: deploy-bot

services:
  - {service: chekout, capabilities: [deployment:preflight]}
  -
    service: checkout
    capabilities: [deployment:preflight]
""",
    # Two holds on one release, one hold on an undeclared service.
    "twin/holds.yaml": """\
apiVersion: reconcile/v1
kind: Hold
service: checkout
digest: sha256:{a}
reason: failed
since: "2026-01-01T00:00:00Z"
---
# again
apiVersion: reconcile/v1
kind: Hold
reason: failed
since: "2026-01-01T00:00:00Z"
digest: sha256:{a}
service: checkout
---
{{apiVersion: reconcile/v1, kind: Hold, service: nope, digest: "sha256:{b}",
  reason: failed, since: "2026-01-01T00:00:00Z"}}
""".format(a="a" * 64, b="b" * 64),
    # The routes again (same names and owner keys), a challenge route below the normal
    # one, and an owner naming no service.
    "twin/routes.yaml": "\n# x\n" + (EXAMPLES / "routes" / "shop.yaml").read_text()
    + """\
---
priority: 50
managedRouteKind: letsencrypt-http01-forward
apiVersion: reconcile/v1
kind: Route
name: shop-low
owner: {service: checkout, hostname: shop.sandbox.test, routeRef: low}
match: {ports: [80], path: /.well-known/acme-challenge/}
action: {port: 8089}
---
apiVersion: reconcile/v1
kind: Route
name: lost
owner:
  service: nope
  routeRef: lost
match: {ports: [80]}
action: {port: 80}
priority: 1
""",
}


def _files() -> dict[str, str]:
    files = {p.relative_to(EXAMPLES).as_posix(): p.read_text()
             for p in sorted(EXAMPLES.rglob("*.yaml"))}
    files["services/ledger.yaml"] = LEDGER
    return files | EXTRA


def _located() -> tuple[list[crosscheck.Located], list[crosscheck.Located]]:
    whole: list[crosscheck.Located] = []
    kept: list[crosscheck.Located] = []
    for rel, text in _files().items():
        documents, problems = loading.parse_bytes(text.encode(), rel)
        assert not problems, problems
        for document in documents:
            model, found = validating.validate_document(document)
            assert model is not None, found
            whole.append(crosscheck.Located(model, document.path, document.line,
                                            document.column, document.positions))
            kept.append(crosscheck.keep(model, document.path, document.line, document.column,
                                        document.positions))
    return whole, kept


def test_every_repo_wide_rule_names_the_same_line_with_the_kept_positions() -> None:
    whole, kept = _located()
    said = crosscheck.check(whole, repo="r")
    assert crosscheck.check(kept, repo="r") == said
    assert crosscheck.check(kept, complete=False, repo="r") == crosscheck.check(
        whole, complete=False, repo="r")
    text = "\n".join(d.render() for d in said)
    for rule in ("a second Settings document", "service name 'checkout' is also declared",
                 "service serviceId", "service appId", "proposed namespace 'ledger'",
                 "no Service named 'chekout'", "user 'deploy-bot' granted service 'checkout'",
                 "a hold on checkout's release", "no Service named 'nope'",
                 "owner key (service checkout, hostname shop.sandbox.test)",
                 "route name 'shop-web' is also declared",
                 "a letsencrypt-http01-forward route must be above"):
        assert rule in text, rule
    # The shifted twins are named at their own lines, not their documents' first.
    assert any(d.path == "twin/ledger.yaml" and d.field == "create.namespace"
               and d.line > 40 for d in said), text
    assert any(d.path == "twin/grants.yaml" and d.field == "services[1].service"
               and d.line == 8 for d in said), text


def test_a_service_keeps_a_few_positions_and_settings_keep_all() -> None:
    whole, kept = _located()
    for full, lean in zip(whole, kept, strict=True):
        if isinstance(lean.document, Settings):
            assert lean.positions is full.positions
            assert lean.at(("stateDir",), "m") == full.at(("stateDir",), "m")
            continue
        assert isinstance(lean.positions, crosscheck.Kept)
        if isinstance(lean.document, Service):
            assert len(lean.positions) <= 4 < len(full.positions)
        for loc in lean.positions:
            assert lean.positions[loc] == full.position(loc)
            assert lean.at(loc, "m") == full.at(loc, "m")
    services = [d for d in kept if isinstance(d.document, Service)
                and d.document.create is None]
    # One tuple of paths for every document of a shape, not one per document.
    assert len(services) > 1
    assert all(crosscheck.kept_paths(d.document) is crosscheck.kept_paths(services[0].document)
               for d in services)


def test_a_cached_file_is_named_at_its_lines_when_a_later_commit_clashes_with_it(
        tmp_path: Path) -> None:
    """The watcher keeps validated files between loads (``BlobCache``): a file kept from
    the first load is still named at its own lines by a rule a second load breaks."""
    files = {rel: text.encode() for rel, text in _files().items() if not rel.startswith("twin/")}
    twin = "\n# shifted\n\n" + (EXAMPLES / "services" / "search.yaml").read_text()
    blobs = {f"oid-{rel}": data for rel, data in files.items()} | {"oid-twin": twin.encode()}

    def read(oids: object) -> list[bytes | int]:
        assert isinstance(oids, list)
        return [blobs[oid] for oid in oids]

    first = [(rel, f"oid-{rel}") for rel in sorted(files)]
    second = sorted([*first, ("services/twin.yaml", "oid-twin")])
    cache = validating.BlobCache()
    assert validating.load_blobs(tmp_path, first, read, cache=cache).valid
    cached = validating.load_blobs(tmp_path, second, read, cache=cache)
    assert cache.hits == len(first) and cache.misses == len(first) + 1
    fresh = validating.load_blobs(tmp_path, second, read)
    assert cached.diagnostics == fresh.diagnostics
    search = (EXAMPLES / "services" / "search.yaml").read_text().splitlines()
    name_line = next(i for i, line in enumerate(search, 1) if line.startswith("name:"))
    assert any(d.path == "services/search.yaml" and d.line == name_line and d.field == "name"
               and "services/twin.yaml:" in d.message for d in cached.diagnostics), cached
