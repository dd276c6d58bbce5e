"""``reconcile watch``: continuous reconciliation of a checked-out config repo.

Owns the loop and its timing: file events (watchfiles) debounced into one reconcile per
burst, a ``HEAD`` poll (a commit of already-saved files moves no file), a periodic resync
of the live side, the last good desired state kept across invalid edits (reported once
per broken revision), the backoff after a failed apply, a wake-up when a promotion held
by the environment's rules becomes eligible (``watch --env``; and the proposals of
``--promote-from``, said and counted here, made by the steps), and a clean stop on
SIGINT/SIGTERM. Each plan is diffed against the previous one and only the difference is
reported.

Must not decide what to change (``core.planning``) nor how to apply (``engine``); it
only decides *when*. Reports go through ``Log`` (levels, RFC 3339 UTC timestamps); metrics
through ``Metrics``; readiness through ``health.Readiness`` (served by ``shell.health``
beside the metrics, with ``/healthz``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from watchfiles import Change, awatch

from reconciler.core import outcomes, plandiff, proposals
from reconciler.core import status as service_status
from reconciler.core.desired import DesiredState
from reconciler.core.events import Event, Hook
from reconciler.core.live import LiveSnapshot
from reconciler.core.outcomes import ApplyReport, ErrorKind, Outcome, RunOutcome
from reconciler.core.planning import Provenance
from reconciler.core.plans import Plan, Verdict
from reconciler.core.sanitize import redact, safe
from reconciler.core.webview import LiveRead, View, pending_of
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.render import revertview, watchview
from reconciler.shell.control import Control
from reconciler.shell.controlplane import ControlPlaneError
from reconciler.shell.endpoints import ConfigError
from reconciler.shell.gitrepo import GitError
from reconciler.shell.health import Endpoint, Readiness, serve
from reconciler.shell.journal import JournalError
from reconciler.shell.servicemetrics import ServiceMetrics
from reconciler.shell.webserve import WebView

if TYPE_CHECKING:  # annotations only: githubkit loads only when a pull request is opened
    from reconciler.shell.environments import Selected
    from reconciler.shell.pullrequests import PullRequest


class Loaded(Protocol):
    @property
    def state(self) -> DesiredState | None: ...

    @property
    def problems(self) -> tuple[str, ...]: ...

    @property
    def provenance(self) -> Provenance: ...


class ApplyResult(Protocol):
    @property
    def report(self) -> ApplyReport: ...

    @property
    def reverted(self) -> revertview.Reverted | None:
        """Issue 20 (``--on-gate-failure revert``): the revert made after the gate failed
        (None: none was asked for, needed or made)."""
        ...

    @property
    def revert_error(self) -> str | None:
        """Why no revert was made (or, by a sharded watcher, not of every service)."""
        ...

    def revert_proposed(self) -> bool:
        """The revert is a pull request not yet merged: the failed commit is still HEAD."""
        ...


class Proposed(Protocol):
    """One promotion ``watch --promote-from`` proposed, found open, or said (``propose``)."""

    @property
    def decision(self) -> proposals.Decision: ...

    @property
    def pull(self) -> PullRequest | None: ...

    @property
    def error(self) -> str | None: ...

    @property
    def news(self) -> bool: ...

    @property
    def note(self) -> str | None: ...

    @property
    def closed(self) -> int | None: ...


class ProposalCount(Protocol):
    @property
    def failures(self) -> int: ...


class Steps(Protocol):
    """The engine's side of watching: every *what* (``engine.WatchSteps``). The watcher
    decides only *when*: file events, HEAD polling, debounce, resync, backoff."""

    def head(self) -> Provenance: ...

    def load(self) -> Loaded: ...

    async def observe(self, desired: DesiredState) -> LiveSnapshot: ...

    def plan(self, desired: DesiredState, snapshot: LiveSnapshot,
             provenance: Provenance, *, max_age: float | None = None) -> Plan: ...

    async def apply(self, hook: Hook) -> ApplyResult: ...

    async def close(self) -> None: ...

    @property
    def eligible_at(self) -> int | None:
        """``watch --env``: when a promotion the last plan holds becomes eligible (epoch
        ms; None: none is held with a time)."""
        ...

    @property
    def stage(self) -> Selected | None:
        """``watch --env``: the environment watched (None: no pipeline)."""
        ...

    @property
    def proposer(self) -> ProposalCount | None:
        """``watch --promote-from``: the proposer, counting its failures (None: not asked)."""
        ...

    async def propose(self) -> Sequence[Proposed]:
        """``watch --promote-from``: what became eligible proposed (() when not asked)."""
        ...

    def revert_pending(self, commit: str) -> str | None:
        """The pull request ``commit``'s way back is proposed in, as the journal knows it."""
        ...


