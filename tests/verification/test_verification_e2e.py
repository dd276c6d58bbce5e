"""Issue 34 end to end: a real sandbox, a real Prometheus scraping its clusters, and the
real CLI. A release that runs but answers errors on one cluster is not converged (apply
exits 15 naming the cluster, the check and the value) and, with ``--on-gate-failure
revert``, is reverted and held because of its check; with Prometheus stopped the same
release is unknown (blocks, never reverted); a healthy release passes."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo, make_repo
from tests.plan.builders import digest
from tests.prometheus import Prometheus

pytestmark = pytest.mark.integration

OLD = digest("checkout", "v2.3.0")
NEW = digest("checkout", "v2.4.0")  # what the reference repo pins

#: The share of the app's answers for this digest on this cluster that are 5xx, over the
#: last 5 s (the sandbox counts 2 synthetic requests a second; Prometheus scrapes every
#: second). No request for the digest yet: no sample -- unknown, never a pass.
ERRORS = ('(sum(rate(sandbox_app_requests_total{cluster="{{cluster}}",app="{{app}}",'
          'digest="{{digest}}",code=~"5.."}[5s])) or vector(0)) / '
          'sum(rate(sandbox_app_requests_total{cluster="{{cluster}}",app="{{app}}",'
          'digest="{{digest}}"}[5s]))')

HTTP_CHECK = """\
  - name: answers
    http:
      path: /sandbox/apps/{{app}}/healthz
      status: 200
      body: '"digest"'
      maxLatencySeconds: 1.5
    count: 2
    intervalSeconds: 0.2
"""
PROMETHEUS_CHECK = f"""\
  - name: error-ratio
    prometheus:
      query: '{ERRORS}'
      successCondition: result < 0.01
    count: 1
"""


def configure(tmp: Path, sandbox: Sandbox, prometheus_url: str, *checks: str,
              attempts: int = 80) -> Repo:
    repo = make_repo(tmp, sandbox, attempts=attempts, interval_seconds=0.25)
    settings = json.loads((repo.path / "settings.yaml").read_text())
    settings["verification"] = {"prometheus": {"url": prometheus_url, "timeoutSeconds": 2.0}}
    (repo.path / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")
    (repo.path / "verifications").mkdir()
    (repo.path / "verifications" / "checkout.yaml").write_text(
        "apiVersion: reconcile/v1\nkind: Verification\nname: checkout-works\n"
        "scope:\n  services: [checkout]\nchecks:\n" + "".join(checks))
    repo.commit("verify checkout")
    return repo


def git_out(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


def test_a_release_failing_its_check_on_one_cluster_is_not_converged(
        tmp_path: Path, sandbox: Sandbox, prometheus: Prometheus) -> None:
    repo = configure(tmp_path, sandbox, prometheus.url, HTTP_CHECK, PROMETHEUS_CHECK)
    sandbox.fault("sn2", "app-errors", digest=NEW)
    began = time.monotonic()
    done = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout",
                    timeout=300)
    took = time.monotonic() - began
    text = done.out + done.err
    assert done.code == Exit.NOT_CONVERGED, text
    # Named: the cluster, the check and the value it measured.
    [verdict] = [line for line in text.splitlines() if "checkout on sn2:" in line]
    assert "check checkout-works/error-ratio failed: 1 (not result < 0.01)" in verdict, text
    assert "check checkout-works/answers failed: HTTP 500" in verdict, text
    for healthy in ("sn1", "sn3"):
        assert not any(line.lstrip().startswith(f"{healthy}:") and "check" in line
                       for line in text.splitlines()), text
    print(f"failing verified apply took {took:.1f}s")


def test_with_revert_the_failing_release_is_reverted_and_held_naming_the_check(
        tmp_path: Path, sandbox: Sandbox, prometheus: Prometheus) -> None:
    repo = configure(tmp_path, sandbox, prometheus.url, HTTP_CHECK, PROMETHEUS_CHECK)
    sandbox.fault("sn2", "app-errors", digest=NEW)
    done = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout",
                    "--on-gate-failure", "revert", timeout=300)
    text = done.out + done.err
    assert done.code == Exit.NOT_CONVERGED, text
    held = list((repo.path / "holds").glob("*.yaml"))
    assert len(held) == 1, text
    hold = held[0].read_text()
    assert NEW in hold and "sn2" in hold and "checkout-works/" in hold, hold
    pinned = (repo.path / "services" / "checkout.yaml").read_text()
    assert OLD in pinned and NEW not in pinned
    assert "Reconcile-Revert:" in git_out(repo.path, "log", "-1", "--format=%B")


def test_with_prometheus_stopped_the_release_is_unknown_blocks_and_is_not_reverted(
        tmp_path: Path, sandbox: Sandbox, prometheus: Prometheus) -> None:
    repo = configure(tmp_path, sandbox, prometheus.url, PROMETHEUS_CHECK, attempts=12)
    sandbox.fault("sn2", "app-errors", digest=NEW)
    prometheus.stop()
    done = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout",
                    "--on-gate-failure", "revert", timeout=300)
    text = done.out + done.err
    assert done.code == Exit.NOT_CONVERGED, text
    assert "Prometheus" in text and "unknown" in text, text
    assert not (repo.path / "holds").exists() or not list((repo.path / "holds").glob("*"))
    assert NEW in (repo.path / "services" / "checkout.yaml").read_text()
    assert "Reconcile-Revert:" not in git_out(repo.path, "log", "--format=%B")


def queries_answered(prometheus: Prometheus) -> float:
    """How many instant queries Prometheus has answered (its own counter)."""
    with httpx.Client(timeout=10) as client:
        text = client.get(f"{prometheus.url}/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("prometheus_http_requests_total{")
               and 'handler="/api/v1/query"' in line)


def test_a_healthy_release_passes_its_checks(
        tmp_path: Path, sandbox: Sandbox, prometheus: Prometheus) -> None:
    repo = configure(tmp_path, sandbox, prometheus.url, HTTP_CHECK, PROMETHEUS_CHECK)
    before = queries_answered(prometheus)
    began = time.monotonic()
    done = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout",
                    timeout=300)
    took = time.monotonic() - began
    assert done.code == Exit.OK, done.out + done.err
    [polls] = [int(found.group(1)) for found in
               re.finditer(r"Converged: .* after (\d+) poll\(s\)", done.out)]
    asked = queries_answered(prometheus) - before
    # The plan asks each query once to check its syntax; then, per gate poll, one per
    # cluster running the digest (never more): 3 clusters, one prometheus check.
    assert 1 + 3 <= asked <= 1 + 3 * polls, (asked, polls, done.out)
    again = repo.run("plan", str(repo.path), "--only", "checkout", "--detailed-exitcode")
    assert again.code == Exit.OK, again.out + again.err
    assert "checks (on every cluster" in again.out or "check checkout-works/" in again.out
    print(f"healthy verified apply took {took:.1f}s; {polls} gate poll(s), "
          f"{asked:g} Prometheus queries")


def test_a_query_prometheus_cannot_parse_is_named_at_plan_time(
        tmp_path: Path, sandbox: Sandbox, prometheus: Prometheus) -> None:
    broken = PROMETHEUS_CHECK.replace("sum(rate(", "sum(rate((", 1)
    repo = configure(tmp_path, sandbox, prometheus.url, broken)
    done = repo.run("plan", str(repo.path), "--only", "checkout")
    text = done.out + done.err
    assert done.code == Exit.ERROR, text
    assert "verifications/checkout.yaml:1" in text, text
    assert "checks[0].prometheus.query" in text and "parse" in text, text
