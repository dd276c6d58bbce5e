"""OpenTelemetry traces of plan, apply and watch: one trace per run or watch cycle.

Owns the tracer (OpenTelemetry SDK, set up once per process, never the global provider),
the exporter (OTLP over HTTP when an endpoint is given -- ``--otlp-endpoint`` >
``RECONCILE_OTLP_ENDPOINT`` > ``settings.tracing.otlpEndpoint`` -- off otherwise; tests
install the SDK's in-memory exporter with ``configure``), and every span reconcile makes:

- a root span per run: ``reconcile plan``, ``reconcile apply``, ``reconcile watch cycle``
  (one per resync: the read and the plan; an apply the watcher starts is a trace of its
  own), with ``reconcile.commit``, ``reconcile.environment``,
  ``reconcile.verdict`` (and the plan's change and blocker counts, the exit code of a
  refusal);
- ``reconcile observe``: a read of the live side made outside any run's trace
  (``reconcile status``: one per environment read), so its calls and probes are one trace
  under one root, never a root-less trace each;
- ``plan`` / ``observe`` inside an apply;
- ``controlplane <method>``: every control-plane call (``TracedClient``), with the method
  and whether it was a read;
- ``probe <cluster>``: each cluster's part of each pass over the mesh (``TracedProber``),
  with the cluster id, its address, how many apps answered or were silent, and the
  digests it reported running; it starts with the pass and ends when the cluster's last
  answer came (silent clusters: when the pass ended);
- ``change <action> <service>``: each change sent (from apply's ``PreApply``/``PostApply``
  events), with its idempotency key, digests and outcome; the write's
  ``controlplane`` span is its child;
- ``gate`` and ``gate poll <n>``: the convergence gate and each poll (a poll's span
  covers the interval waited before it), with the services still pending.

The spans of changes and polls are made from apply's typed events (``core.events``), so
the executor and the gate stay as they are; to parent the writes and the probes under
them, the span is made current in the task that emits the event (the executor's
per-service task; the gate's own task) and restored when the matching event, or the
end of the run, comes.

Nothing here costs anything while tracing is off: the OpenTelemetry packages are not
even imported (the SDK takes about half a second to import), and every helper checks
``enabled()`` first. It must not decide anything, print, or fail a run: a span is
observation only.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from pydantic import BaseModel

from reconciler.core.events import (
    Event,
    Finished,
    GatePolled,
    GateStarted,
    Hook,
    PostApply,
    PreApply,
)
from reconciler.core.kinds.create import CreateChange
from reconciler.core.kinds.release import PromoteChange, RollbackChange
from reconciler.core.live import Observation, ObservationKind
from reconciler.core.outcomes import Outcome
from reconciler.core.sanitize import redact, safe
from reconciler.shell.controlplane import ControlPlaneClient
from reconciler.shell.probing import Prober

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

    from reconciler.core.desired import Settings, Tracing
    from reconciler.core.plans import Plan

ENV_OTLP_ENDPOINT = "RECONCILE_OTLP_ENDPOINT"
#: The OTLP/HTTP path of traces, added to an endpoint given without a path.
TRACES_PATH = "/v1/traces"
#: How long the exporter may take per batch (and at exit): traces never hold a run up.
EXPORT_TIMEOUT = 5.0
#: Digests a probe span lists at most (a cluster running 10,000 apps reports many).
MAX_DIGESTS = 20


class TracingError(ValueError):
    """Tracing cannot be set up as asked (the OTLP exporter is not installed)."""


class _State:
    tracer: Tracer | None = None
    provider: TracerProvider | None = None
    #: ``--otlp-endpoint`` as the command was given it (None: not given)
    flag: str | None = None
    configured = False


_state = _State()


def enabled() -> bool:
    return _state.tracer is not None


def request(endpoint: str | None) -> None:
    """The command's ``--otlp-endpoint`` (highest precedence); ``setup`` acts on it."""
    _state.flag = endpoint


def endpoint_of(settings: Tracing | None, env: Mapping[str, str]) -> str | None:
    """flag > ``RECONCILE_OTLP_ENDPOINT`` > ``tracing.otlpEndpoint``; empty: off."""
    for value in (_state.flag, env.get(ENV_OTLP_ENDPOINT)):
        if value is not None:
            return value.strip() or None
    return settings.otlp_endpoint if settings is not None else None


