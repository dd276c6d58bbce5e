"""Traces of real runs against the real sandbox, read from the OpenTelemetry SDK's
in-memory exporter: one trace per apply (per plan, per watch cycle), one root, a span per
cluster probe and per change, with the commit, the cluster ids and the digests."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reconciler import engine
from reconciler.core.events import Event
from reconciler.shell import tracing
from reconciler.shell.endpoints import Overrides
from tests.e2e_repo import Repo

pytestmark = pytest.mark.integration


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.reset()
    tracing.configure(exporter=exporter)
    yield exporter
    tracing.reset()


def head(repo: Repo) -> str:
    return subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def children(all_spans: tuple[ReadableSpan, ...], parent: ReadableSpan,
             prefix: str = "") -> list[ReadableSpan]:
    assert parent.context is not None
    return [s for s in all_spans if s.parent is not None
            and s.parent.span_id == parent.context.span_id and s.name.startswith(prefix)]


def attr(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


def test_the_trace_of_an_apply_has_one_root_a_span_per_probe_and_per_change(
        repo: Repo, spans: InMemorySpanExporter) -> None:
    env = repo.env()
    events: list[Event] = []
    run = asyncio.run(engine.apply_async(repo.path, overrides=Overrides.from_env(env), env=env,
                                         hook=events.append))
    assert run.report.gate is not None and run.report.gate.converged
    found = spans.get_finished_spans()
    roots = [s for s in found if s.parent is None]
    assert [r.name for r in roots] == ["reconcile apply"]
    [top] = roots
    assert top.context is not None
    assert {s.context.trace_id for s in found if s.context} == {top.context.trace_id}
    assert attr(top, "reconcile.commit") == head(repo)
    assert attr(top, "reconcile.environment") == run.plan.gateway  # no name given
    assert attr(top, "reconcile.verdict") == "go"
    assert attr(top, "reconcile.changes") == len(run.plan.changes)
    assert attr(top, "reconcile.converged") is True

    # The plan's read: control-plane calls and one probe span per expected cluster.
    [planning] = children(found, top, "plan")
    [observe] = children(found, planning, "observe")
    probes = children(found, observe, "probe ")
    assert sorted(attr(p, "reconcile.cluster.id") for p in probes) == \
        sorted(run.plan.expected_clusters)
    assert all(attr(p, "reconcile.apps") > 0 for p in probes)
    running = {d for p in probes for d in attr(p, "reconcile.digests") or ()}
    assert {e.current_digest for e in run.plan.evidence if e.current_digest} <= running
    assert [s for s in found if s.name.startswith("controlplane ")
            and attr(s, "reconcile.controlplane.read") and _under(found, s, observe)]

    # One span per change sent, under the root, with its key and digests; the write's
    # control-plane call is its child.
    changes = children(found, top, "change ")
    assert sorted(attr(c, "reconcile.change.key") for c in changes) == \
        sorted(r.change.idempotency_key for r in run.report.results)
    for result in run.report.results:
        [span] = [c for c in changes
                  if attr(c, "reconcile.change.key") == result.change.idempotency_key]
        assert attr(span, "reconcile.change.outcome") == result.outcome.value
        after = getattr(result.change, "release_after", None)  # a release or a creation
        assert attr(span, "reconcile.digest") == (after.digest if after else None)
        assert [w.name for w in children(found, span, "controlplane ")], span.name

    # The gate and each of its polls; each poll probes every cluster again.
    [gate] = children(found, top, "gate")
    polls = children(found, gate, "gate poll ")
    assert len(polls) == run.report.gate.attempts
    for poll in polls:
        assert sorted(attr(p, "reconcile.cluster.id")
                      for p in children(found, poll, "probe ")) == sorted(
            run.plan.expected_clusters)
    assert attr(polls[-1], "reconcile.pending") in (None, [], ())
    # Every control-plane call has its place: the plan's read, a change, or a gate poll.
    calls = [s for s in found if s.name.startswith("controlplane ")]
    assert all(_under(found, s, planning) or _under(found, s, gate)
               or any(_under(found, s, c) for c in changes) for s in calls), [
        s.name for s in calls]


def test_a_plan_is_one_trace_with_its_verdict(repo: Repo,
                                              spans: InMemorySpanExporter) -> None:
    env = repo.env()
    made = engine.plan(repo.path, overrides=Overrides.from_env(env), env=env)
    found = spans.get_finished_spans()
    [top] = [s for s in found if s.parent is None]
    assert top.name == "reconcile plan"
    assert attr(top, "reconcile.verdict") == made.verdict.value
    assert attr(top, "reconcile.commit") == made.commit == head(repo)
    [observe] = children(found, top, "observe")
    assert len(children(found, observe, "probe ")) == len(made.expected_clusters)


def test_a_watch_cycle_is_one_trace_from_the_read_to_the_plan(
        repo: Repo, spans: InMemorySpanExporter) -> None:
    env = repo.env()
    steps = engine.WatchSteps(repo.path, overrides=Overrides.from_env(env), env=env)
    loaded = steps.load()
    assert loaded.state is not None

    async def cycle() -> None:
        try:
            for _ in range(2):
                snapshot = await steps.observe(loaded.state)  # type: ignore[arg-type]
                steps.plan(loaded.state, snapshot, loaded.provenance)  # type: ignore[arg-type]
        finally:
            await steps.close()

    asyncio.run(cycle())
    found = spans.get_finished_spans()
    roots = [s for s in found if s.parent is None]
    assert [r.name for r in roots] == ["reconcile watch cycle"] * 2
    assert len({r.context.trace_id for r in roots if r.context}) == 2
    for top in roots:
        assert attr(top, "reconcile.commit") == head(repo)
        assert attr(top, "reconcile.verdict") == "go"
        [observe] = children(found, top, "observe")
        assert children(found, observe, "probe ")
        assert [p.name for p in children(found, top, "plan")] == ["plan"]


def _under(found: tuple[ReadableSpan, ...], span: ReadableSpan, ancestor: ReadableSpan) -> bool:
    by_id = {s.context.span_id: s for s in found if s.context is not None}
    current: ReadableSpan | None = span
    while current is not None and current.parent is not None:
        if ancestor.context is not None and current.parent.span_id == ancestor.context.span_id:
            return True
        current = by_id.get(current.parent.span_id)
    return False


def _exported(collector: Any) -> list[Any]:
    """Every span a real OTLP/HTTP exporter posted to ``collector`` (protobuf decoded)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    found = []
    for post in collector.ok():
        request = ExportTraceServiceRequest()
        request.ParseFromString(post.body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                found.extend(scope.spans)
    return found


def _traces(found: list[Any]) -> dict[bytes, list[Any]]:
    by_trace: dict[bytes, list[Any]] = {}
    for one in found:
        by_trace.setdefault(one.trace_id, []).append(one)
    return by_trace


def test_status_is_one_trace_under_one_root_as_exported(repo: Repo) -> None:
    """``reconcile status`` with an OTLP endpoint, as a user runs it (tracing set up from
    the environment, exported over HTTP to a real local collector): its reads and probes
    are one trace under one root, never a root-less trace per call."""
    from tests.notify import receivers

    collector = receivers.start()
    try:
        done = repo.run("status", str(repo.path), RECONCILE_OTLP_ENDPOINT=
                        collector.url.removesuffix("/hook"))
        assert done.code == 0, done.err
        found = _exported(collector)
    finally:
        collector.stop()
    assert found, "nothing exported"
    traces = _traces(found)
    assert len(traces) == 1, {t.hex()[:8]: [s.name for s in spans]
                              for t, spans in traces.items()}
    [spans] = traces.values()
    roots = [s for s in spans if not s.parent_span_id]
    assert [r.name for r in roots] == ["reconcile observe"]
    assert any(s.name.startswith("probe ") for s in spans)
    assert any(s.name.startswith("controlplane ") for s in spans)


def test_a_watchers_first_read_is_one_trace_under_its_cycle(repo: Repo) -> None:
    """The first cycle of a watcher whose tracing is set up from the settings and the
    environment (not installed beforehand): one trace, rooted at ``reconcile watch
    cycle``, like every later cycle."""
    from tests.notify import receivers

    collector = receivers.start()
    tracing.reset()
    try:
        env = repo.env(RECONCILE_OTLP_ENDPOINT=collector.url.removesuffix("/hook"))
        steps = engine.WatchSteps(repo.path, overrides=Overrides.from_env(env), env=env)
        loaded = steps.load()
        assert loaded.state is not None and not tracing.enabled()

        async def cycle() -> None:
            try:
                snapshot = await steps.observe(loaded.state)  # type: ignore[arg-type]
                steps.plan(loaded.state, snapshot, loaded.provenance)  # type: ignore[arg-type]
            finally:
                await steps.close()

        asyncio.run(cycle())
        tracing.shutdown()  # flushes the batch
        found = _exported(collector)
    finally:
        tracing.reset()
        collector.stop()
    traces = _traces(found)
    assert len(traces) == 1, {t.hex()[:8]: [s.name for s in spans]
                              for t, spans in traces.items()}
    [spans] = traces.values()
    assert [s.name for s in spans if not s.parent_span_id] == ["reconcile watch cycle"]
    assert any(s.name.startswith("probe ") for s in spans)
