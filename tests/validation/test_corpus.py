"""The bad-input corpus: each case breaks the reference repo one way and runs the CLI.

Every case asserts exit code 1 and a diagnostic line naming the exact file, line and
field, with words from the message. The same cases are then fed to the published JSON
Schema and to the models (``test_schema_never_rejects_what_the_models_accept``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e_repo import git
from tests.validation.conftest import Run

DIGEST = "sha256:" + "a" * 64

#: A valid extra service; line numbers below refer to this layout.
SERVICE = """\
apiVersion: reconcile/v1
kind: Service
name: extra
serviceId: svc-extra
appId: extra
release:
  registryHost: registry.example.net
  repository: shop/extra
  digest: {digest}
egress:
{egress}
"""
#  line 7 registryHost, 8 repository, 9 digest, 10 egress:, 11 first entry


def service(*, digest: str = DIGEST, egress: str = "  - host: api.example.com",
            **replace: str) -> str:
    text = SERVICE.format(digest=digest, egress=egress)
    for old, new in replace.items():
        text = text.replace(old.replace("__", " "), new)
    return text


def host(value: str) -> str:
    return f"  - host: {value}"


def port(value: str) -> str:
    return f"  - host: api.example.com\n    port: {value}"


GRANT = """\
apiVersion: reconcile/v1
kind: Grant
userId: ops-bot
services:
  - service: {service}
    capabilities: [{capabilities}]