def setup(settings: Settings, env: Mapping[str, str]) -> None:
    """Configure the OTLP exporter once per process when an endpoint is given; a tracer
    already installed (``configure``, e.g. a test's in-memory exporter) is kept."""
    if _state.configured:
        return
    endpoint = endpoint_of(settings.tracing, env)
    if endpoint is None:
        return
    name = settings.tracing.service_name if settings.tracing is not None else "reconcile"
    configure(endpoint=endpoint, service_name=name)


def configure(*, endpoint: str | None = None, exporter: SpanExporter | None = None,
              service_name: str = "reconcile") -> None:
    """Install a tracer: ``exporter`` (spans exported as each ends) or an OTLP/HTTP one to
    ``endpoint`` (batched, in the background, flushed at exit within
    ``EXPORT_TIMEOUT``)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    from reconciler import __version__

    provider = TracerProvider(resource=Resource.create({
        "service.name": service_name, "service.version": __version__}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if endpoint is not None:
        provider.add_span_processor(BatchSpanProcessor(
            _otlp(endpoint), export_timeout_millis=int(EXPORT_TIMEOUT * 1000)))
        atexit.register(shutdown)
    _state.provider = provider
    _state.tracer = provider.get_tracer("reconcile", __version__)
    _state.configured = True


def _otlp(endpoint: str) -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TracingError(
            "--otlp-endpoint needs the OTLP exporter, an optional extra: pip install "
            "'reconcile[otlp]' (opentelemetry-exporter-otlp-proto-http)") from None
    url = endpoint.rstrip("/")
    if url.count("/") <= 2:  # scheme://host[:port] only
        url += TRACES_PATH
    return OTLPSpanExporter(endpoint=url, timeout=EXPORT_TIMEOUT)


def shutdown() -> None:
    """Flush what is batched (bounded) and stop exporting; tracing is off after it."""
    provider = _state.provider
    _state.tracer, _state.provider, _state.configured = None, None, False
    if provider is not None:
        with contextlib.suppress(Exception):
            provider.force_flush(int(EXPORT_TIMEOUT * 1000))
            provider.shutdown()


def reset() -> None:
    """Tests: no tracer, nothing requested."""
    shutdown()
    _state.flag = None


# -- spans ----------------------------------------------------------------------------


def _attributes(values: Mapping[str, object]) -> dict[str, Any]:
    """OpenTelemetry attributes: None left out, strings made safe, sequences as lists."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, str):
            out[key] = safe(value, 1000)
        elif isinstance(value, Iterable):
            out[key] = [safe(v, 200) for v in value]
        else:
            out[key] = safe(value, 1000)
    return out


@contextlib.contextmanager
def span(name: str, **attributes: object) -> Iterator[Span | None]:
    """A child of the current span (a new trace when there is none); None when off."""
    tracer = _state.tracer
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(name, attributes=_attributes(attributes)) as current:
        yield current


@contextlib.contextmanager
def root(name: str, **attributes: object) -> Iterator[Span | None]:
    """A new trace whatever is current (a watcher's apply is not its cycle's child: it
    is linked to it)."""
    tracer = _state.tracer
    if tracer is None:
        yield None
        return
    from opentelemetry import context, trace

    current = trace.get_current_span()
    links = [trace.Link(current.get_span_context())] \
        if current.get_span_context().is_valid else []
    with tracer.start_as_current_span(name, context=context.Context(), links=links,
                                      attributes=_attributes(attributes)) as top:
        yield top


def annotate(**attributes: object) -> None:
    """Set attributes on the current span (nothing when off)."""
    if _state.tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(_attributes(attributes))


def note_plan(plan: Plan, target: Span | None = None) -> None:
    """The plan's verdict and counts on ``target`` (the current span by default)."""
    if _state.tracer is None:
        return
    values = _attributes({
        "reconcile.commit": plan.commit, "reconcile.verdict": plan.verdict.value,
        "reconcile.changes": len(plan.changes), "reconcile.blockers": len(plan.blockers),
        "reconcile.drift": len(plan.drift), "reconcile.plan.fingerprint": plan.fingerprint,
        "reconcile.expected_clusters": plan.expected_clusters,
        "reconcile.control_plane": redact(plan.control_plane_url)})
    if target is None:
        from opentelemetry import trace

        target = trace.get_current_span()
    target.set_attributes(values)


def environment(settings: Settings, gateway: str) -> str:
    """The environment's name in traces, as in notifications: ``notifications.environment``,
    else the mesh gateway."""
    named = settings.notifications.environment if settings.notifications else None
    return named or gateway


