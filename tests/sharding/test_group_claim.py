"""The group's once-only claim of a commit's word, on a real etcd: a member that read the
shards' outcomes before another shard changed them says nothing (the member that read the
change decides), and a final word claimed clears the others, so a commit told success can
be told failure when a shard fails again."""

from __future__ import annotations

import asyncio
import json

import pytest

from reconciler.sandbox import etcd as etcd_server
from reconciler.shell import coordination

COMMIT = "a" * 40
FINALS = ("success", "failure", "no_go", "planned")


async def _put(member: coordination.Etcd, shard: int, state: str) -> None:
    key = member._key("commits", COMMIT, "shards", shard)
    body = json.dumps({"shard": shard, "state": state}).encode()

    async def run(c: object) -> None:
        await c.put(key, body)  # type: ignore[attr-defined]

    await member._call("put an outcome", run)


async def _walk(url: str) -> list[bool]:
    target = coordination.parse_target(url)
    a = coordination.Etcd(target, "g", "member-a")
    b = coordination.Etcd(target, "g", "member-b")
    try:
        ga, gb = coordination.GroupCommits(a), coordination.GroupCommits(b)
        for shard in range(3):
            await _put(a, shard, "proven")
        read_a, seen_a = await ga.read(COMMIT)
        assert sorted(read_a) == [0, 1, 2]
        await _put(b, 1, "failed")  # shard 1 fails again after A read the set
        _, seen_b = await gb.read(COMMIT)
        said = [await ga.claim(COMMIT, "success", seen=seen_a, count=3, others=FINALS),
                await gb.claim(COMMIT, "failure", seen=seen_b, count=3, others=FINALS)]
        # Proven again, then failed again: each final word is told, in turn.
        await _put(b, 1, "proven")
        _, seen = await gb.read(COMMIT)
        said.append(await gb.claim(COMMIT, "success", seen=seen, count=3, others=FINALS))
        said.append(await ga.claim(COMMIT, "success", seen=seen, count=3, others=FINALS))
        await _put(a, 1, "failed")
        _, seen = await ga.read(COMMIT)
        said.append(await ga.claim(COMMIT, "failure", seen=seen, count=3, others=FINALS))
        return said
    finally:
        await a.close()
        await b.close()


@pytest.mark.integration
def test_a_stale_read_never_claims_and_a_final_word_can_be_told_again(
        etcd: etcd_server.Etcd) -> None:
    assert asyncio.run(_walk(etcd.url)) == [False, True, True, False, True]


async def _kept(url: str) -> list[int]:
    """The lease each written commit key is attached to, and its granted TTL."""
    target = coordination.parse_target(url)
    a = coordination.Etcd(target, "g", "member-a")
    try:
        commits = coordination.GroupCommits(a)
        owner = a._key("shards", 0, "owner")

        async def own(c: object) -> int:
            await c.put(owner, b"member-a")  # type: ignore[attr-defined]
            return int((await c.get(owner)).mod_revision)  # type: ignore[attr-defined]

        revision = await a._call("own shard 0", own)
        assert await commits.record(COMMIT, {0: (revision, {"shard": 0, "state": "proven"})}) \
            == [0]
        assert await commits.claim(COMMIT, "success", others=FINALS)

        async def leases(c: object) -> list[int]:
            ttls = []
            for key in (a._key("commits", COMMIT, "shards", 0),
                        a._key("commits", COMMIT, "sent", "success")):
                kv = await c.get(key)  # type: ignore[attr-defined]
                assert kv is not None and kv.lease != 0, key
                info = await c.get_lease_info(kv.lease)  # type: ignore[attr-defined]
                ttls.append(int(info.grantedTTL))
            return ttls

        return await a._call("read the leases", leases)
    finally:
        await a.close()


@pytest.mark.integration
def test_a_commits_keys_expire_with_a_retention_lease(etcd: etcd_server.Etcd) -> None:
    """A long-lived group does not keep every commit it saw: etcd drops them."""
    assert asyncio.run(_kept(etcd.url)) == [coordination.COMMIT_RETENTION_SECONDS] * 2


async def _pendings(url: str) -> tuple[list[bool], list[bool]]:
    target = coordination.parse_target(url)
    a = coordination.Etcd(target, "g", "member-a")
    b = coordination.Etcd(target, "g", "member-b")
    try:
        ga, gb = coordination.GroupCommits(a), coordination.GroupCommits(b)
        lease_a, lease_b = await a.grant(30), await b.grant(30)
        said = [await ga.claim_pending(COMMIT, lease_a, list(FINALS), 1),
                await gb.claim_pending(COMMIT, lease_b, list(FINALS), 1),  # told already
                await gb.claim_pending(COMMIT, lease_b, list(FINALS), 2)]  # news
        flight = [await ga.in_flight(COMMIT)]
        await ga.delivered(COMMIT, 1)
        flight.append(await ga.in_flight(COMMIT))  # 2 of N is still being delivered
        await gb.delivered(COMMIT, 2)
        flight.append(await ga.in_flight(COMMIT))
        await _put(a, 0, "proven")
        assert await ga.claim(COMMIT, "success", others=FINALS)
        said.append(await ga.claim_pending(COMMIT, lease_a, list(FINALS), 2 + 1))
        return said, flight
    finally:
        await a.close()
        await b.close()


@pytest.mark.integration
def test_each_count_of_shards_reported_is_told_once_and_never_after_the_final_word(
        etcd: etcd_server.Etcd) -> None:
    said, flight = asyncio.run(_pendings(etcd.url))
    assert said == [True, False, True, False]
    assert flight == [True, True, False]
