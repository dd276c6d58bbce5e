"""``reconcile watch --coordinate``: the watcher as one member of a group sharing a
desired-state root through etcd.

Owns *when* the watcher looks at the ownership rounds (every retry period, and once
before the first plan; the rounds themselves run on the engine's coordination thread, so
a long plan never starves the lease),
a resync as soon as a round took shards, the status published after each finished
reconcile, the lease revoked on a clean stop; and *what is said* about it: log events,
the shard metrics and the ``/readyz`` holds (etcd unreachable; shards nobody reconciled
for two resyncs -- the failure argo-cd#29476 hid behind Synced/Healthy).

Must not decide which shards to own (``core.sharding``) nor call etcd
(``shell.coordination``) nor sequence a round or fence a write (the engine's
``ShardedWatchSteps``): it calls the steps it is given.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from reconciler.core.sharding import LeaseTiming, ShardAge
from reconciler.shell.watching import Metrics, Watcher


class Round(Protocol):
    @property
    def owned(self) -> frozenset[int]: ...

    @property
    def taken(self) -> tuple[int, ...]: ...

    @property
    def released(self) -> tuple[int, ...]: ...

    @property
    def lost(self) -> tuple[int, ...]: ...

    @property
    def members(self) -> tuple[str, ...]: ...

    @property
    def owners(self) -> tuple[tuple[int, str], ...]: ...

    @property
    def ages(self) -> tuple[tuple[int, float | None], ...]: ...

    @property
    def late(self) -> Sequence[ShardAge]: ...

    @property
    def error(self) -> str | None: ...

    @property
    def fatal(self) -> bool: ...


class ShardSteps(Protocol):
    """The engine's side (``engine.ShardedWatchSteps``)."""

    member: str
    count: int
    timing: LeaseTiming
    fresh: set[int]

    async def round(self) -> Round: ...

    async def publish(self, commit: str | None) -> None: ...

    async def leave(self) -> None: ...


def _ranges(shards: Sequence[int]) -> str:
    return ",".join(str(s) for s in sorted(shards)) or "none"


class ShardMetrics:
    """The shard gauges, on the watcher's registry."""

    def __init__(self, metrics: Metrics) -> None:
        from prometheus_client import Counter, Gauge

        registry = metrics.registry
        self.owned = Gauge("reconcile_shards_owned", "shards this watcher owns now",
                           registry=registry)
        self.owner = Gauge("reconcile_shard_owner", "1 for each shard's owner as this "
                           "watcher last read it", ["shard", "owner"], registry=registry)
        self.age = Gauge("reconcile_shard_reconcile_age_seconds",
                         "seconds since the shard's owner last finished a reconcile (NaN: "
                         "never, or etcd unread)", ["shard"], registry=registry)
        self.late = Gauge("reconcile_shards_unreconciled",
                          "shards nobody finished a reconcile of for two resync intervals "
                          "(NaN while etcd cannot be read)", registry=registry)
        self.ok = Gauge("reconcile_coordination_ok",
                        "1 when the last ownership round reached etcd", registry=registry)
        self.lost = Counter("reconcile_shards_lost", "shards lost to a takeover or an expired "
                            "lease", registry=registry)
        self.late.set(math.nan)
        self.ok.set(0)

    def update(self, got: Round) -> None:
        self.owned.set(len(got.owned))
        if got.lost:
            self.lost.inc(len(got.lost))
        if got.error is not None:
            self.ok.set(0)
            self.late.set(math.nan)
            return
        self.ok.set(1)
        self.owner.clear()
        for shard, owner in got.owners:
            self.owner.labels(str(shard), owner).set(1)
        for shard, age in got.ages:
            self.age.labels(str(shard)).set(math.nan if age is None else age)
        self.late.set(len(got.late))


@dataclass
class ShardedWatcher(Watcher):
    shards: ShardSteps | None = None
    shard_metrics: ShardMetrics | None = None
    owned: frozenset[int] = frozenset()
    late_said: tuple[int, ...] = ()
    unreachable: bool = False
    rounds: int = 0
    _round_task: asyncio.Task[None] | None = field(default=None, repr=False)
    _stop: asyncio.Event | None = field(default=None, repr=False)

    async def run(self, stop: asyncio.Event) -> None:
        assert self.shards is not None
        if self.metrics is not None:
            self.readiness = self.metrics.readiness
            self.shard_metrics = ShardMetrics(self.metrics)
        self._stop = stop
        await self._one_round()
        self._round_task = asyncio.create_task(self._rounds(stop))
        try:
            await super().run(stop)
        finally:
            self._round_task.cancel()
            await asyncio.gather(self._round_task, return_exceptions=True)
            await self.shards.leave()
            self.log.event("shards-left", "left the group; the lease is revoked, the others "
                           "take its shards at their next round")

    async def _rounds(self, stop: asyncio.Event) -> None:
        assert self.shards is not None
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.shards.timing.retry)
            except TimeoutError:
                await self._one_round()

    async def _one_round(self) -> None:
        assert self.shards is not None
        got = await self.shards.round()
        self.rounds += 1
        if self.shard_metrics is not None:
            self.shard_metrics.update(got)
        fields: dict[str, Any] = {"member": self.shards.member, "owned": sorted(got.owned)}
        if got.lost:
            self.log.event("shards-lost", f"lost shard(s) {_ranges(got.lost)}: taken over or "
                           "our lease expired; nothing more is sent for them",
                           level="warning", lost=list(got.lost), **fields)
        if got.fatal:
            self.log.event("coordination-refused", f"{got.error}; stopping", level="error",
                           **fields)
            if self._stop is not None:
                self._stop.set()
            return
        if got.error is not None:
            self.readiness.hold("coordination", f"etcd unreachable: {got.error}; no lease, "
                                "no writes until it answers")
            if not self.unreachable:
                self.log.event("coordination-unreachable", f"etcd: {got.error}; writing "
                               "nothing until it answers", level="error", **fields)
            self.unreachable = True
            self.owned = got.owned
            self._report_readiness()
            return
        self.readiness.hold("coordination", None)
        if self.unreachable:
            self.log.event("coordination-ok", "etcd answers again", **fields)
            self.unreachable = False
        if got.owned != self.owned or got.taken or got.released:
            self.log.event("shards", f"owning {len(got.owned)} of {self.shards.count} shards "
                           f"({_ranges(list(got.owned))}); members: {', '.join(got.members)}",
                           taken=list(got.taken), released=list(got.released),
                           members=list(got.members), **fields)
        self.owned = got.owned
        late = tuple(a.shard for a in got.late)
        self.readiness.hold("shards", "\n".join(a.describe() for a in got.late) or None)
        if late != self.late_said:
            if got.late:
                self.log.event("shards-unreconciled", f"{len(got.late)} shard(s) not "
                               f"reconciled for two resync intervals ({2 * self.resync:g}s)",
                               level="warning", lines=[a.describe() for a in got.late],
                               shards=list(late), **fields)
            else:
                self.log.event("shards-reconciled", "every shard was reconciled within two "
                               "resync intervals", **fields)
            self.late_said = late
        self._report_readiness()

    def _resync_due(self) -> bool:
        return self.shards is not None and bool(self.shards.fresh)

    async def _resync(self, why: str = "resync") -> None:
        await super()._resync(why)
        if self.shards is not None and self.snapshot is not None and self.plan is not None:
            await self.shards.publish(self.provenance.commit)
