"""A real Prometheus (Debian's) scraping every sandbox cluster's /metrics (issue 34)."""

from __future__ import annotations

import pytest

from reconciler.sandbox.cluster import read_runtime
from reconciler.sandbox.launcher import Sandbox
from tests.prometheus import Prometheus

pytestmark = pytest.mark.integration

ERRORS = 'sum by (cluster)(rate(sandbox_app_requests_total{code=~"5.."}[10s]))'
ALL = "sum by (cluster)(rate(sandbox_app_requests_total[10s]))"


def test_every_cluster_is_a_target_labelled_with_its_cluster(
        sandbox: Sandbox, prometheus: Prometheus) -> None:
    print(f"prometheus: ready {prometheus.ready_seconds:.2f}s, every target up "
          f"{prometheus.startup_seconds:.2f}s after its start")
    assert 0 < prometheus.ready_seconds <= prometheus.startup_seconds
    targets = prometheus.targets()
    assert sorted(t["labels"]["cluster"] for t in targets) == sorted(sandbox.clusters)
    assert all(t["health"] == "up" for t in targets)
    assert prometheus.by_label("up") == {c: 1.0 for c in sandbox.clusters}
    # The synthetic load gives every cluster a request rate, and no errors.
    prometheus.wait_until(ALL, lambda seen: set(seen) == set(sandbox.clusters)
                          and all(v > 0 for v in seen.values()))
    assert prometheus.by_label(ERRORS) == {}
    running = prometheus.by_label(
        'sandbox_app_running{app="checkout"}', label="digest")
    assert set(running) == {str(read_runtime(sandbox.state_dir, c)["checkout"]
                                ["resolvedDigest"]) for c in sandbox.clusters}


def test_an_error_ratio_query_names_the_faulted_cluster_only(
        sandbox: Sandbox, prometheus: Prometheus) -> None:
    digest = str(read_runtime(sandbox.state_dir, "sn2")["checkout"]["resolvedDigest"])
    sandbox.fault("sn2", "app-errors", digest=digest)
    seen = prometheus.wait_until(ERRORS, lambda seen: seen.get("sn2", 0) > 0)
    assert set(seen) == {"sn2"}, seen
    by_digest = prometheus.by_label(
        'sum by (digest)(rate(sandbox_app_requests_total{code="500",cluster="sn2"}[10s]))',
        label="digest")
    assert set(by_digest) == {digest}
    # The error ratio of checkout per cluster: 1 where it fails, 0 elsewhere.
    ratio = prometheus.wait_until(
        'sum by (cluster)(rate(sandbox_app_requests_total{app="checkout",code=~"5.."}[10s]))'
        ' / sum by (cluster)(rate(sandbox_app_requests_total{app="checkout"}[10s]))'
        ' or on(cluster) 0 * sum by (cluster)(rate(sandbox_app_requests_total'
        '{app="checkout"}[10s]))',
        lambda seen: set(seen) == set(sandbox.clusters) and seen["sn2"] > 0.5)
    assert ratio["sn1"] == 0 and ratio["sn3"] == 0
    # Cleared, the errors stop: the rate falls back to nothing.
    sandbox.fault("sn2", "app-errors", on=False)
    prometheus.wait_until(ERRORS, lambda seen: all(v == 0 for v in seen.values()),
                          timeout=60)
