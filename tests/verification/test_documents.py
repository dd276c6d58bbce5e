"""``kind: Verification`` documents (issue 34): each rule with its file and line, through
the real CLI. The reference repo (valid as it stands) gains a verification file; each
test breaks it one way and requires the one problem, named at the line that is wrong."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.validation.conftest import Run

FILE = "verifications/checkout.yaml"

GOOD = """\
apiVersion: reconcile/v1
kind: Verification
name: checkout-works
scope:
  services: [checkout]
checks:
  - name: health
    http:
      path: /healthz
      status: 200
      body: ok
      maxLatencySeconds: 0.5
    count: 2
    intervalSeconds: 0.1
    failureLimit: 1
  - name: error-ratio
    prometheus:
      query: 'sum(rate(app_requests_total{cluster="{{cluster}}",app="{{app}}",code=~"5.."}[1m]))'
      successCondition: result < 0.01
"""

PROMETHEUS = """\
verification:
  prometheus:
    url: http://127.0.0.1:9090
"""


def write(repo: Path, text: str, *, prometheus: bool = True) -> None:
    path = repo / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if prometheus:
        settings = repo / "settings.yaml"
        settings.write_text(settings.read_text(encoding="utf-8") + PROMETHEUS,
                            encoding="utf-8")


def line_of(repo: Path, needle: str) -> int:
    for number, line in enumerate((repo / FILE).read_text().splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {FILE}")


def named(run: Run, line: int, *words: str) -> bool:
    return any(e.startswith(f"{FILE}:{line}:") and all(w in e for w in words)
               for e in run.lines)


def test_a_good_verification_is_valid(repo: Path, validate: Callable[..., Run]) -> None:
    write(repo, GOOD)
    run = validate(str(repo))
    assert run.code == 0, run.out + run.err


def test_an_unknown_service_in_scope_is_named_at_its_line(
        repo: Path, validate: Callable[..., Run]) -> None:
    write(repo, GOOD.replace("services: [checkout]", "services:\n    - checkuot"))
    run = validate(str(repo))
    assert run.code == 1
    assert named(run, line_of(repo, "- checkuot"), "'checkuot'", "did you mean `checkout`"), \
        run.out


def test_an_unparseable_success_condition_is_named(
        repo: Path, validate: Callable[..., Run]) -> None:
    write(repo, GOOD.replace("result < 0.01", "errors are low"))
    run = validate(str(repo))
    assert run.code == 1
    assert named(run, line_of(repo, "errors are low"), "successCondition",
                 "result OP NUMBER"), run.out


def test_an_unknown_placeholder_is_named(repo: Path, validate: Callable[..., Run]) -> None:
    write(repo, GOOD.replace("{{app}}", "{{application}}"))
    run = validate(str(repo))
    assert run.code == 1
    assert named(run, line_of(repo, "{{application}}"), "unknown placeholder"), run.out


def test_a_prometheus_check_needs_a_prometheus(
        repo: Path, validate: Callable[..., Run]) -> None:
    write(repo, GOOD, prometheus=False)
    run = validate(str(repo))
    assert run.code == 1
    # a mapping is placed at its first entry
    assert named(run, line_of(repo, "query:"), "verification.prometheus.url"), run.out


def test_a_check_is_http_or_prometheus_and_failure_limit_below_count(
        repo: Path, validate: Callable[..., Run]) -> None:
    write(repo, GOOD.replace("failureLimit: 1", "failureLimit: 2"))
    run = validate(str(repo))
    assert run.code == 1
    assert named(run, line_of(repo, "failureLimit: 2"), "less than count"), run.out


def test_a_check_named_twice_is_refused(repo: Path, validate: Callable[..., Run]) -> None:
    write(repo, GOOD.replace("name: error-ratio", "name: health"))
    run = validate(str(repo))
    assert run.code == 1
    assert any(FILE in e and "check 'health' is also checks[0]" in e for e in run.lines), \
        run.out


def test_an_http_host_no_route_of_the_service_serves_is_named(
        repo: Path, validate: Callable[..., Run]) -> None:
    # The reference repo routes checkout's shop.sandbox.test (routes/shop.yaml).
    write(repo, GOOD.replace("      path: /healthz\n",
                             "      path: /healthz\n      host: shop.example.net\n"))
    run = validate(str(repo))
    assert run.code == 1
    assert named(run, line_of(repo, "host: shop.example.net"), "checks[0].http.host",
                 "no Route document of service 'checkout' serves host 'shop.example.net'"), \
        run.out


def test_an_http_host_a_route_serves_is_valid(repo: Path, validate: Callable[..., Run]) -> None:
    write(repo, GOOD.replace("      path: /healthz\n",
                             "      path: /healthz\n      host: shop.sandbox.test\n"))
    run = validate(str(repo))
    assert run.code == 0, run.out + run.err
