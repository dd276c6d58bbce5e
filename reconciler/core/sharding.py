"""Shards of a fleet shared by several watchers: which shard a service is in, each
member's fair share, which shards a member takes or releases, and which shards nobody
has reconciled for too long.

Owns these decisions as pure functions of what the caller read from the coordination
store (members, owners, per-shard status) and the clock it passes in. Must not read or
write anything: the etcd client is ``shell.coordination``, the sequencing of a round
(renew, read, decide, take, release, publish) is ``engine.ShardedWatchSteps``, and the
timing of rounds is ``shell.sharded``.

``ShardReport`` (what ``watch-status --shards`` read of a group) is declared here, not in
the engine, so ``render.shardview`` can word it importing only the core.

Why these rules:

- A service's shard is ``sha256(serviceId) mod count``: stable across processes,
  machines and Python versions (``hash()`` is salted per process), and ``serviceId`` is
  the control plane's identity, which survives renaming the document.
- The shard count is fixed for the life of a group (changing it moves most services); it
  should be several times the most watchers you expect, so a fair share is even to
  within one shard: 16 by default, within 1/16 of the fleet for up to 8 watchers.
- Fair share: members sorted by id; each gets ``count // n`` shards and the first
  ``count % n`` one more. Every member computes the same quotas from the same member
  list, and the quotas add up to ``count``: a member over its quota releases the extras,
  one under it takes free shards, so when the list is stable every shard ends up owned
  by exactly one member. A member takes only a *free* shard (etcd's create-if-absent
  transaction settles any race), so two members never own one shard at once.
- Which free shards a member prefers is rendezvous hashing of (member, shard): members
  racing for free shards mostly want different ones, and a member that comes back
  prefers the shards it had.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `watch --shards`'s help reads the defaults without the models
    from reconciler.core.desired import DesiredState

#: The default shard count (``--shards``; settings ``coordination.shards``).
DEFAULT_SHARDS = 16
MAX_SHARDS = 4096


def shard_of(service_id: str, count: int) -> int:
    """The shard ``service_id`` belongs to, in ``0 .. count-1``."""
    if count < 1:
        raise ValueError("a group has at least one shard")
    digest = hashlib.sha256(service_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def services_in(shards: Iterable[int], service_ids: Mapping[str, str], count: int,
                ) -> frozenset[str]:
    """The names (``service_ids``: name -> serviceId) whose shard is one of ``shards``."""
    wanted = frozenset(shards)
    return frozenset(name for name, sid in service_ids.items()
                     if shard_of(sid, count) in wanted)


def narrow(desired: DesiredState, names: frozenset[str]) -> DesiredState:
    """The desired state of the named services only: what one member observes, plans and
    applies. Grant entries of other services resolve to nothing (``desired_grants``), so
    a member never plans, let alone prunes, another shard's grants."""
    return desired.model_copy(update={
        "services": tuple(s for s in desired.services if s.name in names)})


def quotas(members: Sequence[str], count: int) -> dict[str, int]:
    """Each member's fair share: ``count // n``, and one more for the first ``count % n``
    members in sorted order."""
    ordered = sorted(set(members))
    if not ordered:
        return {}
    base, extra = divmod(count, len(ordered))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(ordered)}


def preference(member: str, shard: int) -> int:
    """Rendezvous score: a member prefers the shards with the highest scores."""
    digest = hashlib.sha256(f"{member}\x00{shard}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True)
class Decision:
    """What one member does in one round: shards to take (free ones) and to release
    (its own), each in the order to do it."""

    take: tuple[int, ...] = ()
    release: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.take and not self.release


def decide(me: str, members: Sequence[str], owners: Mapping[int, str], count: int) -> Decision:
    """The round of ``me``, given the live members and each owned shard's owner.

    A member missing from ``members`` (its registration expired) releases everything it
    still owns and takes nothing. Otherwise it releases what is over its quota (the
    shards it prefers least) or takes free shards up to it (those it prefers most)."""
    mine = sorted(s for s, owner in owners.items() if owner == me and 0 <= s < count)
    if me not in members:
        return Decision(release=tuple(mine))
    quota = quotas(members, count)[me]
    if len(mine) > quota:
        extras = sorted(mine, key=lambda s: preference(me, s))[: len(mine) - quota]
        return Decision(release=tuple(extras))
    free = [s for s in range(count) if s not in owners]
    wanted = sorted(free, key=lambda s: -preference(me, s))[: quota - len(mine)]
    return Decision(take=tuple(wanted))


@dataclass(frozen=True)
class ShardAge:
    """A shard nobody has reconciled for too long: its owner (None: nobody) and for how
    many seconds (since its last finished reconcile, or since the watcher first looked)."""

    shard: int
    owner: str | None
    age: float
    never: bool  # no reconcile of it was ever published

    def describe(self) -> str:
        who = f"owner {self.owner}" if self.owner else "no owner"
        when = "never reconciled" if self.never else "not reconciled"
        return f"shard {self.shard} ({who}): {when} for {self.age:.0f}s"


def unreconciled(count: int, finished: Mapping[int, float], owners: Mapping[int, str],
                 *, now: float, since: float, interval: float) -> list[ShardAge]:
    """Shards whose last finished reconcile (``finished``: wall-clock seconds) is older
    than two resync intervals. A shard with none counts from ``since`` (when this watcher
    started looking), so a group that is just starting is given two intervals too."""
    limit = 2 * interval
    late = []
    for shard in range(count):
        last = finished.get(shard)
        age = now - (last if last is not None else since)
        if age > limit:
            late.append(ShardAge(shard, owners.get(shard), age, last is None))
    return late


@dataclass(frozen=True)
class LeaseTiming:
    """How long a member's lease lives, when it must have renewed it by, how often it
    tries. Flux's defaults for its controllers' Kubernetes Leases (35 s duration, 30 s
    renew deadline, 5 s retry; the retry raised from 10 s to ride out API-server
    outages, source-controller #318): the lease outlives the renew deadline by one retry
    period, so a member that cannot renew stops writing (drops its shards) at least one
    retry before anyone else may take them."""

    ttl: int = 35
    renew_deadline: float = 30.0
    retry: float = 5.0

    def problems(self) -> list[str]:
        said = []
        if self.ttl < 2:
            said.append(f"the lease TTL must be at least 2 seconds (got {self.ttl})")
        if self.retry <= 0:
            said.append(f"the retry period must be > 0 (got {self.retry:g})")
        if not self.retry < self.renew_deadline < self.ttl:
            said.append(f"needs retry < renew deadline < lease TTL (got {self.retry:g} < "
                        f"{self.renew_deadline:g} < {self.ttl})")
        return said


@dataclass(frozen=True)
class ShardReport:
    """``reconcile watch-status --shards``: the group as etcd holds it now."""

    group: str
    target: str
    count: int
    members: tuple[str, ...]
    #: shard, owner (None: nobody), seconds since its last finished reconcile (None:
    #: never), the commit it reconciled
    rows: tuple[tuple[int, str | None, float | None, str | None], ...]
    late: tuple[ShardAge, ...]

    @property
    def healthy(self) -> bool:
        return not self.late and all(owner is not None for _, owner, _, _ in self.rows)
