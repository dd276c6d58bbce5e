"""The apps' own traffic through each cluster, its /metrics and the app faults (issue 34),
over real HTTPS against one sandbox for the module (each test clears its faults)."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.sandbox import apps, launcher
from reconciler.sandbox.cluster import read_runtime
from reconciler.sandbox.launcher import Sandbox
from tests import sandboxes
from tests.conftest import TEST_CONVERGE_DELAY_MS
from tests.sandbox.wire import ControlPlaneClient

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    yield from sandboxes.for_module(tmp_path_factory, "apps",
                                    converge_delay_ms=TEST_CONVERGE_DELAY_MS)


@pytest.fixture
def http(sb: Sandbox) -> Iterator[httpx.Client]:
    client = httpx.Client(verify=ssl.create_default_context(cafile=str(sb.ca_file)),
                          timeout=10.0)
    try:
        yield client
    finally:
        client.close()
        sb.clear_faults()


def get(http: httpx.Client, sb: Sandbox, cluster: str, path: str, *,
        host: str | None = None, token: str | None = None) -> httpx.Response:
    headers = {"Host": host or sb.gateway}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return http.get(f"https://{sb.addresses[cluster]}:{sb.mesh_port}{path}", headers=headers,
                    extensions={"sni_hostname": sb.gateway})


def app(http: httpx.Client, sb: Sandbox, cluster: str, name: str) -> httpx.Response:
    return get(http, sb, cluster, f"/sandbox/apps/{name}/healthz")


def digest_of(sb: Sandbox, cluster: str, name: str) -> str:
    return str(read_runtime(sb.state_dir, cluster)[name]["resolvedDigest"])


def scrape(http: httpx.Client, sb: Sandbox, cluster: str) -> Samples:
    response = get(http, sb, cluster, "/metrics",
                   token=sb.metrics_token_file.read_text().strip())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def requests(samples: Samples, name: str, digest: str, code: str) -> float:
    key = (apps.REQUESTS, (("app", name), ("code", code), ("digest", digest)))
    return samples.get(key, 0.0)


def at(samples: Samples, key: tuple[str, tuple[tuple[str, str], ...]]) -> float:
    """A counter's sample; 0 before its series exists (as a counter starts)."""
    return samples.get(key, 0.0)


def codes(samples: Samples, name: str | None = None) -> set[str]:
    return {dict(labels)["code"] for (metric, labels) in samples
            if metric == apps.REQUESTS and (name is None or dict(labels)["app"] == name)}


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not in {timeout}s: {what}"
        time.sleep(0.1)


def test_each_cluster_answers_for_the_apps_it_runs(sb: Sandbox, http: httpx.Client) -> None:
    for cluster in sb.clusters:
        runtime = read_runtime(sb.state_dir, cluster)
        assert runtime, f"{cluster} runs no app"
        for name, record in runtime.items():
            response = app(http, sb, cluster, name)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["app"] == name and body["cluster"] == cluster
            assert body["digest"] == record["resolvedDigest"]
            assert body["rolloutGeneration"] == record["rolloutGeneration"]
            assert response.headers["X-Sandbox-Cluster"] == cluster
            assert response.headers["X-Sandbox-Digest"] == record["resolvedDigest"]


def test_an_app_that_does_not_run_there_is_404(sb: Sandbox, http: httpx.Client) -> None:
    for cluster in sb.clusters:
        response = app(http, sb, cluster, "no-such-app")
        assert response.status_code == 404
        assert response.json() == {"error": f"app no-such-app does not run on cluster "
                                   f"{cluster}", "app": "no-such-app", "cluster": cluster}
    # The seed's foreign route sends /status/ on shop.sandbox.test to status-page, which
    # runs nowhere: the route exists, the app does not.
    routed = get(http, sb, "sn1", "/status/", host="shop.sandbox.test")
    assert routed.status_code == 404
    assert routed.json()["app"] == "status-page"