def _error(target: Span, exc: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    code = getattr(exc, "code", None)
    if code is not None:
        target.set_attribute("reconcile.exit_code", int(code))
    target.set_status(Status(StatusCode.ERROR, safe(exc, 300)))


# -- the clients, traced ----------------------------------------------------------------


_W = TypeVar("_W", bound=BaseModel)


class TracedClient(ControlPlaneClient):
    """The control-plane client with a span per call (``controlplane <method>``)."""

    async def call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        if _state.tracer is None:
            return await super().call(method, request)
        with span(f"controlplane {method}", **{"rpc.method": method,
                                               "reconcile.controlplane.read": False}):
            return await super().call(method, request)

    async def read(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        if _state.tracer is None:
            return await super().read(method, request)
        with span(f"controlplane {method}", **{"rpc.method": method,
                                               "reconcile.controlplane.read": True}):
            return await super().read(method, request)

    async def read_as(self, method: str, request: dict[str, Any], shape: type[_W]) -> _W:
        if _state.tracer is None:
            return await super().read_as(method, request, shape)
        with span(f"controlplane {method}", **{"rpc.method": method,
                                               "reconcile.controlplane.read": True}):
            return await super().read_as(method, request, shape)


class TracedProber(Prober):
    """The prober with a span per cluster of each pass (``probe <cluster>``)."""

    async def observe_apps(self, app_ids: Iterable[str], **kwargs: Any,
                           ) -> dict[str, tuple[Observation, ...]]:
        tracer = _state.tracer
        if tracer is None:
            return await super().observe_apps(app_ids, **kwargs)
        started = time.time_ns()
        found = await super().observe_apps(app_ids, **kwargs)
        ended = time.time_ns()
        by_cluster: dict[str, list[Observation]] = {}
        for per_app in found.values():
            for o in per_app:
                by_cluster.setdefault(o.cluster_id, []).append(o)
        for cluster, observations in sorted(by_cluster.items()):
            said = [o.observed_at for o in observations
                    if o.observed_at is not None and o.kind is not ObservationKind.SILENT]
            end = min(ended, max(said) * 1_000_000) if said else ended
            digests = sorted({o.runtime.resolved_digest for o in observations
                              if o.runtime is not None and o.runtime.resolved_digest})
            silent = [o for o in observations if o.kind is ObservationKind.SILENT]
            one = tracer.start_span(f"probe {cluster}", start_time=started,
                                    attributes=_attributes({
                "reconcile.cluster.id": cluster,
                "reconcile.cluster.address": next((o.address for o in observations
                                                   if o.address), None),
                "reconcile.apps": len(observations),
                "reconcile.apps.answered": sum(
                    1 for o in observations if o.kind is ObservationKind.ANSWERED),
                "reconcile.apps.silent": len(silent),
                "reconcile.silent.reason": silent[0].reason if silent else None,
                "reconcile.digests": digests[:MAX_DIGESTS]}))
            if silent and len(silent) == len(observations):
                from opentelemetry.trace import Status, StatusCode

                one.set_status(Status(StatusCode.ERROR, safe(silent[0].reason or "silent")))
            one.end(end_time=max(end, started))
        return found


# -- apply's events as spans -------------------------------------------------------------


class SpanHook:
    """Forwards apply's events to ``hook`` and makes the spans of changes and polls."""

    def __init__(self, hook: Hook) -> None:
        self.hook = hook
        #: idempotency key -> (span, context token) of the change being sent
        self.changes: dict[str, tuple[Span, Any]] = {}
        self.gate: tuple[Span, Any] | None = None
        self.poll: tuple[Span, Any] | None = None

    def __call__(self, event: Event) -> None:
        with contextlib.suppress(Exception):  # a span never breaks an apply
            self._record(event)
        self.hook(event)

    def _record(self, event: Event) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Status, StatusCode

        tracer = _state.tracer
        if tracer is None:
            return
        if isinstance(event, PreApply):
            c = event.change
            after = c.release_after.digest if isinstance(
                c, PromoteChange | RollbackChange | CreateChange) else None
            before = c.release_before.digest if isinstance(
                c, PromoteChange | RollbackChange) and c.release_before else None
            one = tracer.start_span(f"change {c.action.value} {c.service}", attributes=_attributes({
                "reconcile.service": c.service, "reconcile.service_id": c.service_id,
                "reconcile.app_id": c.app_id, "reconcile.change.action": c.action.value,
                "reconcile.change.key": c.idempotency_key, "reconcile.digest": after,
                "reconcile.digest.before": before, "reconcile.change.replay": event.replay}))
            token = context.attach(trace.set_span_in_context(one))
            self.changes[c.idempotency_key] = (one, token)
        elif isinstance(event, PostApply):
            r = event.result
            started = self.changes.pop(r.change.idempotency_key, None)
            if started is None:  # already live: nothing was sent, said as a span anyway
                one = tracer.start_span(f"change {r.change.action.value} {r.change.service}",
                                        attributes=_attributes({
                    "reconcile.service": r.change.service,
                    "reconcile.change.key": r.change.idempotency_key}))
            else:
                one, token = started
                _detach(token)
            one.set_attribute("reconcile.change.outcome", r.outcome.value)
            if r.detail:
                one.set_attribute("reconcile.change.detail", safe(r.detail, 500))
            if r.outcome not in (Outcome.APPLIED, Outcome.ALREADY_APPLIED):
                one.set_status(Status(StatusCode.ERROR, r.outcome.value))
            one.end()
        elif isinstance(event, GateStarted):
            gate = tracer.start_span("gate", attributes=_attributes({
                "reconcile.services": event.services, "reconcile.clusters": event.clusters,
                "reconcile.gate.attempts": event.attempts,
                "reconcile.gate.interval": event.interval}))
            self.gate = (gate, context.attach(trace.set_span_in_context(gate)))
            self._next_poll(1)
        elif isinstance(event, GatePolled):
            if self.poll is not None:
                poll, token = self.poll
                self.poll = None
                _detach(token)
                pending = [p for p in event.proofs if not p.converged]
                poll.set_attributes(_attributes({
                    "reconcile.gate.attempt": event.attempt,
                    "reconcile.pending": [p.service for p in pending],
                    "reconcile.pending.clusters": sorted({c.cluster for p in pending
                                                          for c in p.pending()})}))
                poll.end()
            if event.attempt < event.attempts and not all(
                    p.converged or p.terminal for p in event.proofs):
                self._next_poll(event.attempt + 1)
        elif isinstance(event, Finished):
            self.close()

    def _next_poll(self, attempt: int) -> None:
        from opentelemetry import context, trace

        assert _state.tracer is not None
        poll = _state.tracer.start_span(f"gate poll {attempt}",
                                        attributes={"reconcile.gate.attempt": attempt})
        self.poll = (poll, context.attach(trace.set_span_in_context(poll)))

    def close(self) -> None:
        """End whatever is still open (the run ended early, or the deadline cut it)."""
        for one, token in reversed(list(self.changes.values())):
            _detach(token)
            one.end()
        self.changes.clear()
        for held in (self.poll, self.gate):
            if held is not None:
                _detach(held[1])
                held[0].end()
        self.poll = self.gate = None


def _detach(token: object) -> None:
    from opentelemetry import context

    # A token made in another task's context cannot be reset here: OpenTelemetry logs
    # that and goes on; the span still ends.
    with contextlib.suppress(Exception):
        context.detach(token)  # type: ignore[arg-type]


# -- decorators the engine puts on its steps ---------------------------------------------

P = ParamSpec("P")
R = TypeVar("R")
#: An async step of the engine (a method whose signature the decorator keeps).
Step = Callable[P, Coroutine[Any, Any, R]]


def traced_apply(method: Step[P, R]) -> Step[P, R]:
    """``Reconciler.apply`` as the root span ``reconcile apply``: the commit and the
    environment at the start, the verdict (``note_plan``, called by the engine once the
    fresh plan is made) and the outcome at the end; apply's events become spans."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if _state.tracer is None:
            return await method(*args, **kwargs)
        self, desired, provenance = (cast(Any, a) for a in args[:3])
        with root("reconcile apply", **{
                "reconcile.commit": provenance.commit,
                "reconcile.environment": environment(desired.settings,
                                                     self.connection.gateway),
                "reconcile.saved_plan": kwargs.get("saved") is not None,
                "reconcile.only": sorted(cast(Iterable[str], kwargs.get("only") or ()))}) as top:
            recorder = SpanHook(cast(Hook, kwargs["hook"]))
            kwargs["hook"] = recorder
            try:
                run = await method(*args, **kwargs)
            except BaseException as exc:
                if top is not None:
                    _error(top, exc)
                raise
            finally:
                recorder.close()
            report = getattr(run, "report", None)
            if top is not None and report is not None:
                gate = report.gate
                top.set_attributes(_attributes({
                    "reconcile.sent": len(report.results),
                    "reconcile.failures": len(report.failures()),
                    "reconcile.converged": None if gate is None else gate.converged,
                    "reconcile.expired": report.expired}))
            return run

    return wrapper


def traced_plan(method: Step[P, R]) -> Step[P, R]:
    """``Reconciler.plan``: the root span ``reconcile plan`` (or a ``plan`` child inside
    an apply), with the commit, the environment and the verdict."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if _state.tracer is None:
            return await method(*args, **kwargs)
        from opentelemetry import trace

        self, desired, provenance = (cast(Any, a) for a in args[:3])
        inside = trace.get_current_span().get_span_context().is_valid
        opened = span if inside else root
        with opened("plan" if inside else "reconcile plan", **{
                "reconcile.commit": provenance.commit,
                "reconcile.environment": environment(desired.settings,
                                                     self.connection.gateway)}) as current:
            result = await method(*args, **kwargs)
            made = result[0] if isinstance(result, tuple) else result
            if current is not None and hasattr(made, "verdict"):
                note_plan(cast(Any, made), current)
            return result

    return wrapper


def traced_observe(method: Step[P, R]) -> Step[P, R]:
    """``Reconciler.observe``: an ``observe`` span inside a trace (the reads and probes
    are its children); outside one (``reconcile status``), the root span ``reconcile
    observe``, so the read's calls and probes are one trace, not one each."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if _state.tracer is None:
            return await method(*args, **kwargs)
        from opentelemetry import trace

        self, desired = (cast(Any, a) for a in args[:2])
        gateway = self.connection.gateway
        if trace.get_current_span().get_span_context().is_valid:
            with span("observe", **{"reconcile.gateway": gateway}):
                return await method(*args, **kwargs)
        with root("reconcile observe", **{
                "reconcile.gateway": gateway,
                "reconcile.environment": environment(desired.settings, gateway)}) as top:
            try:
                return await method(*args, **kwargs)
            except BaseException as exc:
                if top is not None:
                    _error(top, exc)
                raise

    return wrapper


def watch_cycle(method: Step[P, R]) -> Step[P, R]:
    """``WatchSteps.observe``: opens the cycle's root span ``reconcile watch cycle`` (the
    read runs inside it) and leaves it open for ``watch_plan`` to close."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        self, desired = (cast(Any, a) for a in args[:2])
        _end_cycle(self)
        if not _state.configured:
            # The first read builds the reconciler, which sets tracing up from the
            # settings: set up here first, or the first cycle's calls and probes are each
            # a root-less trace. Whatever fails is said by the reconciler, raised there.
            with contextlib.suppress(Exception):
                setup(desired.settings, getattr(self, "env", None) or {})
        tracer = _state.tracer
        if tracer is None:
            return await method(*args, **kwargs)
        from opentelemetry import context, trace

        cycle = tracer.start_span("reconcile watch cycle", context=context.Context(),
                                  attributes=_attributes({
            "reconcile.environment": environment(desired.settings,
                                                 desired.settings.mesh.gateway),
            "reconcile.watch.applying": bool(getattr(self, "applying", False))}))
        self._trace_cycle = cycle
        try:
            with trace.use_span(cycle, end_on_exit=False):
                return await method(*args, **kwargs)
        except BaseException as exc:
            _error(cycle, exc)
            _end_cycle(self)
            raise

    return wrapper


def watch_plan(method: Callable[P, Plan]) -> Callable[P, Plan]:
    """``WatchSteps.plan``: the plan's commit and verdict on the open cycle, which ends
    here (a plan made on a file event, with no read, is a short trace of its own)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Plan:
        tracer = _state.tracer
        if tracer is None:
            return method(*args, **kwargs)
        from opentelemetry import trace

        self, desired, _, provenance = (cast(Any, a) for a in args[:4])
        cycle = getattr(self, "_trace_cycle", None)
        if cycle is None:
            cycle = tracer.start_span("reconcile watch cycle", attributes=_attributes({
                "reconcile.environment": environment(desired.settings,
                                                     desired.settings.mesh.gateway),
                "reconcile.watch.trigger": "files"}))
            self._trace_cycle = cycle
        try:
            with trace.use_span(cycle, end_on_exit=False), \
                    span("plan", **{"reconcile.commit": provenance.commit}) as planning:
                made = method(*args, **kwargs)
                if planning is not None:
                    note_plan(made, planning)
            note_plan(made, cycle)
            return made
        finally:
            _end_cycle(self)

    return wrapper


def _end_cycle(owner: Any) -> None:
    cycle = getattr(owner, "_trace_cycle", None)
    if cycle is not None:
        owner._trace_cycle = None
        cycle.end()
