"""``shell.tracing`` without the sandbox: off costs nothing, the OTLP/HTTP exporter posts
to a real local receiver, the endpoint's precedence, a missing extra said plainly, and the
spans apply's events become."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reconciler.core.desired import Tracing
from reconciler.core.events import GatePolled, GateStarted, PostApply, PreApply
from reconciler.core.outcomes import ChangeResult, Outcome
from reconciler.shell import tracing
from tests.notify import receivers
from tests.notify.test_deciding import change, proof

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_tracer() -> Iterator[None]:
    tracing.reset()
    yield
    tracing.reset()


@pytest.mark.integration  # starts a process of its own
def test_off_by_default_and_nothing_imported() -> None:
    code = ("import sys\nfrom reconciler import engine\n"
            "from reconciler.shell import tracing, notifying\n"
            "assert not tracing.enabled()\n"
            "loaded = [m for m in sys.modules if m.startswith(('opentelemetry', 'cloudevents'))]\n"
            "assert not loaded, loaded\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_the_endpoint_flag_wins_over_the_environment_and_the_settings() -> None:
    settings = Tracing.model_validate({"otlpEndpoint": "http://settings:4318"})
    assert tracing.endpoint_of(settings, {}) == "http://settings:4318"
    assert tracing.endpoint_of(settings, {tracing.ENV_OTLP_ENDPOINT: "http://env:4318"}) \
        == "http://env:4318"
    assert tracing.endpoint_of(settings, {tracing.ENV_OTLP_ENDPOINT: ""}) is None  # unset
    tracing.request("http://flag:4318")
    assert tracing.endpoint_of(settings, {tracing.ENV_OTLP_ENDPOINT: "http://env"}) \
        == "http://flag:4318"
    tracing.request("")
    assert tracing.endpoint_of(settings, {}) is None
    assert tracing.endpoint_of(None, {}) is None


def test_spans_are_exported_to_an_otlp_http_collector() -> None:
    collector = receivers.start()
    try:
        base = collector.url.removesuffix("/hook")
        tracing.configure(endpoint=base, service_name="reconcile-test")
        with tracing.root("reconcile plan", **{"reconcile.commit": "a" * 40}), \
                tracing.span("observe"):
            pass
        tracing.shutdown()  # flushes the batch
        [post] = collector.wait_for(1, timeout=15)
        assert post.path == "/v1/traces"
        assert {k.lower(): v for k, v in post.headers.items()}["content-type"] == \
            "application/x-protobuf"
        assert b"reconcile plan" in post.body and b"reconcile-test" in post.body
    finally:
        collector.stop()


def test_a_missing_otlp_extra_is_said_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules,
                        "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(tracing.TracingError, match=r"pip install 'reconcile\[otlp\]'"):
        tracing.configure(endpoint="http://127.0.0.1:4318")


def test_apply_events_become_change_and_poll_spans() -> None:
    exporter = InMemorySpanExporter()
    tracing.configure(exporter=exporter)
    seen: list[object] = []
    c = change("checkout")
    with tracing.root("reconcile apply"):
        hook = tracing.SpanHook(seen.append)
        hook(PreApply(change=c, replay=False))
        with tracing.span("controlplane promoteServiceImageRelease"):
            pass
        hook(PostApply(result=ChangeResult(change=c, outcome=Outcome.APPLIED)))
        hook(GateStarted(services=("checkout",), clusters=("c1", "c2"), attempts=3,
                         interval=0.0))
        with tracing.span("probe c1"):
            pass
        hook(GatePolled(attempt=1, attempts=3, proofs=(proof("checkout", False),)))
        hook(GatePolled(attempt=2, attempts=3, proofs=(proof("checkout"),)))
        hook.close()
    assert len(seen) == 5  # every event still reaches the view
    found = {s.name: s for s in exporter.get_finished_spans()}
    assert set(found) == {"reconcile apply", "change promote checkout",
                          "controlplane promoteServiceImageRelease", "gate", "gate poll 1",
                          "gate poll 2", "probe c1"}

    def parent(name: str) -> str:
        span = found[name]
        assert span.parent is not None
        return next(n for n, s in found.items()
                    if s.context is not None and s.context.span_id == span.parent.span_id)

    assert parent("controlplane promoteServiceImageRelease") == "change promote checkout"
    assert parent("change promote checkout") == "reconcile apply"
    assert parent("probe c1") == "gate poll 1"
    assert parent("gate poll 2") == "gate"
    attributes = found["change promote checkout"].attributes or {}
    assert attributes["reconcile.change.outcome"] == "applied"
    assert attributes["reconcile.digest"] == c.release_after.digest  # type: ignore[union-attr]
    assert (found["gate poll 1"].attributes or {})["reconcile.pending.clusters"] == ("c2",)