def test_a_gateway_route_in_effect_sends_its_hostname_to_its_app(
        sb: Sandbox, http: httpx.Client) -> None:
    cp = ControlPlaneClient(sb)
    try:
        cp.ok("syncGatewayClientRoute",
              ownership={"appId": "checkout", "hostname": "pay.sandbox.test"},
              route={"name": "pay", "match": {"domains": ["*.pay.sandbox.test"],
                                              "path": "/api/"},
                     "action": {"type": "forward", "target": {"appId": "checkout",
                                                              "port": 8080}}})
    finally:
        cp.close()
    for cluster in sb.clusters:
        wait_for(lambda c=cluster: get(http, sb, c, "/api/cart",  # type: ignore[misc]
                                       host="eu.pay.sandbox.test").status_code == 200,
                 f"{cluster} routes eu.pay.sandbox.test")
        body = get(http, sb, cluster, "/api/cart", host="eu.pay.sandbox.test:443").json()
        assert body == {"app": "checkout", "digest": digest_of(sb, cluster, "checkout"),
                        "cluster": cluster, "path": "/api/cart",
                        "rolloutGeneration": body["rolloutGeneration"]}
        # A path the hostname's routes do not match; a hostname no route names.
        missed = get(http, sb, cluster, "/other", host="eu.pay.sandbox.test")
        assert missed.status_code == 404
        assert "no route for eu.pay.sandbox.test /other" in missed.json()["error"]
        assert get(http, sb, cluster, "/api/cart", host="a.b.pay.sandbox.test"
                   ).status_code == 421
        assert get(http, sb, cluster, "/api/cart", host="elsewhere.test").status_code == 421


def test_metrics_want_the_scrape_token(sb: Sandbox, http: httpx.Client) -> None:
    assert get(http, sb, "sn1", "/metrics").status_code == 401
    assert get(http, sb, "sn1", "/metrics", token="wrong").status_code == 401
    assert sb.metrics_token_file.stat().st_mode & 0o077 == 0
    # Any Host: Prometheus sends the target's address.
    ok = get(http, sb, "sn1", "/metrics", host=sb.addresses["sn1"],
             token=sb.metrics_token_file.read_text().strip())
    assert ok.status_code == 200


def test_metrics_count_real_and_synthetic_requests_per_app_and_digest(
        sb: Sandbox, http: httpx.Client) -> None:
    digest = digest_of(sb, "sn1", "checkout")
    before = scrape(http, sb, "sn1")
    running = {(dict(labels)["app"], dict(labels)["digest"])
               for (metric, labels), value in before.items()
               if metric == apps.RUNNING and value == 1}
    assert running == {(name, record["resolvedDigest"])
                       for name, record in read_runtime(sb.state_dir, "sn1").items()}
    # The synthetic load moves every running app's counter with no request sent.
    wait_for(lambda: all(requests(scrape(http, sb, "sn1"), name, d, "200")
                         > requests(before, name, d, "200") for name, d in running),
             "every app's synthetic requests counted")
    for _ in range(3):
        assert app(http, sb, "sn1", "checkout").status_code == 200
    after = scrape(http, sb, "sn1")
    assert requests(after, "checkout", digest, "200") >= requests(before, "checkout",
                                                                  digest, "200") + 3
    labels = (("app", "checkout"), ("digest", digest))
    count = after[(apps.DURATION + "_count", labels)]
    assert after[(apps.DURATION + "_bucket", (*labels, ("le", "+Inf")))] == count
    assert count == sum(value for (metric, lab), value in after.items()
                        if metric == apps.REQUESTS and dict(lab)["app"] == "checkout"
                        and dict(lab)["digest"] == digest)
    assert codes(after) == {"200"}


