"""The etcd client of sharded watching: a member's lease, its registration, the shard
keys it owns, the fencing check before each write, and the per-shard status it
publishes.

Owns the key layout under ``/reconcile/groups/<group>/`` and every etcd call, through
``aetcd`` (asyncio, gRPC; chosen over ``etcd3gw`` -- the v3 JSON gateway over
``requests``, blocking -- after measuring both against the same etcd 3.5: a transaction
1.3-1.5 ms against 5.0-5.8 ms, a lease renewal 1.4 ms against 3.6-4.4 ms, and it runs on
the watcher's own event loop instead of a thread; docs/scaling.md, "Choosing the client").

Keys (``<p>`` = ``/reconcile/groups/<group>``):

- ``<p>/config``: the group's shard count, written once by the first member (a member
  started with another count refuses to join);
- ``<p>/members/<member>``: one per live member, attached to its lease;
- ``<p>/shards/<n>/owner``: the owner's member id, attached to its lease, created only
  when absent (so at most one owner; gone when the owner's lease expires);
- ``<p>/shards/<n>/status``: the last finished reconcile of the shard (owner, wall-clock
  time, commit, lease), with no lease, so a dead owner's last word stays readable;
- ``<p>/commits/<commit>/shards/<n>``: the shard's outcome at that commit
  (``core.groupoutcome``), written by its owner only while it still owns the shard;
- ``<p>/commits/<commit>/sent/<what>``: created once (create-if-absent) by the member
  that sends the group's word on the commit (a final word, or ``pending-<k>``: each
  count of shards reported is told once), so two members never both send it, and only
  while every shard's outcome is still as that member read it (a member that read the
  set before a shard changed it says nothing); claiming one final word clears the other
  final words, so a commit told success can be told failure when a shard fails again;
- ``<p>/commits/<commit>/inflight/<k>``: attached to the lease of the member delivering
  the "k of N shards reported" word, deleted when it is delivered; the final word waits for
  it, so a late pending never lands over it.

The outcome and ``sent`` keys of a commit are attached to a retention lease
(``COMMIT_RETENTION_SECONDS``, granted with each write): etcd deletes them when it
expires, so a long-lived group does not keep every commit it ever saw. Nothing is
deleted by a member's clock or by guessing which commit is old: a member still working
on a commit re-attaches its keys to a fresh lease when it writes.

Must not decide anything: which shards to take or release is ``core.sharding``; when to
call is ``shell.sharded`` and the engine. Every failure to reach etcd is a
``CoordinationError``: the caller then writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aetcd
import aetcd.exceptions

T = TypeVar("T")

SCHEME = "etcd://"
_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class CoordinationError(Exception):
    """etcd could not be reached or refused a call; nothing may be written meanwhile."""


@dataclass(frozen=True)
class Target:
    """Where the group lives: etcd endpoints (tried in order) and the group's name."""

    endpoints: tuple[tuple[str, int], ...]
    group: str | None

    def describe(self) -> str:
        return SCHEME + ",".join(f"{h}:{p}" for h, p in self.endpoints) + (
            f"/{self.group}" if self.group else "")


def parse_target(url: str) -> Target:
    """``etcd://HOST:PORT[,HOST:PORT...][/GROUP]``; raises ``ValueError`` saying what is
    wrong."""
    if not url.startswith(SCHEME):
        raise ValueError(f"{url!r}: a coordination address starts with {SCHEME} "
                         "(etcd://HOST:PORT[,HOST:PORT...][/GROUP])")
    rest = url[len(SCHEME):]
    hosts, _, group = rest.partition("/")
    if group and not _GROUP.match(group):
        raise ValueError(f"{url!r}: the group {group!r} must be letters, digits, '.', '_' "
                         "or '-' (at most 100)")
    endpoints = []
    for part in hosts.split(","):
        host, sep, port = part.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{url!r}: {part.strip() or '(empty)'!r} is not HOST:PORT")
        endpoints.append((host, int(port)))
    return Target(tuple(endpoints), group or None)


@dataclass(frozen=True)
class Owned:
    """An owner key as read: who owns the shard, and the key's revision (the fencing
    token: it changes whenever the key is deleted and created again)."""

    member: str
    revision: int
    lease: int


