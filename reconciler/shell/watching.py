"""``reconcile watch``: continuous reconciliation of a checked-out config repo.

Owns the loop and its timing: file events (watchfiles) debounced into one reconcile per
burst, a ``HEAD`` poll (a commit of already-saved files moves no file), a periodic resync
of the live side, the last good desired state kept across invalid edits (reported once
per broken revision), the backoff after a failed apply, and a clean stop on
SIGINT/SIGTERM. Each plan is diffed against the previous one and only the difference is
reported.

Must not decide what to change (``core.planning``) nor how to apply (``engine``); it
only decides *when*. Reports go through ``Log``; metrics through ``Metrics``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from watchfiles import Change, awatch

from reconciler.core import plandiff
from reconciler.core.desired import DesiredState
from reconciler.core.events import Event, Finished, GatePolled, GateStarted, Hook, PostApply
from reconciler.core.live import LiveSnapshot
from reconciler.core.outcomes import ApplyReport, Outcome
from reconciler.core.planning import Provenance
from reconciler.core.plans import Plan, Verdict
from reconciler.core.sanitize import safe
from reconciler.failures import EngineError


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


class Steps(Protocol):
    """The engine's side of watching: every *what* (``engine.WatchSteps``). The watcher
    decides only *when*: file events, HEAD polling, debounce, resync, backoff."""

    def head(self) -> Provenance: ...

    def load(self) -> Loaded: ...

    async def observe(self, desired: DesiredState) -> LiveSnapshot: ...

    def plan(self, desired: DesiredState, snapshot: LiveSnapshot,
             provenance: Provenance) -> Plan: ...

    async def apply(self, hook: Hook) -> ApplyResult: ...

    async def close(self) -> None: ...


class Log:
    """One event per line: human text, or JSON objects with ``--log-format json``."""

    def __init__(self, fmt: str = "text", stream: TextIO | None = None) -> None:
        self.fmt = fmt
        self.stream = stream or sys.stdout

    def event(self, event: str, message: str, **fields: object) -> None:
        if self.fmt == "json":
            record = {"ts": round(time.time(), 3), "event": event, "message": message,
                      **fields}
            line = json.dumps(record, sort_keys=True, default=str)
        else:
            line = f"{time.strftime('%H:%M:%S')} {event}: {message}"
            extra = fields.get("lines")
            if isinstance(extra, list | tuple):
                line += "".join(f"\n    {x}" for x in extra)
        self.stream.write(line + "\n")
        self.stream.flush()


class Metrics:
    """The optional Prometheus endpoint (loopback only)."""

    def __init__(self, port: int) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.registry = CollectorRegistry()
        self.verdict = Gauge("reconcile_plan_verdict", "1 for the last plan's verdict",
                             ["verdict"], registry=self.registry)
        self.changes = Gauge("reconcile_plan_changes", "changes in the last plan",
                             ["action"], registry=self.registry)
        self.blockers = Gauge("reconcile_plan_blockers", "blockers in the last plan",
                              registry=self.registry)
        self.drift = Gauge("reconcile_plan_drift", "drift items in the last plan",
                           registry=self.registry)
        self.silent = Gauge("reconcile_silent_clusters",
                            "expected clusters silent for at least one service",
                            registry=self.registry)
        self.last_apply = Gauge("reconcile_last_successful_apply_timestamp_seconds",
                                "when an apply last converged", registry=self.registry)
        self.unproven = Gauge("reconcile_services_not_proven_converged",
                              "managed services the judge does not prove converged",
                              registry=self.registry)
        self.cycles = Counter("reconcile_watch_cycles", "plans made by the watcher",
                              registry=self.registry)
        start_http_server(port, addr="127.0.0.1", registry=self.registry)

    def observe_plan(self, plan: Plan) -> None:
        for verdict in Verdict:
            self.verdict.labels(verdict.value).set(1 if plan.verdict is verdict else 0)
        for action, count in plan.counts().items():
            if action not in ("blockers", "drift"):
                self.changes.labels(action).set(count)
        self.blockers.set(len(plan.blockers))
        self.drift.set(len(plan.drift))
        self.silent.set(len({b.cluster for b in plan.blockers if b.cluster is not None and
                             b.code in ("cluster_silent", "cluster_unreachable")}))
        self.unproven.set(len(plan.unconverged()))
        self.cycles.inc()


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
    desired: DesiredState | None = None
    provenance: Provenance = field(default_factory=Provenance)
    snapshot: LiveSnapshot | None = None
    plan: Plan | None = None
    broken: str | None = None  # fingerprint of the last reported invalid revision
    failed_commit: str | None = None
    backoff: float = 0.0
    next_apply_at: float = 0.0
    applying: asyncio.Task[None] | None = None

    # -- the loop ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        events: asyncio.Queue[set[tuple[Change, str]]] = asyncio.Queue()
        watcher = asyncio.create_task(self._watch_files(events, stop))
        self.log.event("start", f"watching {self.root} (resync every {self.resync:g}s"
                       + (", applying GO plans from clean commits)" if self.apply else ")"))
        try:
            await self._reload()
            await self._resync()
            last_resync = time.monotonic()
            last_head = self.provenance
            while not stop.is_set():
                timeout = min(self.head_poll, max(0.0, last_resync + self.resync
                                                  - time.monotonic()))
                got = await self._next_batch(events, stop, timeout)
                if stop.is_set():
                    break
                head = got if isinstance(got, Provenance) else \
                    await asyncio.to_thread(self._head)
                # The plan reads the commit: a file event matters only when it moved HEAD
                # or changed whether tracked files differ from it.
                moved = _git_state(head) != _git_state(last_head)
                if moved:
                    await self._reload(head)
                    last_head = head
                if time.monotonic() - last_resync >= self.resync:
                    await self._resync()
                    last_resync = time.monotonic()
                elif moved:
                    self._replan("files changed" if got else "HEAD moved")
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
                self.log.event("invalid", f"{len(rendered)} problem(s); keeping the last "
                               "good desired state" if self.desired else
                               f"{len(rendered)} problem(s); nothing valid to plan yet",
                               lines=rendered)
            return
        self.broken = None
        known = {s.app_id for s in self.desired.services} if self.desired else set()
        self.desired = loaded.state
        if self.snapshot is not None and {s.app_id for s in loaded.state.services} != known:
            self.snapshot = None  # new apps: their evidence must be read, never assumed

    async def _resync(self) -> None:
        if self.desired is None:
            return
        try:
            self.snapshot = await self.steps.observe(self.desired)
        except EngineError as exc:
            self.log.event("live-unreadable", f"could not read the live world: {safe(exc)}")
            self.snapshot = None
            return
        self._replan("resync")

    def _replan(self, why: str) -> None:
        if self.desired is None:
            return
        if self.snapshot is None:
            self.log.event("waiting", "no live snapshot yet; planning at the next resync")
            return
        started = time.perf_counter()
        new = self.steps.plan(self.desired, self.snapshot, self.provenance)
        delta = plandiff.diff(self.plan, new)
        first = self.plan is None
        self.plan = new
        if self.metrics is not None:
            self.metrics.observe_plan(new)
        elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        if first and self.render_first is not None:
            self.log.stream.write(self.render_first(new))
        if delta.empty:
            self.log.event("plan", f"{why}: no difference from the last plan "
                           f"({new.verdict.value})", verdict=new.verdict.value,
                           commit=new.commit, elapsed_ms=elapsed_ms)
            return
        lines = [f"+ {x}" for x in delta.added] + [f"- {x}" for x in delta.removed]
        verdict = new.verdict.value if delta.verdict_before in (None, new.verdict.value) \
            else f"{delta.verdict_before} → {new.verdict.value}"
        self.log.event("plan", f"{why}: {verdict}, {len(new.changes)} change(s), "
                       f"{len(new.blockers)} blocker(s), {len(new.drift)} drift",
                       verdict=new.verdict.value, commit=new.commit, lines=lines,
                       counts=new.counts(), elapsed_ms=elapsed_ms)

    async def _maybe_apply(self, stop: asyncio.Event) -> None:
        plan = self.plan
        if not self.apply or plan is None or stop.is_set():
            return
        if plan.verdict is not Verdict.GO:
            return  # the judge proves it converged, or the plan is NO-GO
        commit = self.provenance.commit
        if commit is None or self.provenance.dirty:
            return  # only from a clean, committed revision
        if commit == self.failed_commit and time.monotonic() < self.next_apply_at:
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
        ok = False
        try:
            run = await self.steps.apply(_LogHook(self.log))
            report = run.report
            ok = report.writes_ok and (report.gate is None or report.gate.converged)
            summary = ", ".join(f"{report.count(o)} {o.value}" for o in Outcome
                                if report.count(o))
            failed = [] if report.gate is None else [
                f"{p.service}: {reason}" for p in report.gate.pending() for reason in p.reasons()]
            self.log.event("applied" if ok else "apply-failed",
                           f"commit {commit[:12]}: {summary or 'nothing to send'}"
                           + ("" if ok else "; not converged"), lines=failed, commit=commit)
        except EngineError as exc:
            self.log.event("apply-refused", f"commit {commit[:12]}: {safe(str(exc), 2000)}",
                           code=int(exc.code), commit=commit)
        if ok:
            self.failed_commit, self.backoff = None, 0.0
            if self.metrics is not None:
                self.metrics.last_apply.set(time.time())
        else:
            # Back off on this commit; a newer commit is tried at once (it supersedes).
            self.backoff = min(self.max_backoff, max(self.resync, self.backoff * 2 or 5.0))
            self.failed_commit = commit
            self.next_apply_at = time.monotonic() + self.backoff
            self.log.event("backoff", f"next try of commit {commit[:12]} in "
                           f"{self.backoff:g}s (or at once for a newer commit)")
        await self._resync()


def _git_state(provenance: Provenance) -> tuple[str | None, bool]:
    """What a HEAD poll compares: the commit and whether tracked files differ from it."""
    return provenance.commit, provenance.dirty


@dataclass
class _LogHook:
    log: Log

    def __call__(self, event: Event) -> None:
        if isinstance(event, PostApply):
            r = event.result
            self.log.event("apply-progress", f"{r.outcome.value}: {r.change.action.value} "
                           f"{r.change.service}", key=r.change.idempotency_key)
        elif isinstance(event, GateStarted):
            self.log.event("apply-progress", f"Convergence gate: {len(event.services)} "
                           f"service(s) × {len(event.clusters)} cluster(s), up to "
                           f"{event.attempts} polls", clusters=list(event.clusters))
        elif isinstance(event, GatePolled):
            pending = [f"{p.service}: {x}" for p in event.proofs for x in p.reasons()]
            self.log.event("apply-progress", f"gate {event.attempt}/{event.attempts}: "
                           + (f"waiting on {len(pending)}" if pending else "every cluster "
                              "converged"), lines=pending[:5])
        elif isinstance(event, Finished):
            return