LEVELS: dict[str, int] = {"debug": 10, "info": 20, "warning": 30, "error": 40}

#: Seconds after a promotion's eligible time the watcher looks again: the soak is measured
#: against the control plane's clock, and a look a moment early only says "waiting" again.
WAKE_MARGIN = 0.5

#: The level of each event unless the caller says otherwise (default: info).
EVENT_LEVELS: dict[str, str] = {
    "invalid": "warning", "backoff": "warning", "apply-abandoned": "warning",
    "only-unknown": "warning", "unready": "warning",
    "live-unreadable": "error", "apply-failed": "error", "apply-refused": "error",
    "promotion-failed": "error",
}


def rfc3339(ts: float) -> str:
    """UTC, milliseconds, ``Z``: ``2026-11-30T20:41:06.123Z``."""
    ms = int(ts * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


class Log:
    """One event per line: human text, or JSON objects with ``--log-format json``. Each
    line has an RFC 3339 UTC timestamp (``ts``) and a level; events below ``level`` are
    not written."""

    def __init__(self, fmt: str = "text", stream: TextIO | None = None,
                 level: str = "info", clock: Callable[[], float] = time.time) -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown log level {level!r}; one of: {', '.join(LEVELS)}")
        self.fmt = fmt
        self.stream = stream or sys.stdout
        self.level = level
        self.clock = clock

    def enabled(self, level: str) -> bool:
        return LEVELS[level] >= LEVELS[self.level]

    def event(self, event: str, message: str, *, level: str | None = None,
              **fields: object) -> None:
        level = level or EVENT_LEVELS.get(event, "info")
        if not self.enabled(level):
            return
        ts = rfc3339(self.clock())
        if self.fmt == "json":
            record = {**fields, "ts": ts, "level": level, "event": event, "message": message}
            line = json.dumps(record, sort_keys=True, default=str)
        else:
            line = f"{ts} {level} {event}: {message}"
            extra = fields.get("lines")
            if isinstance(extra, list | tuple):
                line += "".join(f"\n    {x}" for x in extra)
        self.stream.write(redact(line) + "\n")  # a log line never carries a secret
        self.stream.flush()


class LogHandler(logging.Handler):
    """The records of the ``reconcile`` loggers (``reconcile.notify``: a delivery given up,
    a sink left out) written as the watcher's own events, so ``--log-format json`` has
    no plain-text line beside them. A record's ``event`` (its ``extra``) names the event,
    its ``fields`` become the event's fields."""

    def __init__(self, log: Log) -> None:
        super().__init__()
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            area = record.name.rsplit(".", 1)[-1]
            event = str(getattr(record, "event", area))
            message = record.getMessage().removeprefix(f"{area}: ")
            fields = getattr(record, "fields", None)
            level = ("error" if record.levelno >= logging.ERROR else
                     "warning" if record.levelno >= logging.WARNING else
                     "info" if record.levelno >= logging.INFO else "debug")
            self.log.event(event, message, level=level,
                           **(fields if isinstance(fields, dict) else {}))
        except Exception:  # a log line must never stop the watcher
            self.handleError(record)


@contextlib.contextmanager
def logging_to(log: Log) -> Iterator[None]:
    """Route the ``reconcile`` loggers through ``log`` while the block runs."""
    logger = logging.getLogger("reconcile")
    handler = LogHandler(log)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


#: Error kinds counted by ``reconcile_errors_total`` (each starts at 0).
ERROR_KINDS = tuple(ErrorKind)
REFUSALS = frozenset({Exit.REFUSED_NO_GO, Exit.REFUSED_STALE, Exit.REFUSED_COMMIT,
                      Exit.REFUSED_EVIDENCE, Exit.REFUSED_MISMATCH, Exit.DECLINED})


def error_kind(exc: BaseException) -> ErrorKind:
    """What kind of failure an ``EngineError`` is, from its code and its cause."""
    if isinstance(exc, EngineError) and exc.code in REFUSALS:
        return ErrorKind.APPLY_REFUSED
    cause = exc.__cause__
    for kind, types in ((ErrorKind.CONTROL_PLANE, ControlPlaneError),
                        (ErrorKind.CONFIG, ConfigError), (ErrorKind.GIT, GitError),
                        (ErrorKind.JOURNAL, JournalError)):
        if isinstance(cause, types) or isinstance(exc, types):
            return kind
    return ErrorKind.OTHER


class Metrics:
    """The Prometheus registry, served with ``/healthz`` and ``/readyz`` on one port
    (loopback unless ``addr`` says otherwise).

    Unknown is not 0: the gauges that describe the live side through the last plan
    (services not proven converged, drift, blockers, silent clusters, changes) are NaN --
    the changes' samples removed -- before the first successful read and whenever a read
    fails, never the last plan's numbers. ``reconcile_live_read_ok`` says which: 1 after
    a successful read, 0 before the first and after a failed one. A NaN compares false,
    so an alert must ask both (docs: README "Running it as a service"):
    ``reconcile_services_not_proven_converged > 0 or reconcile_live_read_ok == 0``.
    """

    def __init__(self, port: int, addr: str = "127.0.0.1",
                 readiness: Readiness | None = None, control: Control | None = None,
                 web: WebView | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.readiness = readiness or Readiness()
        self.control = control
        self.registry = registry = CollectorRegistry()
        self.verdict = Gauge("reconcile_plan_verdict", "1 for the last plan's verdict; "
                             "unknown while the live side cannot be read",
                             ["verdict"], registry=registry)
        self.changes = Gauge("reconcile_plan_changes", "changes in the last plan",
                             ["action"], registry=registry)
        self.blockers = Gauge("reconcile_plan_blockers", "blockers in the last plan",
                              registry=registry)
        self.drift = Gauge("reconcile_plan_drift", "drift items in the last plan",
                           registry=registry)
        self.silent = Gauge("reconcile_silent_clusters",
                            "expected clusters silent for at least one service",
                            registry=registry)
        self.last_apply = Gauge("reconcile_last_successful_apply_timestamp_seconds",
                                "when an apply last converged", registry=registry)
        self.unproven = Gauge("reconcile_services_not_proven_converged",
                              "managed services the judge does not prove converged; NaN "
                              "while the live side is unread (see reconcile_live_read_ok)",
                              registry=registry)
        self.read_ok = Gauge("reconcile_live_read_ok",
                             "1 when the last read of the live side succeeded; 0 before the "
                             "first and after a failed one (the plan gauges are then NaN)",
                             registry=registry)
        self.cycles = Counter("reconcile_watch_cycles", "plans made by the watcher",
                              registry=registry)
        self.last_observation = Gauge(
            "reconcile_last_successful_observation_timestamp_seconds",
            "when the live side was last read successfully (0: never)", registry=registry)
        age = Gauge("reconcile_last_successful_observation_age_seconds",
                    "seconds since the live side was last read successfully (+Inf: never)",
                    registry=registry)
        age.set_function(self._age)
        ready = Gauge("reconcile_ready", "1 when /readyz answers 200", registry=registry)
        ready.set_function(lambda: 1.0 if self.readiness.state()[0] else 0.0)
        self.errors = Counter("reconcile_errors", "failures by kind", ["kind"],
                              registry=registry)
        self.observations = Counter(
            "reconcile_observations",
            "per-service observations of each expected cluster, by outcome, at each resync",
            ["cluster", "outcome"], registry=registry)
        self.gate = Counter("reconcile_gate_results", "convergence gate results",
                            ["result"], registry=registry)
        self.applies = Counter("reconcile_applies", "applies by outcome", ["outcome"],
                               registry=registry)
        self.change_outcomes = Counter("reconcile_change_outcomes",
                                       "changes sent by apply, by outcome", ["outcome"],
                                       registry=registry)
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        for result in outcomes.GATE_RESULTS:
            self.gate.labels(result.value)
        for outcome in APPLY_OUTCOMES:
            self.applies.labels(outcome)
        for change_outcome in Outcome:
            self.change_outcomes.labels(change_outcome.value)
        suspended = Gauge("reconcile_suspended", "1 while the watcher is suspended (POST "
                          "/suspend): nothing is observed, planned or applied",
                          registry=registry)
        suspended.set_function(lambda: 1.0 if control is not None and control.suspended
                               else 0.0)
        self.services = ServiceMetrics()  # per service, and the commit info
        registry.register(self.services)
        self._set_verdict(None)
        self._unknown()
        self.endpoint: Endpoint = serve(addr, port, registry, self.readiness, control, web)

    def _unknown(self) -> None:
        """The live side is unread: its plan gauges say NaN, never a stale number."""
        self.read_ok.set(0)
        for gauge in (self.unproven, self.drift, self.blockers, self.silent):
            gauge.set(float("nan"))
        self.changes.clear()
        self.services.unknown()

    def _age(self) -> float:
        last = self.readiness.last_success
        return float("inf") if last is None else max(0.0, time.time() - last)

    def _set_verdict(self, verdict: Verdict | None) -> None:
        for value in Verdict:
            self.verdict.labels(value.value).set(1 if verdict is value else 0)
        self.verdict.labels("unknown").set(1 if verdict is None else 0)

    def observe_plan(self, plan: Plan, *, fresh: bool = False,
                     desired: DesiredState | None = None) -> None:
        """A new plan; ``fresh``: made from a snapshot just read (count its observations);
        ``desired``: the desired state it was made from (the pinned tags)."""
        self._set_verdict(plan.verdict)
        self.services.observe(plan, desired)
        for action, count in plan.counts().items():
            if action not in ("blockers", "drift"):
                self.changes.labels(action).set(count)
        self.blockers.set(len(plan.blockers))
        self.drift.set(len(plan.drift))
        self.silent.set(len(plan.silent_clusters()))
        self.unproven.set(len(plan.unconverged()))
        self.cycles.inc()
        if fresh:
            counted: dict[tuple[str, str], int] = {}
            for evidence in plan.evidence:
                for obs in evidence.observations:
                    label = (obs.cluster_id, obs.kind.value)
                    counted[label] = counted.get(label, 0) + 1
            for (cluster, outcome), count in counted.items():
                self.observations.labels(redact(cluster), outcome).inc(count)

    def observed(self) -> None:
        self.last_observation.set(time.time())
        self.read_ok.set(1)

    def unreadable(self, kind: ErrorKind) -> None:
        """The live side could not be read: the verdict and every plan gauge are unknown,
        not the last plan's."""
        self._set_verdict(None)
        self._unknown()
        self.errors.labels(kind).inc()

    def error(self, kind: ErrorKind) -> None:
        self.errors.labels(kind).inc()

    def held(self) -> None:
        """Suspended: the live side is no longer read, so the plan gauges are unknown (NaN)
        until the next plan; ``reconcile_live_read_ok`` still tells the last read."""
        self._set_verdict(None)
        for gauge in (self.unproven, self.drift, self.blockers, self.silent):
            gauge.set(float("nan"))
        self.changes.clear()
        self.services.unknown()

    def applied(self, outcome: RunOutcome, report: ApplyReport | None) -> None:
        self.applies.labels(outcome.value).inc()
        if report is None:
            return
        for result in report.results:
            self.change_outcomes.labels(result.outcome.value).inc()
        gate = gate_result(report)
        if gate is not None:
            self.gate.labels(gate).inc()

    def close(self) -> None:
        self.endpoint.close()


#: ``reconcile_applies_total`` outcomes (``core.outcomes``: the words are written there).
APPLY_OUTCOMES = tuple(o.value for o in outcomes.APPLY_OUTCOMES)


def gate_result(report: ApplyReport) -> str | None:
    """converged | not_converged | unproven (changes sent, no judge's word); None when
    nothing was sent and no gate ran."""
    result = report.gate_result()
    return result.value if result is not None else None


def apply_outcome(report: ApplyReport) -> RunOutcome:
    return report.outcome()


def config_file_filter(root: Path) -> Callable[[Change, str], bool]:
    """YAML files under ``root``, outside dot-directories (``.git``, a state dir, ...);
    judged relative to the root, so a repo that itself lives under a dot-directory
    (``~/.config/fleet``) is still watched."""
    base = root.resolve()

    def accept(change: Change, path: str) -> bool:
        if not path.endswith((".yaml", ".yml")):
            return False
        try:
            parts = Path(path).resolve().relative_to(base).parts
        except ValueError:
            return False
        return not any(part.startswith(".") for part in parts)

    return accept


@dataclass
class Watcher:
    root: Path
    steps: Steps
    log: Log
    apply: bool = False
    resync: float = 30.0
    debounce: float = 0.3
    head_poll: float = 1.0
    max_backoff: float = 300.0
    metrics: Metrics | None = None
    render_first: Callable[[Plan], str] | None = None  # the first plan in full, then diffs
    only: frozenset[str] = frozenset()  # --only: the steps restrict; the watcher reports
    readiness: Readiness = field(default_factory=Readiness)
    desired: DesiredState | None = None
    provenance: Provenance = field(default_factory=Provenance)
    snapshot: LiveSnapshot | None = None
    plan: Plan | None = None
    broken: str | None = None  # fingerprint of the last reported invalid revision
    failed_commit: str | None = None
    asked_revert: str | None = None  # the commit last asked about a pending revert
    backoff: float = 0.0
    next_apply_at: float = 0.0
    applying: asyncio.Task[None] | None = None
    was_ready: bool | None = None
    only_unknown: frozenset[str] = frozenset()
    control: Control | None = None  # suspend / resume / reconcile now (shell.control)
    was_suspended: bool = False
    #: watch --env: when (wall clock, seconds) the next promotion held by the last plan
    #: (``plan_wake``) or waiting to be proposed (``proposal_wake``, --promote-from)
    #: becomes eligible; the live side is read again then, not only at the next resync
    plan_wake: float | None = None
    proposal_wake: float | None = None
    #: watch --view: the web view's pages, published after each read and each plan
    web: WebView | None = None
    #: the rows of the last successful read (kept, and shown unknown, while reads fail)
    web_status: service_status.Status | None = None
    #: when reads of the live side began failing (epoch ms; None while they succeed)
    unknown_since: int | None = None

    # -- the loop ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        events: asyncio.Queue[set[tuple[Change, str]]] = asyncio.Queue()
        watcher = asyncio.create_task(self._watch_files(events, stop))
        if self.metrics is not None:
            self.readiness = self.metrics.readiness
        if self.control is not None:
            self.readiness.follow(self.control.detail)  # suspended is ready (shell.health)
        self.log.event("start", f"watching {self.root} (resync every {self.resync:g}s"
                       + (", applying GO plans from clean commits" if self.apply else "")
                       + (f", only {', '.join(sorted(self.only))}" if self.only else "")
                       + ")", metrics=None if self.metrics is None
                       else self.metrics.endpoint.address)
        if self.control is not None:
            self._bind_control(events)
        try:
            await self._reload()
            if not self._held():
                await self._resync()
            last_resync = time.monotonic()
            last_head = self.provenance
            while not stop.is_set():
                timeout = min(self.head_poll, max(0.0, last_resync + self.resync
                                                  - time.monotonic()))
                got = await self._next_batch(events, stop, timeout)
                if stop.is_set():
                    break
                if self._held():
                    continue  # suspended: nothing observed, planned or applied
                requested = self.control is not None and self.control.take_request()
                head = got if isinstance(got, Provenance) else \
                    await asyncio.to_thread(self._head)
                if got is None and _git_state(head) != _git_state(last_head):
                    # HEAD moved with no file event yet (a commit of saved files, or the
                    # first commit of a burst whose events are still on their way): wait
                    # for the same quiet as after file events, so a burst is one reconcile.
                    head = await self._settle(events, stop, head)
                # The plan reads the commit: a file event matters only when it moved HEAD
                # or changed whether tracked files differ from it.
                moved = _git_state(head) != _git_state(last_head) or (
                    got is not None and head.commit is None)  # outside git: the files are it
                if moved:
                    await self._reload(head)
                    last_head = head
                wake = self.wake_at
                woken = wake is not None and time.time() >= wake
                if woken:  # set again by the plan and the proposals after this resync
                    self.plan_wake = self.proposal_wake = None
                if requested or time.monotonic() - last_resync >= self.resync \
                        or self._resync_due() or woken:
                    await self._resync("reconcile requested" if requested else
                                       "promotion eligible" if woken else "resync")
                    last_resync = time.monotonic()
                elif moved:
                    self._replan("files changed" if got else "HEAD moved")
                    self._note_wake()
                await self._maybe_apply(stop)
        finally:
            watcher.cancel()
            if self.applying is not None and not self.applying.done():
                # Abandon the apply in flight: the journal holds its sent keys, so the
                # next run replays them instead of sending anything twice.
                self.applying.cancel()
                await asyncio.gather(self.applying, return_exceptions=True)
                self.log.event("apply-abandoned", "stopped mid-apply; the journal records "
                               "every key sent, and the next run replays them")
            await asyncio.gather(watcher, return_exceptions=True)
            await self.steps.close()
            self.log.event("stop", "stopped")

    def _bind_control(self, events: asyncio.Queue[set[tuple[Change, str]]]) -> None:
        """A control request wakes the loop at once: an empty batch of file events (it
        moves nothing, so only what the request asked for happens)."""
        assert self.control is not None
        loop = asyncio.get_running_loop()
        self.control.bind(lambda: loop.call_soon_threadsafe(events.put_nowait, set()))

    def _held(self) -> bool:
        """Whether the watcher is suspended; each change of that is said once (and the
        plan gauges turn unknown, as nothing is read while it lasts)."""
        suspension = self.control.suspension if self.control is not None else None
        if (suspension is not None) != self.was_suspended:
            self.was_suspended = suspension is not None
            if suspension is not None:
                assert self.control is not None
                self.log.event("suspended", f"{suspension.describe()}: nothing is observed, "
                               f"planned or applied until resumed "
                               f"({self.control.how_to_resume()})", since=suspension.since)
                if self.metrics is not None:
                    self.metrics.held()
                if self.unknown_since is None:
                    self.unknown_since = int(time.time() * 1000)
                self._publish(f"suspended ({suspension.describe()}): nothing is read")
            else:
                self.log.event("resumed", "resumed: reconciling now")
        return suspension is not None

    async def _watch_files(self, events: asyncio.Queue[set[tuple[Change, str]]],
                           stop: asyncio.Event) -> None:
        async for changes in awatch(self.root, watch_filter=config_file_filter(self.root),
                                    stop_event=stop, debounce=1600, step=self._step_ms,
                                    recursive=True):
            await events.put(changes)

    async def _next_batch(self, events: asyncio.Queue[set[tuple[Change, str]]],
                          stop: asyncio.Event, timeout: float) -> Provenance | None:
        """Wait up to ``timeout`` for file events; then keep draining until the files
        have been quiet for ``debounce`` seconds, so a pull or a checkout touching
        hundreds of files (or fifty commits in a row) is one reconcile, at the end."""
        try:
            await asyncio.wait_for(events.get(), timeout=timeout)
        except TimeoutError:
            return None
        head = await asyncio.to_thread(self._head)
        return await self._settle(events, stop, head)

    async def _settle(self, events: asyncio.Queue[set[tuple[Change, str]]],
                      stop: asyncio.Event, head: Provenance) -> Provenance:
        """Drain file events until the files have been quiet for ``debounce`` seconds and
        HEAD has stopped moving; the HEAD it settled at."""
        # watchfiles already waited ``step`` quiet milliseconds before yielding.
        quiet = max(0.01, self.debounce - self._step_ms / 1000)
        while not stop.is_set():
            try:
                await asyncio.wait_for(events.get(), timeout=quiet)
            except TimeoutError:
                # Quiet on disk; a burst of commits is over only once HEAD stops moving too.
                now = await asyncio.to_thread(self._head)
                if now == head:
                    return now
                head = now
        return head

    def _resync_due(self) -> bool:
        """Whether to read the live side before the interval is up (a sharded watcher
        that just took shards: ``shell.sharded``)."""
        return False

    @property
    def _step_ms(self) -> int:
        return max(10, min(50, int(self.debounce * 500)))

    def _head(self) -> Provenance:
        return self.steps.head()

    # -- steps ----------------------------------------------------------------------------

    async def _reload(self, before: Provenance | None = None) -> None:
        """Re-read the commit (unchanged blobs are not parsed again). ``before`` is kept
        for the caller's symmetry; reading a commit is atomic, so it is not compared."""
        loaded = await asyncio.to_thread(self.steps.load)
        self.provenance = loaded.provenance
        if loaded.state is None:
            rendered = list(loaded.problems)
            key = hashlib.sha256("\n".join(rendered).encode()).hexdigest()
            if key != self.broken:
                self.broken = key
                if self.metrics is not None:
                    # No path read: the repo itself (git) failed, not the files in it.
                    self.metrics.error(ErrorKind.GIT if loaded.provenance.path is None
                                       else ErrorKind.INVALID_DESIRED_STATE)
                self.readiness.waiting("no valid desired state to observe yet")
                self.log.event("invalid", f"{len(rendered)} problem(s); keeping the last "
                               "good desired state" if self.desired else
                               f"{len(rendered)} problem(s); nothing valid to plan yet",
                               lines=rendered)
            return
        self.broken = None
        unknown = self.only - {s.name for s in loaded.state.services}
        if unknown != self.only_unknown:
            self.only_unknown = frozenset(unknown)
            if unknown:
                self.log.event("only-unknown", "--only names no service of this repo: "
                               + ", ".join(sorted(unknown)))
        known = {s.app_id for s in self.desired.services} if self.desired else set()
        self.desired = loaded.state
        if self.snapshot is not None and {s.app_id for s in loaded.state.services} != known:
            self.snapshot = None  # new apps: their evidence must be read, never assumed

    async def _resync(self, why: str = "resync") -> None:
        if self.desired is None:
            self.readiness.waiting("no valid desired state to observe yet")
            self._report_readiness()
            return
        try:
            self.snapshot = await self.steps.observe(self.desired)
        except EngineError as exc:
            kind = error_kind(exc)
            self.log.event("live-unreadable", f"could not read the live world: {safe(exc)}",
                           kind=kind.value)
            self.snapshot = None
            # The fact, not the advice: /readyz is read by probes and on other hosts.
            self.readiness.failed(f"{kind}: {safe(exc.bare, 300)}")
            if self.metrics is not None:
                self.metrics.unreadable(kind)
            self._report_readiness()
            if self.unknown_since is None:
                self.unknown_since = int(time.time() * 1000)
            self._publish(f"{kind}: {safe(exc.bare, 300)}")
            return
        self.readiness.succeeded()
        self.unknown_since = None
        if self.metrics is not None:
            self.metrics.observed()
        self._report_readiness()
        self._replan(why, fresh=True)
        self._note_wake()
        await self._propose()

    def _note_wake(self) -> None:
        """``watch --env``: when a promotion the last plan holds becomes eligible (the
        engine's steps say; None: none is held with a time), to look again then."""
        eligible = self.steps.eligible_at
        self.plan_wake = eligible / 1000 + WAKE_MARGIN if eligible is not None else None

    async def _propose(self) -> None:
        """``watch --promote-from``: after each observation the steps propose what became
        eligible (the engine decides, opens and journals); the watcher says what is new,
        counts failures (they never stop it) and wakes up when the next promotion
        becomes eligible."""
        stage = self.steps.stage
        environment = stage.name if stage is not None else ""
        try:
            done = await self.steps.propose()
        except Exception as exc:  # proposing is beside the loop: whatever
            # fails there is said and counted, and the watcher goes on reconciling
            self.log.event("promotion-failed", f"could not propose promotions: "
                           f"{safe(exc) or type(exc).__name__}")
            if self.metrics is not None:
                self.metrics.error(ErrorKind.PROMOTION)
            return
        for item in done:
            decision = item.decision
            if item.error is not None and self.metrics is not None:
                self.metrics.error(ErrorKind.PROMOTION)
            if not item.news and item.error is None:
                continue
            line = watchview.proposal(
                environment, decision, number=item.pull.number if item.pull else None,
                url=item.pull.url if item.pull else "",
                created=item.pull.created if item.pull else True,
                error=safe(item.error, 1000) if item.error else None,
                failures=self.steps.proposer.failures if self.steps.proposer is not None else 0)
            if line is not None:
                self._say(line)
            if item.closed is not None and item.pull is not None:
                self.log.event("promotion-superseded", f"{decision.service} → {environment}: "
                               f"closed pull request #{item.closed}, superseded by "
                               f"#{item.pull.number}", service=decision.service,
                               closed=item.closed, pull=item.pull.number)
            if item.note:
                self.log.event("promotion-failed", f"{decision.service}: {safe(item.note)}",
                               level="warning", service=decision.service)
        wake = proposals.wake_at((item.decision for item in done), int(time.time() * 1000))
        self.proposal_wake = wake / 1000 + WAKE_MARGIN if wake is not None else None

    @property
    def wake_at(self) -> float | None:
        """The earliest of the wake-ups the plan and the proposals asked for."""
        wakes = [w for w in (self.plan_wake, self.proposal_wake) if w is not None]
        return min(wakes) if wakes else None

    def _report_readiness(self) -> None:
        """Log each change of ``/readyz``'s answer once."""
        ready, reason = self.readiness.state()
        if ready == self.was_ready:
            return
        if ready:
            self.log.event("ready", "the live side was read; ready" if reason == "ready"
                           else "ready: " + reason.replace("\n", "; "))
        elif self.was_ready is not None or self.desired is not None:
            self.log.event("unready", f"not ready: {reason}")
        self.was_ready = ready

    def _replan(self, why: str, *, fresh: bool = False) -> None:
        if self.desired is None:
            return
        if self.snapshot is None:
            self.log.event("waiting", "no live snapshot yet; planning at the next resync")
            return
        started = time.perf_counter()
        # Two resyncs: a snapshot kept across file events (or across a long apply) whose
        # answers are older than that shows those clusters unknown, never converged.
        new = self.steps.plan(self.desired, self.snapshot, self.provenance,
                              max_age=2 * self.resync)
        delta = plandiff.diff(self.plan, new)
        first = self.plan is None
        self.plan = new
        if self.metrics is not None:
            self.metrics.observe_plan(new, fresh=fresh, desired=self.desired)
        elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        self._publish()
        if first and self.render_first is not None and self.log.enabled("info"):
            self.log.stream.write(self.render_first(new))
        self._say(watchview.planned(why, new, delta, elapsed_ms))

    def _publish(self, unreadable: str | None = None) -> None:
        """watch --view: the rows the judge makes of the last snapshot (``core.status``),
        the plan's pending changes, and how the last read went, for the web view. A read
        that failed keeps the last rows but says unknown since when (never stale green)."""
        if self.web is None or self.desired is None:
            return
        now = int(time.time() * 1000)
        stage = self.steps.stage
        name = stage.name if stage is not None else "default"
        if unreadable is None and self.snapshot is not None:
            taken = self.plan.created_at if self.plan is not None else now
            rows = service_status.rows(
                name, self.desired, self.snapshot,
                environment=stage.environment if stage is not None else None,
                upstream=getattr(self.steps, "upstream", None),
                freezes=stage.rules.freezes if stage is not None else (), now_ms=taken)
            self.web_status = service_status.assemble(taken, [name], {name: rows})
        status = self.web_status or service_status.Status(
            taken_at=now, environments=(name,), rows=())
        last = self.readiness.last_success
        live = LiveRead(ok=unreadable is None and self.snapshot is not None,
                        last_success_ms=None if last is None else int(last * 1000),
                        unknown_since_ms=self.unknown_since,
                        reason=unreadable or (None if self.snapshot is not None
                                              else "no observation of the live side yet"))
        plan = self.plan
        self.web.publish(View(
            status=status, live=live, now_ms=now, source="watch",
            pending=pending_of(name, plan.changes) if plan is not None and live.ok else (),
            planned=plan is not None and live.ok))

    def _say(self, line: watchview.Line) -> None:
        self.log.event(line.event, line.message, level=line.level, **line.fields)

    async def _maybe_apply(self, stop: asyncio.Event) -> None:
        plan = self.plan
        if not self.apply or plan is None or stop.is_set():
            return
        if plan.verdict is not Verdict.GO:
            return  # the judge proves it converged, or the plan is NO-GO
        if self.control is not None and self.control.suspended:
            return  # suspended while this cycle ran: nothing new starts
        commit = self.provenance.commit
        if commit is None or self.provenance.dirty:
            return  # only from a clean, committed revision
        if commit == self.failed_commit and time.monotonic() < self.next_apply_at:
            return
        if commit != self.failed_commit and commit != self.asked_revert:
            # A watcher started after the failure: the journal knows whether this
            # commit's way back is a pull request (asked once per commit).
            self.asked_revert = commit
            waiting = await asyncio.to_thread(self.steps.revert_pending, commit)
            if waiting:
                self._park(commit, waiting)
                return
        self.applying = asyncio.create_task(self._apply(commit))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({self.applying, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if stop.is_set():
            return  # run() abandons the apply in flight
        self.applying = None

    async def _apply(self, commit: str) -> None:
        self.log.event("apply", f"applying commit {commit[:12]}")
        ok = parked = False
        # A run that raised is counted ERROR (or REFUSED, below); one that returned, as
        # its report says (``ApplyReport.outcome``).
        outcome: RunOutcome = RunOutcome.ERROR
        report: ApplyReport | None = None
        try:
            run = await self.steps.apply(_LogHook(self.log))
            report = run.report
            ok = report.writes_ok and (report.gate is None or report.gate.converged)
            outcome = apply_outcome(report)
            self._say(watchview.applied(commit, report, ok))
            told = revertview.way_back(run.reverted, run.revert_error)  # issue 20
            if told:
                self.log.event("reverted", f"commit {commit[:12]}: release failed",
                               lines=told, commit=commit)
            parked = run.revert_proposed()
        except EngineError as exc:
            kind = error_kind(exc)
            outcome = (RunOutcome.REFUSED if kind is ErrorKind.APPLY_REFUSED
                       else RunOutcome.ERROR)
            self.log.event("apply-refused", f"commit {commit[:12]}: {safe(str(exc), 2000)}",
                           code=int(exc.code), commit=commit, kind=kind.value)
            if self.metrics is not None:
                self.metrics.error(kind)
        if self.metrics is not None:
            if outcome is RunOutcome.FAILED:
                self.metrics.error(ErrorKind.APPLY_FAILED)
            self.metrics.applied(outcome, report)
        if ok:
            self.failed_commit, self.backoff = None, 0.0
            if self.metrics is not None:
                self.metrics.last_apply.set(time.time())
        elif parked:
            self._park(commit, "a pull request")
        else:
            # Back off on this commit; a newer commit is tried at once (it supersedes).
            self.backoff = min(self.max_backoff, max(self.resync, self.backoff * 2 or 5.0))
            self.failed_commit = commit
            self.next_apply_at = time.monotonic() + self.backoff
            self.log.event("backoff", f"next try of commit {commit[:12]} in "
                           f"{self.backoff:g}s (or at once for a newer commit)")
        await self._resync()

    def _park(self, commit: str, where: str) -> None:
        """Issue 20: ``commit``'s release failed and its way back is a pull request, so
        the failed commit is still HEAD. Trying it again would send the release the
        clusters refused, once per backoff, until someone merges; it waits for a newer
        commit instead (the merged revert, or anything else)."""
        self.failed_commit, self.next_apply_at = commit, math.inf
        self.log.event("backoff", f"commit {commit[:12]} is not applied again: its revert "
                       f"is proposed as {where} (a newer commit is applied at once)",
                       commit=commit)


def _git_state(provenance: Provenance) -> tuple[str | None, bool]:
    """What a HEAD poll compares: the commit and whether tracked files differ from it."""
    return provenance.commit, provenance.dirty


@dataclass
class _LogHook:
    log: Log

    def __call__(self, event: Event) -> None:
        line = watchview.progress(event)
        if line is not None:
            self.log.event(line.event, line.message, level=line.level, **line.fields)
