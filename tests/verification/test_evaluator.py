"""The evaluator's bounds and semantics (issue 34), against a small real HTTP server on
loopback standing in for Prometheus (a real Prometheus cannot be made to answer garbage,
a huge reply or nothing at all): every reply that is not an answer is an *unknown*
measurement saying what it got, within the configured time; count/failureLimit series;
samples told apart by their ``cluster`` label; a span per check; the metric."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reconciler.core.desired import (
    PrometheusSource,
    SourceRef,
    Verification,
    VerificationSettings,
)
from reconciler.core.live import LiveSnapshot
from reconciler.core.planning import Provenance, plan
from reconciler.core.verification import Outcome
from reconciler.shell import tracing
from reconciler.shell.servicemetrics import ServiceMetrics
from reconciler.shell.verifying import Verifier, query_problems
from tests.live.fakes import connection
from tests.plan import builders as b

Reply = Callable[[str], tuple[int, bytes, float]]  # query -> (status, body, delay)


class FakePrometheus:
    def __init__(self) -> None:
        self.reply: Reply = lambda q: (200, b"{}", 0.0)
        self.queries: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlparse
                query = parse_qs(urlparse(self.path).query).get("query", [""])[0]
                owner.queries.append(query)
                status, body, delay = owner.reply(query)
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (a hang it bounded)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def vector(*samples: tuple[str, str]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"cluster": c}, "value": [1.0, v]} for c, v in samples]}}).encode()


def verification(query: str, **series: Any) -> Verification:
    return Verification.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Verification", "name": "works",
        "scope": {"services": ["checkout"]},
        "checks": [{"name": "errors", "prometheus": {
            "query": query, "successCondition": "result < 0.01"}, **series}]})


def desired_with(doc: Verification) -> Any:
    # The reference repo pins checkout v2.4.0; the snapshot below runs it everywhere.
    return b.reference_desired().model_copy(update={"verifications": (doc,)})


def snapshot_running_pinned() -> LiveSnapshot:
    live = b.reference_live()
    pinned = b.digest("checkout", "v2.4.0")
    rows = tuple(replace(o, runtime=b.runtime("checkout", "v2.4.0", 3))
                 for o in live.observations["checkout"])
    assert all(r.runtime is not None and r.runtime.resolved_digest == pinned for r in rows)
    return live.model_copy(update={"observations": {**live.observations, "checkout": rows}})


def results(prom: FakePrometheus, query: str, *, timeout: float = 2.0,
            sleeps: list[float] | None = None, **series: Any) -> dict[str, Any]:
    async def slept(seconds: float) -> None:
        (sleeps if sleeps is not None else []).append(seconds)

    async def run() -> dict[str, Any]:
        verifier = Verifier(connection(), PrometheusSource(url=prom.url,
                                                          timeoutSeconds=timeout),
                            sleep=slept)
        try:
            seen = await verifier.verify(desired_with(verification(query, **series)),
                                         snapshot_running_pinned())
        finally:
            await verifier.aclose()
        return {o.cluster_id: o.checks[0] for o in seen.observations["checkout"]}
    return asyncio.run(run())


PER_CLUSTER = 'x{cluster="{{cluster}}",app="{{app}}",digest="{{digest}}"}'


def test_a_query_per_cluster_is_filled_in_and_judged(prom: FakePrometheus) -> None:
    prom.reply = lambda q: (200, vector(("", "0.5" if '"sn2"' in q else "0")), 0.0)
    found = results(prom, PER_CLUSTER)
    assert {c: r.outcome for c, r in found.items()} == {
        "sn1": Outcome.PASS, "sn2": Outcome.FAIL, "sn3": Outcome.PASS}
    assert found["sn2"].value == "0.5" and "not result < 0.01" in found["sn2"].why
    assert found["sn1"].digest == b.digest("checkout", "v2.4.0")
    assert found["sn1"].generation == 3
    assert sorted(prom.queries) == sorted(
        f'x{{cluster="{c}",app="checkout",digest="{b.digest("checkout", "v2.4.0")}"}}'
        for c in b.CLUSTERS)  # one request per cluster


def test_without_cluster_placeholder_one_query_is_split_by_label(
        prom: FakePrometheus) -> None:
    prom.reply = lambda q: (200, vector(("sn1", "0"), ("sn2", "0.2")), 0.0)
    found = results(prom, "sum by (cluster) (x)")
    assert len(prom.queries) == 1
    assert found["sn1"].outcome is Outcome.PASS and found["sn2"].outcome is Outcome.FAIL
    assert found["sn3"].outcome is Outcome.UNKNOWN and "no sample" in found["sn3"].why


@pytest.mark.parametrize(("reply", "said"), [
    ((200, b"<html>oops</html>", 0.0), "no JSON"),
    ((200, b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', 0.0),
     "instant vector or scalar"),
    ((400, b'{"status": "error", "errorType": "bad_data", "error": "parse error"}', 0.0),
     "bad_data"),
    ((200, b'{"status": "success", "data": {"resultType": "vector", "result": '
           b'[{"metric": {}, "value": [1, "zero"]}]}}', 0.0), "cannot be read"),
    ((200, vector(("", "NaN")), 0.0), "NaN"),
    ((200, vector(), 0.0), "no sample"),
    ((200, vector(("", "0"), ("", "1")), 0.0), "2 samples"),
    ((200, b"[" + b"1," * 600_000 + b"1]", 0.0), "larger than"),
])
def test_garbage_is_unknown_saying_what_it_got(prom: FakePrometheus,
                                                reply: tuple[int, bytes, float],
                                                said: str) -> None:
    prom.reply = lambda q: reply
    for result in results(prom, PER_CLUSTER).values():
        assert result.outcome is Outcome.UNKNOWN, result
        assert said in result.why or said in result.value, result


def test_a_hang_is_unknown_within_the_timeout(prom: FakePrometheus) -> None:
    prom.reply = lambda q: (200, vector(("", "0")), 5.0)
    began = time.monotonic()
    found = results(prom, PER_CLUSTER, timeout=0.5)
    assert time.monotonic() - began < 3.0
    assert all(r.outcome is Outcome.UNKNOWN and "within 0.5s" in r.why
               for r in found.values())


def test_unreachable_prometheus_is_unknown(prom: FakePrometheus) -> None:
    prom.server.shutdown()
    prom.server.server_close()
    found = results(prom, PER_CLUSTER)
    assert all(r.outcome is Outcome.UNKNOWN and "Prometheus" in r.why
               for r in found.values())


def test_count_interval_and_failure_limit(prom: FakePrometheus) -> None:
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def reply(q: str) -> tuple[int, bytes, float]:
        # Each cluster's second measurement fails (one failure: within the limit).
        with lock:
            asked[q] = asked.get(q, 0) + 1
            return 200, vector(("", "0.5" if asked[q] == 2 else "0")), 0.0
    prom.reply = reply
    sleeps: list[float] = []
    found = results(prom, 'x{cluster="{{cluster}}"}', sleeps=sleeps, count=3,
                    intervalSeconds=2.0, failureLimit=1)
    assert all(r.measurements == 3 and r.outcome is Outcome.PASS for r in found.values())
    assert sleeps == [2.0, 2.0]  # the interval between measurements, never before the first
    assert len(prom.queries) == 9


def test_a_series_stops_as_soon_as_it_failed(prom: FakePrometheus) -> None:
    prom.reply = lambda q: (200, vector(("", "0.9")), 0.0)
    found = results(prom, 'x{cluster="{{cluster}}"}', count=5, intervalSeconds=1.0)
    assert all(r.outcome is Outcome.FAIL and r.measurements == 1 for r in found.values())
    assert len(prom.queries) == 3


def test_a_span_per_check_and_the_metric(prom: FakePrometheus) -> None:
    exporter = InMemorySpanExporter()
    tracing.reset()
    tracing.configure(exporter=exporter)
    try:
        prom.reply = lambda q: (200, vector(("", "0.5" if '"sn2"' in q else "0")), 0.0)
        doc = verification(PER_CLUSTER)

        async def run() -> LiveSnapshot:
            verifier = Verifier(connection(), PrometheusSource(url=prom.url))
            try:
                return await verifier.verify(desired_with(doc), snapshot_running_pinned())
            finally:
                await verifier.aclose()
        seen = asyncio.run(run())
    finally:
        spans = exporter.get_finished_spans()
        tracing.reset()
    [span] = [s for s in spans if s.name == "check works/errors"]
    assert span.attributes is not None
    assert span.attributes["reconcile.check.sn2"] == "fail 0.5"
    assert span.attributes["reconcile.check.sn1"] == "pass 0"

    made = plan(desired_with(doc), seen, Provenance(commit="1" * 40))
    metrics = ServiceMetrics()
    metrics.observe(made, desired_with(doc))
    [family] = [f for f in metrics.collect() if f.name == "reconcile_verification_result"]
    values = {s.labels["cluster"]: s.value for s in family.samples}
    assert values == {"sn1": 1.0, "sn2": 0.0, "sn3": 1.0}
    metrics.unknown()
    [family] = [f for f in metrics.collect() if f.name == "reconcile_verification_result"]
    assert all(s.value != s.value for s in family.samples)  # NaN while unknown


def desired_for_syntax(prom: FakePrometheus, timeout: float = 2.0) -> Any:
    desired = desired_with(verification("sum(rate(x[1m])"))
    settings = desired.settings.model_copy(update={"verification": VerificationSettings(
        prometheus=PrometheusSource(url=prom.url, timeoutSeconds=timeout))})
    sources = {**desired.sources, "Verification/works": SourceRef(
        path="verifications/checkout.yaml", line=7)}
    return desired.model_copy(update={"settings": settings, "sources": sources})


def test_a_query_prometheus_cannot_parse_is_a_diagnostic_at_its_document(
        prom: FakePrometheus) -> None:
    prom.reply = lambda q: (400, json.dumps({
        "status": "error", "errorType": "bad_data",
        "error": 'invalid parameter "query": 1:15: parse error: unclosed left parenthesis'
    }).encode(), 0.0)
    [problem] = asyncio.run(query_problems(desired_for_syntax(prom), connection()))
    assert (problem.path, problem.line) == ("verifications/checkout.yaml", 7)
    assert problem.field == "checks[0].prometheus.query"
    assert "works/errors" in problem.message and "unclosed left parenthesis" in problem.message


def test_a_hanging_prometheus_says_nothing_about_syntax_within_its_timeout(
        prom: FakePrometheus) -> None:
    prom.reply = lambda q: (200, b"{}", 5.0)
    began = time.monotonic()
    assert asyncio.run(query_problems(desired_for_syntax(prom, 0.5), connection())) == []
    assert time.monotonic() - began < 3.0
