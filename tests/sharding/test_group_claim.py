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