"""


def grant(service: str = "checkout", capabilities: str = "deployment:preflight") -> str:
    return GRANT.format(service=service, capabilities=capabilities)


Setup = Callable[[Path], None]


def write(rel: str, content: str | bytes) -> Setup:
    def setup(root: Path) -> None:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return setup


def both(*steps: Setup) -> Setup:
    def setup(root: Path) -> None:
        for step in steps:
            step(root)
    return setup


def symlink(rel: str, target: Callable[[Path], Path]) -> Setup:
    def setup(root: Path) -> None:
        os.symlink(target(root), root / rel)
    return setup


def outside_file(root: Path) -> Path:
    outside = root.parent / "outside.yaml"
    outside.write_text(service(), encoding="utf-8")
    return outside


def remove(rel: str) -> Setup:
    def setup(root: Path) -> None:
        (root / rel).unlink()
    return setup


def settings_lost(root: Path) -> None:
    """A repository that lost its Settings: inside git, what is below is still read (and
    told so); outside git nothing below a Settings-less directory is read at all."""
    (root / "settings.yaml").unlink()
    git(root, "init", "-q")


@dataclass(frozen=True)
class Case:
    id: str
    setup: Setup
    path: str  # repo-relative; "<repo>" for the repo itself
    line: int | None  # None: a repo-level problem without a position
    field: str
    says: str


BAD = "services/bad.yaml"
G = "grants/bad.yaml"

CASES = [
    # --- egress hosts: IP literals in every spelling, and everything that is not a bare name
    Case("host-decimal-ip", write(BAD, service(egress=host("2130706433"))), BAD, 11,
         "egress[0].host", "bare lower-case DNS name"),
    Case("host-octal-ip", write(BAD, service(egress=host("0177.0.0.1"))), BAD, 11,
         "egress[0].host", "IP address"),
    Case("host-short-ip", write(BAD, service(egress=host("127.1"))), BAD, 11,
         "egress[0].host", "IP address"),
    Case("host-ipv6", write(BAD, service(egress=host('"[::1]"'))), BAD, 11,
         "egress[0].host", "IP address"),
    Case("host-dotted-ip", write(BAD, service(egress=host("10.0.0.1"))), BAD, 11,
         "egress[0].host", "IP address"),
    Case("host-hex-ip", write(BAD, service(egress=host("0x7f.1"))), BAD, 11,
         "egress[0].host", "IP address"),
    Case("host-trailing-dot", write(BAD, service(egress=host("api.example.com."))), BAD, 11,
         "egress[0].host", "trailing dot"),
    Case("host-uppercase", write(BAD, service(egress=host("API.example.com"))), BAD, 11,
         "egress[0].host", "lower-case"),
    Case("host-wildcard", write(BAD, service(egress=host('"*.example.com"'))), BAD, 11,
         "egress[0].host", "wildcard"),
    Case("host-scheme", write(BAD, service(egress=host("https://api.example.com"))), BAD, 11,
         "egress[0].host", "no scheme"),
    Case("host-with-port", write(BAD, service(egress=host("api.example.com:443"))), BAD, 11,
         "egress[0].host", "port"),
    Case("host-with-path", write(BAD, service(egress=host("api.example.com/v1"))), BAD, 11,
         "egress[0].host", "path"),
    Case("host-cyrillic-lookalike", write(BAD, service(egress=host("\u0430pi.example.com"))),
         BAD, 11, "egress[0].host", "U+0430"),
    Case("host-second-entry", write(BAD, service(
        egress=host("ok.example.com") + "\n" + host("bad_host.example.com"))), BAD, 12,
         "egress[1].host", "bare lower-case DNS name"),
    Case("egress-51-entries", write(BAD, service(
        egress="\n".join(host(f"h{i}.example.com") for i in range(51)))), BAD, 11,
         "egress", "at most 50"),
    Case("egress-duplicate-after-default-port", write(BAD, service(
        egress=host("api.example.com") + "\n" + port("443"))), BAD, 12,
         "egress[1]", "duplicates egress[0]"),
    Case("egress-null-is-ambiguous", write(BAD, service(egress="").replace(
        "egress:\n", "egress:")), BAD, 10, "egress", "ambiguous"),
    # --- ports
    Case("port-zero", write(BAD, service(egress=port("0"))), BAD, 12,
         "egress[0].port", "1 to 65535"),
    Case("port-too-big", write(BAD, service(egress=port("65536"))), BAD, 12,
         "egress[0].port", "1 to 65535"),
    Case("port-quoted-leading-zero", write(BAD, service(egress=port('"0443"'))), BAD, 12,
         "egress[0].port", "whole number (got the string '0443')"),
    Case("port-plain-leading-zero", write(BAD, service(egress=port("0443"))), BAD, 12,
         "egress[0].port", "whole number (got the string '0443')"),
    Case("port-boolean", write(BAD, service(egress=port("true"))), BAD, 12,
         "egress[0].port", "got the boolean true"),
    Case("port-float", write(BAD, service(egress=port("443.0"))), BAD, 12,
         "egress[0].port", "got the number 443.0"),
    # --- release
    Case("digest-uppercase", write(BAD, service(digest="sha256:" + "A" * 64)), BAD, 9,
         "release.digest", "sha256:<64 lower-case hex>"),
    Case("digest-short", write(BAD, service(digest="sha256:abc")), BAD, 9,
         "release.digest", "sha256:<64 lower-case hex>"),
    Case("digest-trailing-newline-block", write(BAD, service(digest=f"|\n    {DIGEST}")), BAD, 9,
         "release.digest", "no newline"),
    Case("digest-other-algorithm", write(BAD, service(digest="md5:" + "a" * 32)), BAD, 9,
         "release.digest", "sha256:"),
    Case("registry-host-scheme", write(BAD, service(
        **{"registry.example.net": "https://registry.example.net"})), BAD, 7,
         "release.registryHost", "canonical OCI registry host"),
    Case("registry-host-uppercase", write(BAD, service(
        **{"registry.example.net": "Registry.Example.net"})), BAD, 7,
         "release.registryHost", "canonical OCI registry host"),
    Case("repository-uppercase", write(BAD, service(**{"shop/extra": "Shop/Extra"})), BAD, 8,
         "release.repository", "canonical OCI repository"),
    Case("repository-double-slash", write(BAD, service(**{"shop/extra": "shop//extra"})), BAD, 8,
         "release.repository", "canonical OCI repository"),
    Case("release-missing-digest", write(BAD, service().replace(f"  digest: {DIGEST}\n", "")),
         BAD, 7, "release.digest", "required key `digest` is missing"),
    Case("immutable-no-is-a-string", write(BAD, service() + "immutable: no\n"), BAD, 12,
         "immutable", "true or false (got the string 'no')"),
    # --- unknown keys, kinds, versions
    Case("unknown-key-with-hint", write(BAD, service().replace("egress:", "egres:")), BAD, 10,
         "egres", "did you mean `egress`?"),
    Case("unknown-nested-key-with-hint", write(BAD, service().replace(
        "  repository:", "  tagg: v1\n  repository:")), BAD, 8, "release.tagg",
         "did you mean `tag`?"),
    Case("unknown-kind", write(BAD, service(**{"kind: Service": "kind: Servce"})), BAD, 2,
         "kind", "did you mean `Service`?"),
    Case("missing-api-version", write(BAD, service().replace("apiVersion: reconcile/v1\n", "")),
         BAD, 1, "apiVersion", "missing"),
    Case("wrong-api-version", write(BAD, service(**{"reconcile/v1": "reconcile/v2"})), BAD, 1,
         "apiVersion", "unsupported apiVersion 'reconcile/v2'"),
    Case("document-is-a-list", write(BAD, "- a\n- b\n"), BAD, 1, "", "must be a mapping"),
    # --- loader: hostile YAML
    Case("duplicate-key", write(BAD, service().replace("appId: extra", "appId: extra\nname: x")),
         BAD, 6, "name", "duplicate key"),
    Case("tag-python-object", write(BAD, service(**{"name: extra":
                                                    "name: !!python/object:os.system x"})),
         BAD, 3, "name", "tags are not allowed"),
    Case("tag-include", write(BAD, service(**{"name: extra": "name: !include other.yaml"})),
         BAD, 3, "name", "tags are not allowed (found !include)"),
    Case("tag-str", write(BAD, service(egress=port("!!str 443"))), BAD, 12, "egress[0].port",
         "tags are not allowed (found !!str)"),
    Case("anchor", write(BAD, service(**{"appId: extra": "appId: &a extra"})), BAD, 5, "appId",
         "anchors (&a) are not allowed"),
    Case("alias", write(BAD, service(**{"appId: extra": "appId: &a extra\nx: *a"})), BAD, 6,
         "x", "aliases (*a) are not allowed"),
    Case("deep-nesting-flow-10000", write(BAD, "a: " + "[" * 10_000 + "]" * 10_000 + "\n"), BAD,
         1, "", "nesting is deeper than 64"),
    Case("deep-nesting-block-10000", write(BAD, "- " * 10_000 + "x\n"), BAD, 1, "",
         "nesting is deeper than 64"),
    Case("big-file", write(BAD, service() + "#" * (1 << 20) + "\n"), BAD, 1, "",
         "limit is 1048576"),
    Case("non-utf8", write(BAD, service().encode().replace(b"appId: extra", b"appId: \xe9xtra")),
         BAD, 5, "", "not valid UTF-8"),
    Case("yaml-1.1-directive", write(BAD, "%YAML 1.1\n---\n" + service()), BAD, 1, "",
         "%YAML 1.1 is not supported"),
    Case("tag-directive", write(BAD, "%TAG !e! tag:example.com,2000:\n---\n" + service()), BAD,
         1, "", "%TAG directives are not allowed"),
    Case("non-string-key", write(BAD, service() + "1: x\n"), BAD, 12, "",
         "must be a string"),
    Case("syntax-error", write(BAD, "a: [1, 2\nb: c\n"), BAD, 2, "", "YAML syntax error"),
    Case("control-character", write(BAD, "a: \x07\n"), BAD, 1, "", "character YAML does not"),
    Case("symlink-inside-repo", symlink("services/link.yaml",
                                        lambda root: root / "services" / "checkout.yaml"),
         "services/link.yaml", 1, "", "symbolic link"),
    Case("symlink-outside-repo", symlink("services/outside.yaml", outside_file),
         "services/outside.yaml", 1, "", "symbolic link"),
    Case("symlinked-directory", symlink("more", lambda root: root / "services"), "more", 1, "",
         "symbolic link"),
    # --- settings: no secrets, sane values
    Case("secret-in-token-env", write("settings.yaml", (Path(__file__).resolve().parents[2] /
          "examples/desired-state/settings.yaml").read_text().replace(
              "tokenEnv: RECONCILE_TOKEN", "tokenEnv: ghp_s3cr3tTokenValue")),
         "settings.yaml", 9, "controlPlane.tokenEnv", "never the secret itself"),
    Case("secret-key-in-settings", write("settings.yaml", (Path(__file__).resolve().parents[2] /
          "examples/desired-state/settings.yaml").read_text().replace(
              "  tokenEnv: RECONCILE_TOKEN", "  tokenEnv: RECONCILE_TOKEN\n  token: abc")),
         "settings.yaml", 10, "controlPlane.token", "settings hold no secrets"),
    Case("gateway-ip", write("settings.yaml", (Path(__file__).resolve().parents[2] /
          "examples/desired-state/settings.yaml").read_text().replace(
              "gateway: gateway.sandbox.test", "gateway: 10.0.0.1")),
         "settings.yaml", 11, "mesh.gateway", "bare lower-case DNS name"),
    # --- grants
    Case("unknown-capability", write(G, grant(capabilities="deployment:deploy")), G, 6,
         "services[0].capabilities[0]", "not a deployment capability"),
    Case("capability-typo-hint", write(G, grant(capabilities="deployment:promote-rout")), G, 6,
         "services[0].capabilities[0]", "did you mean `deployment:promote-route`?"),
    Case("capability-repeated", write(G, grant(
        capabilities="deployment:preflight, deployment:preflight")), G, 6,
         "services[0].capabilities[1]", "listed twice"),
    Case("grant-undeclared-service", write(G, grant(service="chekout")), G, 5,
         "services[0].service", "did you mean `checkout`?"),
    Case("grant-same-user-service-twice", write(G, grant(service="catalog").replace(
        "ops-bot", "deploy-bot")), G, 5, "services[0].service",
         "user 'deploy-bot' granted service 'catalog' is also declared at "
         "grants/deploy-bot.yaml:9"),
    # --- cross-document
    Case("two-settings", write("more-settings.yaml", (Path(__file__).resolve().parents[2] /
         "examples/desired-state/settings.yaml").read_text()), "more-settings.yaml", 5, "kind",
         "also declared at settings.yaml:4"),
    Case("no-settings", settings_lost, "<repo>", None, "", "no Settings document"),
    Case("duplicate-service-name", write(BAD, service(**{"name: extra": "name: checkout"})),
         BAD, 3, "name", "also declared at services/checkout.yaml:5"),
    Case("duplicate-service-id", write(BAD, service(**{"svc-extra": "svc-search"})), BAD, 4,
         "serviceId", "also declared at services/search.yaml:6"),
    Case("duplicate-app-id", write(BAD, service(**{"appId: extra": "appId: catalog"})), BAD, 5,
         "appId", "also declared at services/catalog.yaml:8"),
]


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 40
    assert len({case.id for case in CASES}) == len(CASES)


def expect(run: Run, root: Path, case: Case) -> None:
    assert run.code == 1, run.out + run.err
    path = root.as_posix() if case.path == "<repo>" else case.path
    prefix = f"{path}:{case.line}:" if case.line is not None else f"{path}:"
    field = f" {case.field}: " if case.field else ": "
    matching = [line for line in run.lines
                if line.startswith(prefix) and field in line and case.says in line]
    assert matching, f"no line starts {prefix!r} with {field!r} and {case.says!r}:\n{run.out}"
    assert "invalid:" in run.err
    assert "Traceback" not in run.out + run.err


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_reported_with_file_line_and_field(
        case: Case, repo: Path, validate: Callable[..., Run]) -> None:
    assert validate(str(repo)).code == 0  # the starting point is valid
    case.setup(repo)
    expect(validate(str(repo)), repo, case)