class Etcd:
    """One member's connection to the group. Tries the endpoints in order; a call that
    cannot reach one moves to the next, and raises ``CoordinationError`` when none
    answers."""

    def __init__(self, target: Target, group: str, member: str, *,
                 timeout: float = 3.0) -> None:
        self.target = target
        self.prefix = f"/reconcile/groups/{group}"
        self.member = member
        self.timeout = timeout
        self._at = 0
        self._client: aetcd.Client | None = None
        #: The lease commit keys are kept under, and when it was granted (``GroupCommits``).
        self.retention: tuple[int, float] | None = None

    # -- plumbing ---------------------------------------------------------------------

    def _key(self, *parts: object) -> bytes:
        return "/".join([self.prefix, *map(str, parts)]).encode()

    async def _connected(self) -> aetcd.Client:
        if self._client is None:
            host, port = self.target.endpoints[self._at % len(self.target.endpoints)]
            # A whole-number gRPC deadline per call: etcd answers in milliseconds on a
            # healthy member, and a stalled one must not hold the round past its retry.
            self._client = aetcd.Client(host, port, timeout=max(1, round(self.timeout)))
            await self._client.connect()
        return self._client

    async def _call(self, what: str, call: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        errors = []
        for _ in range(len(self.target.endpoints)):
            try:
                client = await self._connected()
                async with asyncio.timeout(self.timeout):
                    return await call(client)
            except (aetcd.exceptions.ClientError, OSError, TimeoutError) as exc:
                host, port = self.target.endpoints[self._at % len(self.target.endpoints)]
                errors.append(f"{host}:{port}: {type(exc).__name__} {exc}".strip())
                await self._drop()
                self._at += 1
        raise CoordinationError(f"etcd {what}: no endpoint answered ({'; '.join(errors)})")

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # a broken channel: nothing to close
                await client.close()

    async def close(self) -> None:
        await self._drop()

    # -- the group ----------------------------------------------------------------------

    async def shard_count(self, wanted: int) -> int:
        """The group's shard count: ``wanted`` if this member is the first, else the one
        the group already has."""
        key = self._key("config")

        async def run(c: aetcd.Client) -> int:
            ok, replies = await c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[c.transactions.put(key, json.dumps({"shards": wanted}).encode())],
                failure=[c.transactions.get(key)])
            if ok:
                return wanted
            value = replies[0][0][0]
            return int(json.loads(value)["shards"])

        return await self._call("read the group's shard count", run)

    async def configured(self) -> int | None:
        """The group's shard count, or None when no member ever joined it (read-only)."""
        key = self._key("config")

        async def run(c: aetcd.Client) -> int | None:
            got = await c.get(key)
            return None if got is None else int(json.loads(got.value)["shards"])

        return await self._call("read the group's shard count", run)

    async def grant(self, ttl: int) -> int:
        async def run(c: aetcd.Client) -> int:
            lease = await c.lease(ttl)
            return int(lease.id)

        return await self._call("grant a lease", run)

    async def keepalive(self, lease: int) -> int:
        """Renew ``lease``; its remaining TTL in seconds, 0 when it has already expired."""
        async def run(c: aetcd.Client) -> int:
            reply = await c.refresh_lease(lease)
            return int(reply.TTL) if reply is not None else 0

        return await self._call("renew the lease", run)

    async def revoke(self, lease: int) -> None:
        async def run(c: aetcd.Client) -> None:
            await c.revoke_lease(lease)

        await self._call("revoke the lease", run)

    async def register(self, lease: int, info: dict[str, Any]) -> None:
        key = self._key("members", self.member)

        async def run(c: aetcd.Client) -> None:
            await c.put(key, json.dumps(info, sort_keys=True).encode(), lease=lease)

        await self._call("register the member", run)

    async def members(self) -> dict[str, dict[str, Any]]:
        prefix = self._key("members", "")

        async def run(c: aetcd.Client) -> dict[str, dict[str, Any]]:
            got = await c.get_prefix(prefix)
            return {kv.key[len(prefix):].decode(): _json(kv.value) for kv in got}

        return await self._call("list the members", run)

    async def owners(self) -> dict[int, Owned]:
        prefix = self._key("shards", "")

        async def run(c: aetcd.Client) -> dict[int, Owned]:
            got = await c.get_prefix(prefix)
            found = {}
            for kv in got:
                shard, _, leaf = kv.key[len(prefix):].decode().partition("/")
                if leaf == "owner" and shard.isdigit():
                    found[int(shard)] = Owned(kv.value.decode(), int(kv.mod_revision),
                                              int(kv.lease))
            return found

        return await self._call("read the shard owners", run)

    async def take(self, shard: int, lease: int) -> int | None:
        """Own ``shard`` if nobody does: the owner key's revision, or None (taken)."""
        key = self._key("shards", shard, "owner")

        async def run(c: aetcd.Client) -> int | None:
            ok, replies = await c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[c.transactions.put(key, self.member.encode(), lease=lease)],
                failure=[])
            return int(replies[0].response_put.header.revision) if ok else None

        return await self._call(f"take shard {shard}", run)

    async def release(self, shard: int, revision: int) -> bool:
        """Give ``shard`` up if this member still holds it at ``revision``."""
        key = self._key("shards", shard, "owner")

        async def run(c: aetcd.Client) -> bool:
            ok, _ = await c.transaction(
                compare=[c.transactions.mod(key) == revision,
                         c.transactions.value(key) == self.member.encode()],
                success=[c.transactions.delete(key)], failure=[])
            return bool(ok)

        return await self._call(f"release shard {shard}", run)

    async def fence(self, shard: int, revision: int) -> int | None:
        """Whether this member still owns ``shard`` as taken at ``revision``, in one
        linearizable transaction: the store's revision then (the fencing token the
        journal records), or None when the key moved, is gone or is someone else's."""
        key = self._key("shards", shard, "owner")

        async def run(c: aetcd.Client) -> int | None:
            ok, replies = await c.transaction(
                compare=[c.transactions.mod(key) == revision,
                         c.transactions.value(key) == self.member.encode()],
                success=[c.transactions.get(key)], failure=[])
            if not ok or not replies or not replies[0]:
                return None
            return int(replies[0][0][1].header.revision)

        return await self._call(f"check shard {shard} before a write", run)

    async def publish(self, shards: dict[int, tuple[int, dict[str, Any]]]) -> None:
        """Each shard's status, in one transaction, only for shards still owned at the
        given revisions (a member that lost a shard never writes over its new owner)."""
        if not shards:
            return

        async def run(c: aetcd.Client) -> None:
            for shard, (revision, status) in sorted(shards.items()):
                owner = self._key("shards", shard, "owner")
                await c.transaction(
                    compare=[c.transactions.mod(owner) == revision],
                    success=[c.transactions.put(self._key("shards", shard, "status"),
                                                json.dumps(status, sort_keys=True).encode())],
                    failure=[])

        await self._call("publish the shards' status", run)

    async def statuses(self) -> dict[int, dict[str, Any]]:
        prefix = self._key("shards", "")

        async def run(c: aetcd.Client) -> dict[int, dict[str, Any]]:
            got = await c.get_prefix(prefix)
            found = {}
            for kv in got:
                shard, _, leaf = kv.key[len(prefix):].decode().partition("/")
                if leaf == "status" and shard.isdigit():
                    found[int(shard)] = _json(kv.value)
            return found

        return await self._call("read the shards' status", run)