def test_app_errors_fails_one_digest_on_one_cluster_until_cleared(
        sb: Sandbox, http: httpx.Client) -> None:
    digest = digest_of(sb, "sn2", "checkout")
    # what ran before the fault: the synthetic load's successes, counted
    wait_for(lambda: requests(scrape(http, sb, "sn2"), "checkout", digest, "200") > 0,
             "sn2 counts synthetic 200s for checkout")
    sb.fault("sn2", "app-errors", digest=digest[:20])
    failed = app(http, sb, "sn2", "checkout")
    assert failed.status_code == 500
    assert failed.json() == {"error": "app checkout answered an error (fault app-errors)",
                             "app": "checkout", "digest": digest, "cluster": "sn2"}
    assert app(http, sb, "sn2", "catalog").status_code == 200
    assert app(http, sb, "sn1", "checkout").status_code == 200
    assert app(http, sb, "sn3", "checkout").status_code == 200
    # The synthetic load fails too: sn2's checkout counts 500s, nothing else does.
    wait_for(lambda: requests(scrape(http, sb, "sn2"), "checkout", digest, "500") > 1,
             "sn2 counts synthetic 500s for checkout")
    assert codes(scrape(http, sb, "sn2"), "checkout") == {"200", "500"}
    assert codes(scrape(http, sb, "sn2")) - codes(scrape(http, sb, "sn2"), "checkout") \
        == set()
    for name in ("catalog", "search", "notifications"):
        assert codes(scrape(http, sb, "sn2"), name) == {"200"}
    for cluster in ("sn1", "sn3"):
        assert codes(scrape(http, sb, cluster), "checkout") == {"200"}
    sb.fault("sn2", "app-errors", on=False)
    assert app(http, sb, "sn2", "checkout").status_code == 200
    settled = scrape(http, sb, "sn2")
    wait_for(lambda: requests(scrape(http, sb, "sn2"), "checkout", digest, "200")
             > requests(settled, "checkout", digest, "200") + 1,
             "sn2's checkout answers again")
    assert requests(scrape(http, sb, "sn2"), "checkout", digest, "500") \
        == requests(settled, "checkout", digest, "500")


def test_app_errors_ratio_fails_that_share_of_requests(sb: Sandbox,
                                                       http: httpx.Client) -> None:
    sb.fault("sn3", "app-errors", app="search", ratio=0.25, code=503)
    statuses = [app(http, sb, "sn3", "search").status_code for _ in range(8)]
    assert sorted(statuses) == [200] * 6 + [503] * 2
    assert app(http, sb, "sn3", "catalog").status_code == 200  # another app


def test_app_slow_delays_one_digest_and_its_latency_shows(sb: Sandbox,
                                                          http: httpx.Client) -> None:
    digest = digest_of(sb, "sn1", "catalog")
    labels = (("app", "catalog"), ("digest", digest))
    fast_bucket = (apps.DURATION + "_bucket", (*labels, ("le", "0.1")))
    total, count = (apps.DURATION + "_sum", labels), (apps.DURATION + "_count", labels)
    sb.fault("sn1", "app-slow", digest=digest, seconds=0.6)
    # These scrapes count what ran before the fault as it ran; all later is slowed. A
    # series not scraped yet (the synthetic load had not reached it) is a counter at 0.
    before = {c: scrape(http, sb, c) for c in ("sn1", "sn2")}
    began = time.monotonic()
    assert app(http, sb, "sn1", "catalog").status_code == 200
    assert time.monotonic() - began >= 0.6
    wait_for(lambda: all(at(scrape(http, sb, c), count) > at(before[c], count) + 2
                         for c in ("sn1", "sn2")), "requests counted")
    slowed = {c: scrape(http, sb, c) for c in ("sn1", "sn2")}
    assert at(slowed["sn1"], fast_bucket) == at(before["sn1"], fast_bucket)
    assert at(slowed["sn1"], total) - at(before["sn1"], total) \
        >= 0.6 * (at(slowed["sn1"], count) - at(before["sn1"], count))
    # Another cluster's catalog (only its synthetic load here) is not slowed.
    assert at(slowed["sn2"], fast_bucket) - at(before["sn2"], fast_bucket) \
        == at(slowed["sn2"], count) - at(before["sn2"], count)
    sb.fault("sn1", "app-slow", on=False)
    cleared = scrape(http, sb, "sn1")
    wait_for(lambda: at(scrape(http, sb, "sn1"), count) > at(cleared, count) + 2,
             "counted again")
    after = scrape(http, sb, "sn1")
    assert at(after, fast_bucket) - at(cleared, fast_bucket) \
        == at(after, count) - at(cleared, count)


def test_the_scrape_token_is_kept_across_restarts(sb: Sandbox, tmp_path: Path) -> None:
    token = sb.metrics_token_file.read_text()
    launcher.prepare(sb.state_dir, clusters=sb.clusters, seed=None, gateway=sb.gateway)
    assert sb.metrics_token_file.read_text() == token
