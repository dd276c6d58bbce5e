"""A sharded watcher's steps (``ShardedWatchSteps``): the watcher's steps restricted to the
shards this member owns in etcd, each write fenced on its shard's owner key; and
``reconcile watch-status --shards`` (``shard_report``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from reconciler.core import (
    sharding,
)
from reconciler.core.desired import DesiredState
from reconciler.core.events import (
    Hook,
)
from reconciler.core.live import (
    LiveSnapshot,
)
from reconciler.core.planning import (
    Provenance,
)
from reconciler.core.plans import Change, Plan
from reconciler.core.preflight import Greenfield
from reconciler.core.sanitize import safe
from reconciler.core.sharding import ShardReport
from reconciler.engine.reconciling import Reconciler
from reconciler.engine.watchsteps import WatchSteps
from reconciler.engine.wayback import revert_after
from reconciler.engine.wiring import (
    NOTHING,
    ApplyRun,
    Deadline,
    PullTarget,
    connect,
    load_consistent,
    notifier,
)
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    applying,
    environments,
    gitrepo,
)
from reconciler.shell.endpoints import Overrides

if TYPE_CHECKING:  # for annotations only: these load where they are used
    from reconciler.core.groupoutcome import ShardOutcome
    from reconciler.core.outcomes import ApplyReport
    from reconciler.shell import coordination as coordination_types
    from reconciler.shell.groupnotify import Held, Word
    from reconciler.shell.notifying import Notifier


T = TypeVar("T")


# -- sharded watching (issue 22) ----------------------------------------------------------

@dataclass(frozen=True)
class ShardRound:
    """One ownership round of a sharded watcher: what it owns now, what changed, what the
    group looks like, and which shards nobody reconciled for two resyncs. ``error``: etcd
    could not be reached (or the lease was lost); nothing is written meanwhile."""

    owned: frozenset[int] = frozenset()
    taken: tuple[int, ...] = ()
    released: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    members: tuple[str, ...] = ()
    owners: tuple[tuple[int, str], ...] = ()
    ages: tuple[tuple[int, float | None], ...] = ()  # shard -> seconds since its last finish
    late: tuple[sharding.ShardAge, ...] = ()
    error: str | None = None
    fatal: bool = False  # the group refused this member (another shard count): stop


class ShardedWatchSteps(WatchSteps):
    """``WatchSteps`` for one member of a group of watchers sharing a desired-state root
    through etcd (``watch --coordinate``): the ownership round (renew the lease, read the
    group, decide with ``core.sharding``, take and release), the plan and apply narrowed
    to the owned shards' services, the fence before each write, and the per-shard status
    published after each finished reconcile. The etcd calls are ``shell.coordination``;
    when to run a round is ``shell.sharded``."""

    def __init__(self, root: Path, *, overrides: Overrides, env: Mapping[str, str],
                 target: str, shards: int, timing: sharding.LeaseTiming, resync: float,
                 member: str | None = None, timeout: float | None = None,
                 clock: Callable[[], float] = time.time, applying: bool = False,
                 on_gate_failure: str = "stop", pull: PullTarget | None = None,
                 stage: environments.Selected | None = None) -> None:
        # Everything ``WatchSteps`` takes but ``only`` (the shards decide who plans what):
        # the environment's rules are applied to each member's narrowed plan, so a member's
        # plan carries the blockers of its own services only.
        super().__init__(root, overrides=overrides, env=env, timeout=timeout, clock=clock,
                         applying=applying, on_gate_failure=on_gate_failure, pull=pull,
                         stage=stage)
        from reconciler.shell import coordination  # loads gRPC only when coordinating

        self.coordination = coordination
        self.target = coordination.parse_target(target)
        self.wanted_shards = shards
        self.count = shards
        self.timing = timing
        self.resync = resync
        self.member = member or f"{os.uname().nodename}-{os.getpid()}-{os.urandom(3).hex()}"
        self.group: str | None = self.target.group
        self.etcd: coordination.Etcd | None = None
        self.lease: int | None = None
        self.held: dict[int, int] = {}  # shard -> the owner key's revision when taken
        self.renewed_at: float | None = None  # monotonic time of the last renewal
        self.since = clock()  # unreconciled shards count from here at the latest
        self.fresh: set[int] = set()  # taken since the last plan: resync now
        self.planned: frozenset[int] = frozenset()  # the shards the last plan covered
        self.observed: frozenset[int] = frozenset()  # the shards the last snapshot read
        self.ids: dict[str, str] = {}  # name -> serviceId of the last desired state
        self.dropped: set[int] = set()  # dropped by a fence or a deadline, not yet reported
        #: the owner-key revisions of the shards the last snapshot read, and of those the
        #: apply in flight covers: a shard's outcome is recorded under the revision it was
        #: made under, so a shard lost (and maybe taken again) since records nothing
        self.observed_at: dict[int, int] = {}
        self.applying_at: dict[int, int] | None = None
        #: (commit, shard) -> the outcome last recorded by this member (not again)
        self.recorded: dict[tuple[str, int], dict[str, object]] = {}
        # The coordination thread (``start``): its loop, the rounds' results not yet read
        # by the watcher, and a lock for what both threads touch (``held`` and the sets).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._rounds: concurrent.futures.Future[None] | None = None
        self._lock = threading.RLock()
        self._results: list[ShardRound] = []
        self._last: ShardRound | None = None
        self._ready = asyncio.Event()

    # -- joining and the ownership round ------------------------------------------------

    def _group_of(self, desired: DesiredState) -> str:
        """The URL's group, else one derived from the control plane and where the root
        sits in its repo: every clone of the same root, on any machine, joins one group."""
        if self.group is not None:
            return self.group
        url = connect(desired, self.root, self.overrides).control_plane_url
        try:
            top = gitrepo.toplevel(self.root)
            where = str(self.root.resolve().relative_to(top.resolve())) if top else "."
        except (gitrepo.GitError, ValueError):
            where = "."
        return "r-" + hashlib.sha256(f"{url}|{where}".encode()).hexdigest()[:16]

    async def _join(self) -> coordination_types.Etcd:
        if self.etcd is None:
            if self.group is None:  # named by ``start`` or ``observe``, on their thread
                raise self.coordination.CoordinationError(
                    "no valid desired state to name the group by yet")
            self.etcd = self.coordination.Etcd(
                self.target, self.group, self.member,
                timeout=max(1.0, min(3.0, self.timing.retry)))
        if self.lease is None:
            self.count = await self.etcd.shard_count(self.wanted_shards)
            if self.count != self.wanted_shards:
                raise EngineError(
                    f"the group {self.group} at {self.target.describe()} has "
                    f"{self.count} shards, this watcher was started with "
                    f"{self.wanted_shards}: start it with --shards {self.count} (the count "
                    "is fixed for the life of a group)", Exit.USAGE)
            self.lease = await self.etcd.grant(self.timing.ttl)
            self.renewed_at = time.monotonic()
            await self.etcd.register(self.lease, {"member": self.member, "pid": os.getpid(),
                                                  "host": os.uname().nodename,
                                                  "since": self.clock()})
        return self.etcd

    def _drop(self) -> tuple[int, ...]:
        """Forget every shard (the next round reports them lost)."""
        with self._lock:
            lost = tuple(sorted(self.held))
            self.dropped.update(lost)
            self.held = {}
            self.fresh.clear()
        return lost

    def _held_now(self) -> dict[int, int]:
        with self._lock:
            return dict(self.held)

    # -- the coordination thread ------------------------------------------------------
    #
    # The lease must be renewed while the watcher plans: a plan of thousands of services
    # holds the watcher's event loop for seconds (more on a loaded machine), which would
    # let the lease expire under a healthy member. So every etcd call and the round's
    # timer run on a thread of their own, with their own event loop; the watcher's loop
    # only reads the rounds' results and asks the fence (both through that loop).

    def start(self) -> None:
        """Name the group (from the desired state, on the caller's thread) and start
        the rounds on the coordination thread."""
        if self._loop is not None:
            return
        if self.group is None:
            loaded = self.load()
            if loaded.state is not None:
                self.group = self._group_of(loaded.state)
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="coordination",
                                        daemon=True)
        self._thread.start()
        self._rounds = asyncio.run_coroutine_threadsafe(self._run_rounds(), loop)

    async def _on_loop(self, coro: Coroutine[object, object, T]) -> T:
        """Run ``coro`` on the coordination loop and wait for it from this one."""
        assert self._loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _run_rounds(self) -> None:
        while True:
            try:
                got = await self._round()
            except EngineError as exc:  # refused to join (another shard count): final
                got = ShardRound(error=str(exc), fatal=True)
            with self._lock:
                self._results.append(got)
            self._ready.set()
            if got.fatal:
                return
            await asyncio.sleep(self.timing.retry)

    async def round(self) -> ShardRound:
        """The rounds finished since the last call, merged (the first call waits for the
        first round): what is owned now, and every shard taken, released or lost since."""
        if self._loop is None:
            self.start()
        await self._on_loop(self._ready_wait())
        with self._lock:
            results, self._results = self._results, []
            last = results[-1] if results else self._last
            self._last = last
        if last is None:
            return ShardRound(error="no round yet")
        if not results:
            return dataclasses.replace(last, taken=(), released=(), lost=())
        return dataclasses.replace(
            last, taken=tuple(s for r in results for s in r.taken),
            released=tuple(s for r in results for s in r.released),
            lost=tuple(sorted({s for r in results for s in r.lost})))

    async def _ready_wait(self) -> None:
        await self._ready.wait()

    async def _round(self) -> ShardRound:
        """Renew, read the group, decide, take and release, and read every shard's age.
        A member that cannot renew for ``renew_deadline`` seconds drops its shards (one
        retry before the lease itself may expire and another member take them)."""
        unreachable = self.coordination.CoordinationError
        try:
            lost: tuple[int, ...] = ()
            if self.lease is not None and self.etcd is not None:
                left = await self.etcd.keepalive(self.lease)
                if left <= 0:  # expired while we were paused or cut off: start again
                    lost = self._drop()
                    self.lease = None
                else:
                    self.renewed_at = time.monotonic()
            etcd = await self._join()
            assert self.lease is not None
            members = await etcd.members()
            owners = await etcd.owners()
            # What etcd says we hold (this lease's keys); a shard we thought ours and is
            # not is lost (taken over after our lease expired).
            ours = {s: o.revision for s, o in owners.items()
                    if o.member == self.member and o.lease == self.lease}
            with self._lock:
                lost += tuple(s for s in self.held if s not in ours)
                lost += tuple(s for s in self.dropped if s not in ours)
                self.dropped.clear()
                self.held = ours
            decision = sharding.decide(self.member, sorted(members),
                                       {s: o.member for s, o in owners.items()}, self.count)
            released = []
            for shard in decision.release:
                with self._lock:  # no write is fenced on it from here on
                    revision = self.held.pop(shard)
                if await etcd.release(shard, revision):
                    released.append(shard)
                owners.pop(shard, None)
            taken = []
            for shard in decision.take:
                got = await etcd.take(shard, self.lease)
                if got is not None:
                    with self._lock:
                        self.held[shard] = got
                        self.fresh.add(shard)
                    taken.append(shard)
            owner_of = {s: o.member for s, o in owners.items()}
            owner_of.update({s: self.member for s in self._held_now()})
            statuses = await etcd.statuses()
        except unreachable as exc:
            if self.held and (self.renewed_at is None or time.monotonic() - self.renewed_at
                              >= self.timing.renew_deadline):
                self._drop()
            with self._lock:
                lost, self.dropped = tuple(sorted(self.dropped)), set()
            return ShardRound(owned=frozenset(self._held_now()), lost=lost, error=str(exc))
        finished = {s: float(v["finishedAt"]) for s, v in statuses.items()
                    if isinstance(v.get("finishedAt"), int | float)}
        now = self.clock()
        late = sharding.unreconciled(self.count, finished, owner_of, now=now,
                                     since=self.since, interval=self.resync)
        return ShardRound(
            owned=frozenset(self._held_now()), taken=tuple(taken), released=tuple(released),
            lost=tuple(sorted(set(lost))), members=tuple(sorted(members)),
            owners=tuple(sorted(owner_of.items())),
            ages=tuple((s, now - finished[s] if s in finished else None)
                       for s in range(self.count)),
            late=tuple(late))

    async def leave(self) -> None:
        """A clean stop: revoke the lease, so the others take the shards at once; then
        stop the coordination thread."""
        if self._loop is None:
            return
        if self._rounds is not None:
            self._rounds.cancel()
        with contextlib.suppress(Exception):  # leaving must not fail the stop
            await self._on_loop(self._leave())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        self._loop = None

    async def _leave(self) -> None:
        with self._lock:
            self.held = {}
        if self.etcd is None:
            return
        with contextlib.suppress(self.coordination.CoordinationError):
            if self.lease is not None:
                await self.etcd.revoke(self.lease)
        self.lease = None
        await self.etcd.close()

    # -- the owned part of the fleet ---------------------------------------------------

    def owned_names(self, desired: DesiredState) -> frozenset[str]:
        """The services of the shards this member holds now (a name no service has when it
        holds none: ``restrict`` keeps everything for an empty set)."""
        self.ids = {s.name: s.service_id for s in desired.services}
        names = sharding.services_in(self._held_now(), self.ids, self.count)
        return names or NOTHING

    def _own_part(self, desired: DesiredState) -> DesiredState:
        """``desired`` narrowed to the services of the shards held now: the scope of every
        plan this member's apply makes, its revert's and rollback's included."""
        return sharding.narrow(desired, self.owned_names(desired))

    def _names(self, desired: DesiredState, shards: frozenset[int]) -> frozenset[str]:
        self.ids = {s.name: s.service_id for s in desired.services}
        return sharding.services_in(shards, self.ids, self.count)

    async def observe(self, desired: DesiredState) -> LiveSnapshot:
        """Read only the owned shards' services (the control plane's releases and the
        clusters' apps for them), not the fleet."""
        if self.group is None:  # the first valid desired state names the group
            self.group = self._group_of(desired)
        with self._lock:
            self.fresh.clear()
            self.observed = frozenset(self.held)
            self.observed_at = dict(self.held)
        live = self._live
        snapshot = await super().observe(
            sharding.narrow(desired, self._names(desired, self.observed)))
        if self._live is not live:  # new settings: the group's notifier (issue 32)
            self.notify = self._group_notifier(desired)
        return snapshot

    # -- one outcome per commit for the group (issue 32) --------------------------------

    def _group_notifier(self, desired: DesiredState) -> Notifier | None:
        """The repo's notifier, wrapped so that this member records its shards' outcome
        in etcd and only the group's word is sent (``shell.groupnotify``)."""
        assert self._live is not None
        inner = notifier(desired, self.root, self.env, self._live.connection.gateway,
                         applying=self.applying, count=self.count_notifications,
                         environment=self.stage.name if self.stage is not None else None)
        if inner is None:
            return None
        from reconciler.shell.groupnotify import GroupNotifier

        return GroupNotifier(inner, self, self.coordination.CoordinationError)

    def outcomes_of(self, plan: Plan, report: ApplyReport | None) -> Held:
        """This member's shards' outcomes (``core.groupoutcome``) from a plan of the
        shards it observed, or from the apply in flight's report, each with the
        owner-key revision its shard was held at then."""
        from reconciler.core import groupoutcome

        held = self.applying_at if self.applying_at is not None else {
            s: r for s, r in self.observed_at.items() if s in self.planned}
        if not held:
            return ()
        shard_of = {name: sharding.shard_of(sid, self.count) for name, sid in self.ids.items()}
        found = groupoutcome.shard_outcomes(plan, report, shards=held, shard_of=shard_of,
                                            applying=self.applying, member=self.member)
        return tuple((o, held[o.shard]) for o in found)

    async def word(self, commit: str, outcomes: Held) -> Word:
        return await self._on_loop(self._word(commit, outcomes))

    async def _word(self, commit: str, outcomes: Held) -> Word:
        """Record, read the set back, and claim what is to be said (on the coordination
        loop): the final word when the set is complete, else the pending one."""
        from reconciler.core import groupoutcome
        from reconciler.shell.groupnotify import Word

        etcd, lease = self.etcd, self.lease
        if etcd is None or lease is None:
            raise self.coordination.CoordinationError("not joined to the group (no lease)")
        commits = self.coordination.GroupCommits(etcd)
        wanted = {o.shard: (revision, o.to_json()) for o, revision in outcomes
                  if self.recorded.get((commit, o.shard)) != o.to_json()}
        if wanted:
            done = await commits.record(commit, wanted)
            if not done:
                return Word(None)  # every shard lost since: the new owner reports them
            # Only the commit at hand is remembered: an older one is not recorded again.
            self.recorded = {k: v for k, v in self.recorded.items() if k[0] == commit}
            for shard in done:
                self.recorded[(commit, shard)] = wanted[shard][1]
        elif not outcomes:
            return Word(None)
        read, revisions = await commits.read(commit)
        recorded: dict[int, ShardOutcome] = {}
        for shard, raw in read.items():
            parsed = groupoutcome.ShardOutcome.from_json(raw)
            if parsed is not None and parsed.shard == shard:
                recorded[shard] = parsed
        verdict = groupoutcome.aggregate(commit, self.count, recorded, applying=self.applying)
        what = verdict.claim()
        if what is not None:
            won = await commits.claim(commit, what, seen=revisions, count=self.count,
                                      others=groupoutcome.FINAL_WORDS)
            return Word(verdict, "final" if won else None)
        won = await commits.claim_pending(commit, lease, list(groupoutcome.FINAL_WORDS),
                                          len(verdict.reported))
        return Word(verdict, "pending" if won else None)

    async def pending_in_flight(self, commit: str) -> bool:
        async def read() -> bool:
            if self.etcd is None:
                return False
            return bool(await self.coordination.GroupCommits(self.etcd).in_flight(commit))
        return await self._on_loop(read())

    async def pending_delivered(self, commit: str, reported: int) -> None:
        async def clear() -> None:
            if self.etcd is not None:
                await self.coordination.GroupCommits(self.etcd).delivered(commit, reported)
        await self._on_loop(clear())

    async def close(self) -> None:
        from reconciler.shell.groupnotify import GroupNotifier

        if isinstance(self.notify, GroupNotifier) and self._loop is not None:
            await self.notify.settle(min(5.0, self.notify.config.delivery.drain_seconds))
        await super().close()

    async def _ask_again(self, desired: DesiredState, provenance: Provenance,
                         ) -> Greenfield | None:
        narrowed = sharding.narrow(desired, self._names(desired, self.observed))
        return await super()._ask_again(narrowed, provenance)

    def plan(self, desired: DesiredState, snapshot: LiveSnapshot,
             provenance: Provenance, *, max_age: float | None = None) -> Plan:
        """The plan of the shards both observed and still held (a shard taken since is
        planned at the resync its taking triggers)."""
        self.planned = self.observed & frozenset(self._held_now())
        names = self._names(desired, self.planned)
        self.only = names or NOTHING
        return super().plan(sharding.narrow(desired, names), snapshot, provenance,
                            max_age=max_age)

    async def apply(self, hook: Hook) -> ApplyRun:
        """Apply the owned services at the commit HEAD is at, each write fenced, under
        the environment's rules; with ``--on-gate-failure revert``, revert the failed
        services whose shards this member still holds (asked of the fence first), and
        fence the rollback's writes too. Every plan made here, the revert's and the
        rollback's included, reads only the owned shards' services (the scope)."""
        desired, provenance = load_consistent(self.root)
        only = self.owned_names(desired)
        desired = sharding.narrow(desired, only)
        self.applying_at = self._held_now()
        try:
            return await self._apply_owned(desired, provenance, only, hook)
        finally:
            self.applying_at = None

    async def _apply_owned(self, desired: DesiredState, provenance: Provenance,
                           only: frozenset[str], hook: Hook) -> ApplyRun:
        async with Reconciler(self.root, desired, overrides=self.overrides,
                              env=self.env, stage=self.stage,
                              scope=self._own_part) as reconciler:
            run = await reconciler.apply(
                desired, provenance, hook=hook, only=only, fence=self.fence,
                deadline=Deadline.after(self.timeout) if self.timeout is not None else None,
                notify=self.notify)
            return await revert_after(reconciler, self.root, run, self.on_gate_failure,
                                      self.pull, hook, fence=self.fence, notify=self.notify)

    async def fence(self, change: Change) -> dict[str, object]:
        """Just before a write: this member still holds the change's shard, checked in one
        etcd transaction on the owner key's revision; else ``applying.Fenced`` (and the
        shard is dropped). The token goes into the journal with the intent."""
        if self._loop is None:
            raise applying.Fenced("this watcher has not joined its group")
        return await self._on_loop(self._fence(change))

    async def _fence(self, change: Change) -> dict[str, object]:
        shard = sharding.shard_of(change.service_id, self.count)
        revision = self._held_now().get(shard)
        if revision is None or self.etcd is None or self.lease is None:
            raise applying.Fenced(f"shard {shard} of {change.service} is not ours")
        if self.renewed_at is None or \
                time.monotonic() - self.renewed_at >= self.timing.renew_deadline:
            self._drop()
            raise applying.Fenced(f"our lease was not renewed within "
                                  f"{self.timing.renew_deadline:g}s; shard {shard} dropped")
        try:
            checked = await self.etcd.fence(shard, revision)
        except self.coordination.CoordinationError as exc:
            raise applying.Fenced(f"etcd unreachable, cannot prove shard {shard} is "
                                  f"ours ({safe(exc, 200)})") from exc
        if checked is None:
            with self._lock:
                self.held.pop(shard, None)
                self.dropped.add(shard)
            raise applying.Fenced(f"shard {shard} of {change.service} is no longer ours "
                                  "(taken over, or our lease expired); dropped")
        return {"member": self.member, "group": self.group, "shard": shard,
                "ownerRevision": revision, "lease": self.lease, "checkedAt": checked}

    async def publish(self, commit: str | None) -> None:
        """After a finished reconcile: each shard it covered and still holds, now."""
        if self._loop is not None:
            await self._on_loop(self._publish(commit, self.planned))

    async def _publish(self, commit: str | None, planned: frozenset[int]) -> None:
        if self.etcd is None or self.lease is None:
            return
        now = self.clock()
        shards = {s: (rev, {"owner": self.member, "finishedAt": now, "commit": commit,
                            "lease": self.lease, "ownerRevision": rev})
                  for s, rev in self._held_now().items() if s in planned}
        with contextlib.suppress(self.coordination.CoordinationError):
            await self.etcd.publish(shards)


async def shard_report(root: Path, *, overrides: Overrides, env: Mapping[str, str],
                       target: str, resync: float) -> ShardReport:
    """Read the group (members, owners, each shard's last finished reconcile) without
    joining it, and judge which shards are late with ``core.sharding``."""
    steps = ShardedWatchSteps(root, overrides=overrides, env=env, target=target, shards=1,
                              timing=sharding.LeaseTiming(), resync=resync,
                              member="status-reader")
    loaded = steps.load()
    if loaded.state is None:
        raise EngineError(f"{root}: the desired state is invalid, so its group cannot be "
                          "named", Exit.ERROR)
    group = steps._group_of(loaded.state)
    etcd = steps.coordination.Etcd(steps.target, group, "status-reader")
    try:
        count = await etcd.configured()
        if count is None:
            raise EngineError(f"no group {group} at {steps.target.describe()}: no watcher "
                              "of this root ever joined it", Exit.ERROR)
        members = await etcd.members()
        owners = {s: o.member for s, o in (await etcd.owners()).items()}
        statuses = await etcd.statuses()
    except steps.coordination.CoordinationError as exc:
        raise EngineError(str(exc)) from exc
    finally:
        await etcd.close()
    now = time.time()
    finished = {s: float(v["finishedAt"]) for s, v in statuses.items()
                if isinstance(v.get("finishedAt"), int | float)}
    starts = [float(m["since"]) for m in members.values()
              if isinstance(m.get("since"), int | float)]
    late = sharding.unreconciled(count, finished, owners, now=now,
                                 since=min(starts) if starts else 0.0, interval=resync)
    rows = tuple((s, owners.get(s), now - finished[s] if s in finished else None,
                  str(statuses[s].get("commit")) if s in statuses else None)
                 for s in range(count))
    return ShardReport(group, steps.target.describe(), count, tuple(sorted(members)),
                       rows, tuple(late))