#: How long a commit's recorded outcomes and claims are kept (a week: longer than any
#: watcher works on one commit, short enough that etcd's keyspace stays small).
COMMIT_RETENTION_SECONDS = 7 * 24 * 3600


#: A member grants a new retention lease once its current one is this old, so each key
#: lives between six and seven days after its last write, at one lease per member per day.
RETENTION_RENEW_SECONDS = 24 * 3600


class GroupCommits:
    """The group's outcomes per commit (issue 32): each shard's recorded by its owner,
    the once-only claims of what is sent, and the pending word in flight. Methods of
    ``Etcd`` by composition, so the ownership keys stay in one class."""

    def __init__(self, etcd: Etcd) -> None:
        self.etcd = etcd

    def _key(self, commit: str, *parts: object) -> bytes:
        return self.etcd._key("commits", commit, *parts)

    async def _retention(self, c: aetcd.Client) -> int:
        """The lease the commit keys written now are attached to (kept on the member's
        ``Etcd``: one per member, renewed daily, never a lease per write)."""
        held = self.etcd.retention
        now = time.monotonic()
        if held is None or now - held[1] >= RETENTION_RENEW_SECONDS:
            held = (int((await c.lease(COMMIT_RETENTION_SECONDS)).id), now)
            self.etcd.retention = held
        return held[0]

    async def record(self, commit: str, outcomes: dict[int, tuple[int, dict[str, Any]]],
                     ) -> list[int]:
        """Each shard's outcome at ``commit``, only for shards this member still owns at
        the given owner-key revisions (one transaction each); the shards recorded."""
        etcd = self.etcd

        async def run(c: aetcd.Client) -> list[int]:
            done = []
            kept = await self._retention(c)
            for shard, (revision, outcome) in sorted(outcomes.items()):
                owner = etcd._key("shards", shard, "owner")
                ok, _ = await c.transaction(
                    compare=[c.transactions.mod(owner) == revision,
                             c.transactions.value(owner) == etcd.member.encode()],
                    success=[c.transactions.put(self._key(commit, "shards", shard),
                                                json.dumps(outcome, sort_keys=True).encode(),
                                                lease=kept)],
                    failure=[])
                if ok:
                    done.append(shard)
            return done

        return await etcd._call(f"record the shards' outcome at {commit[:12]}", run)

    async def outcomes(self, commit: str) -> dict[int, dict[str, Any]]:
        return (await self.read(commit))[0]

    async def read(self, commit: str) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
        """Each shard's recorded outcome at ``commit``, and the revision it was read at
        (what ``claim`` checks is still so)."""
        prefix = self._key(commit, "shards", "")

        async def run(c: aetcd.Client) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
            got = await c.get_prefix(prefix)
            outcomes: dict[int, dict[str, Any]] = {}
            revisions: dict[int, int] = {}
            for kv in got:
                tail = kv.key[len(prefix):]
                if tail.isdigit():
                    outcomes[int(tail)] = _json(kv.value)
                    revisions[int(tail)] = int(kv.mod_revision)
            return outcomes, revisions

        return await self.etcd._call(f"read the shards' outcome at {commit[:12]}", run)

    async def claim(self, commit: str, what: str, *, seen: dict[int, int] | None = None,
                    count: int = 0, others: tuple[str, ...] = ()) -> bool:
        """Whether this member is the one to send ``what`` about ``commit``: creates the
        ``sent`` key if absent, in one transaction (two members never both win). With
        ``seen`` (the revisions ``read`` gave for shards ``0 .. count-1``), only while
        every shard's outcome is still what was read: a member that read the set before
        another shard changed it says nothing, the one that read the change decides.
        Claiming ``what`` clears the ``others`` claimed before, so a commit that went
        failure, then success, can be told failure again."""
        key = self._key(commit, "sent", what)
        value = json.dumps({"member": self.etcd.member}).encode()

        async def run(c: aetcd.Client) -> bool:
            unchanged = []
            if seen is not None:
                for shard in range(count):
                    at = self._key(commit, "shards", shard)
                    unchanged.append(c.transactions.mod(at) == seen[shard] if shard in seen
                                     else c.transactions.create(at) == 0)
            kept = await self._retention(c)
            ok, _ = await c.transaction(
                compare=[c.transactions.create(key) == 0, *unchanged],
                success=[c.transactions.put(key, value, lease=kept),
                         *(c.transactions.delete(self._key(commit, "sent", o))
                           for o in others if o != what)], failure=[])
            return bool(ok)

        return await self.etcd._call(f"claim the word on {commit[:12]}", run)

    async def claim_pending(self, commit: str, lease: int, finals: list[str],
                            reported: int) -> bool:
        """Whether this member sends the pending word "``reported`` of N" about
        ``commit``: once per count (the status moves as shards report), only while no
        final word was claimed, and marked in flight (on this member's lease) until
        ``delivered``."""
        said = self._key(commit, "sent", f"pending-{reported}")
        inflight = self._key(commit, "inflight", reported)
        value = json.dumps({"member": self.etcd.member}).encode()

        async def run(c: aetcd.Client) -> bool:
            kept = await self._retention(c)
            ok, _ = await c.transaction(
                compare=[c.transactions.create(said) == 0,
                         *(c.transactions.create(self._key(commit, "sent", f)) == 0
                           for f in finals)],
                success=[c.transactions.put(said, value, lease=kept),
                         c.transactions.put(inflight, value, lease=lease)], failure=[])
            return bool(ok)

        return await self.etcd._call(f"claim the pending word on {commit[:12]}", run)

    async def delivered(self, commit: str, reported: int) -> None:
        key = self._key(commit, "inflight", reported)

        async def run(c: aetcd.Client) -> None:
            await c.delete(key)

        await self.etcd._call(f"clear the pending word on {commit[:12]}", run)

    async def in_flight(self, commit: str) -> bool:
        """Whether any pending word (of any count) is still being delivered."""
        prefix = self._key(commit, "inflight", "")

        async def run(c: aetcd.Client) -> bool:
            return len(await c.get_prefix(prefix)) > 0

        return await self.etcd._call(f"read the pending word on {commit[:12]}", run)


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
