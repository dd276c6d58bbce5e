"""core.sharding: the pure ownership rules, as properties (hypothesis) and a simulation
of a group of members taking turns until nothing changes."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import sharding
from reconciler.core.sharding import Decision, LeaseTiming, decide, quotas, shard_of

members_st = st.lists(st.text("abcdefgh0123456789-", min_size=1, max_size=8),
                      min_size=1, max_size=9, unique=True)
counts = st.integers(min_value=1, max_value=64)


def test_shard_of_is_stable_across_processes_and_in_range() -> None:
    # sha256, not the salted hash(): these values are the same on every machine
    assert [shard_of(f"svc-{i}", 16) for i in range(6)] == \
        [shard_of(f"svc-{i}", 16) for i in range(6)]
    assert shard_of("svc-checkout", 16) == int.from_bytes(
        __import__("hashlib").sha256(b"svc-checkout").digest()[:8], "big") % 16
    assert all(0 <= shard_of(f"s{i}", 7) < 7 for i in range(200))


@given(members_st, counts)
def test_quotas_add_up_and_differ_by_at_most_one(members: list[str], count: int) -> None:
    q = quotas(members, count)
    assert sum(q.values()) == count
    assert max(q.values()) - min(q.values()) <= 1
    assert set(q) == set(members)


@given(members_st, counts, st.data())
def test_a_decision_takes_only_free_shards_and_releases_only_its_own(
        members: list[str], count: int, data: st.DataObject) -> None:
    everyone = [*members, "gone"]
    owners = {s: data.draw(st.sampled_from(everyone)) for s in range(count)
              if data.draw(st.booleans())}
    me = data.draw(st.sampled_from(everyone))
    d = decide(me, members, owners, count)
    assert all(s not in owners for s in d.take)
    assert all(owners.get(s) == me for s in d.release)
    assert not (d.take and d.release)
    mine = sum(1 for o in owners.values() if o == me)
    if me not in members:
        assert d == Decision(release=tuple(sorted(s for s, o in owners.items() if o == me)))
    else:
        after = mine + len(d.take) - len(d.release)
        assert after <= quotas(members, count)[me]
        if mine > quotas(members, count)[me]:
            assert after == quotas(members, count)[me]


def settle(members: list[str], owners: dict[int, str], count: int,
           rng: random.Random) -> dict[int, str]:
    """Rounds in a random order, each member deciding on what it reads, until a whole
    pass changes nothing; a take is create-if-absent (etcd's transaction)."""
    for _ in range(50):
        changed = False
        order = members[:]
        rng.shuffle(order)
        for me in order:
            d = decide(me, members, owners, count)
            for s in d.release:
                assert owners.pop(s) == me
                changed = True
            for s in d.take:
                if s not in owners:
                    owners[s] = me
                    changed = True
        if not changed:
            return owners
    raise AssertionError("ownership did not settle in 50 passes")


@settings(max_examples=80, deadline=None)
@given(members_st, counts, st.integers(0, 2**32), st.data())
def test_a_group_settles_with_every_shard_owned_once_and_fair_shares(
        members: list[str], count: int, seed: int, data: st.DataObject) -> None:
    rng = random.Random(seed)
    # Start anywhere: some shards owned by dead members (their keys are gone once their
    # leases expire, so they are simply free), some by live ones, over their quotas.
    owners = {s: data.draw(st.sampled_from(members)) for s in range(count)
              if data.draw(st.booleans())}
    final = settle(members, owners, count, rng)
    assert sorted(final) == list(range(count))  # no shard left behind
    q = quotas(members, count)
    for m in members:
        assert sum(1 for o in final.values() if o == m) == q[m]


@given(members_st, st.integers(2, 32), st.integers(0, 2**32))
def test_a_member_joining_moves_only_what_fair_share_requires(
        members: list[str], count: int, seed: int) -> None:
    rng = random.Random(seed)
    before = settle(members, {}, count, rng)
    joined = [*members, "zz-new"]
    after = settle(joined, dict(before), count, rng)
    moved = sum(1 for s in range(count) if before[s] != after[s])
    assert moved == quotas(joined, count)["zz-new"]  # only the newcomer's share moves


@given(members_st, st.integers(2, 32), st.integers(0, 2**32))
def test_a_dead_members_shards_are_taken_over(members: list[str], count: int,
                                              seed: int) -> None:
    rng = random.Random(seed)
    before = settle(members, {}, count, rng)
    dead = members[0]
    alive = members[1:] or ["replacement"]
    # Its lease expired: etcd deleted its keys.
    left = {s: o for s, o in before.items() if o != dead}
    after = settle(alive, left, count, rng)
    assert sorted(after) == list(range(count))
    assert dead not in after.values()
    assert all(after[s] == o for s, o in left.items()
               if sum(1 for x in left.values() if x == o) <= quotas(alive, count)[o])


def test_unreconciled_counts_from_the_last_finish_or_from_when_we_started_looking() -> None:
    late = sharding.unreconciled(4, {0: 100.0, 1: 75.0}, {0: "a", 1: "b", 2: "a"},
                                 now=140.0, since=90.0, interval=30.0)
    # shard 0: 40 s (fine); 1: 65 s (> 60); 2 and 3: never, 50 s since we looked (fine)
    assert [(a.shard, a.owner, round(a.age), a.never) for a in late] == [(1, "b", 65, False)]
    late = sharding.unreconciled(4, {}, {}, now=200.0, since=100.0, interval=30.0)
    assert [a.shard for a in late] == [0, 1, 2, 3]
    assert late[3].describe() == "shard 3 (no owner): never reconciled for 100s"


def test_lease_timing_defaults_are_flux_like_and_checked() -> None:
    t = LeaseTiming()
    assert (t.ttl, t.renew_deadline, t.retry) == (35, 30.0, 5.0)
    assert t.problems() == []
    assert LeaseTiming(10, 12, 5).problems() == [
        "needs retry < renew deadline < lease TTL (got 5 < 12 < 10)"]


def test_services_in_maps_names_through_their_service_ids() -> None:
    ids = {f"n{i}": f"svc-{i}" for i in range(40)}
    parts = [sharding.services_in([s], ids, 4) for s in range(4)]
    assert set().union(*parts) == set(ids)
    assert sum(len(p) for p in parts) == len(ids)
