"""The fence itself, in process: a member whose lease is gone on etcd's side while its
own clock still trusts it (a partition that healed late, a clock that jumped) is stopped
by the etcd transaction on the owner key's revision -- not by its own timers -- and
sends nothing; the new owner's writes carry their fencing token in the journal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from reconciler.core.events import Event
from reconciler.core.outcomes import Outcome
from reconciler.core.sharding import LeaseTiming
from reconciler.engine import ShardedWatchSteps
from reconciler.sandbox.etcd import Etcd
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell.coordination import Etcd as Client
from reconciler.shell.coordination import parse_target
from reconciler.shell.endpoints import Overrides
from tests.e2e_repo import Repo
from tests.sharding.group import WRITES

pytestmark = pytest.mark.integration


def member(repo: Repo, etcd: Etcd, state: Path) -> ShardedWatchSteps:
    """A member whose rounds come 25 s apart: within one test step, only the rounds the
    test asks for happen (the first ``round()`` waits for the member's first)."""
    return ShardedWatchSteps(repo.path, overrides=Overrides(),
                             env=repo.env(RECONCILE_STATE_DIR=str(state)),
                             target=f"{etcd.url}/fence", shards=2,
                             timing=LeaseTiming(60, 50.0, 25.0), resync=2.0)


def intents(state: Path) -> list[dict[str, object]]:
    path = state / "journal.jsonl"
    if not path.exists():
        return []
    return [x for x in map(json.loads, path.read_text().splitlines())
            if x.get("event") == "intent"]


def test_the_owner_key_revision_stops_a_member_whose_lease_etcd_already_dropped(
        repo: Repo, sandbox: Sandbox, etcd: Etcd, tmp_path: Path) -> None:
    def hook(event: Event) -> None:
        return None

    async def scenario() -> None:
        old = member(repo, etcd, tmp_path / "old")
        first = await old.round()
        assert first.owned == frozenset({0, 1}) and first.error is None
        assert old.lease is not None
        # etcd drops the old member's lease; its renew deadline has not passed locally.
        other = Client(parse_target(etcd.url), "fence", "test")
        await other.revoke(old.lease)
        await other.close()
        new = member(repo, etcd, tmp_path / "new")
        assert (await new.round()).owned == frozenset({0, 1})
        stale = await old.apply(hook)
        assert stale.report.results, "the old member planned nothing to send"
        assert {r.outcome for r in stale.report.results} == {Outcome.SKIPPED}
        details = [r.detail for r in stale.report.results]
        # each shard's first writes (services go in parallel) ask etcd, which refuses
        # them and the shard is dropped; the service's later writes are not sent either
        for shard in (0, 1):
            assert any(f"shard {shard} of" in d and "no longer ours" in d
                       for d in details), details
        assert all(d.startswith("not sent: ") for d in details), details
        assert not [a for a in sandbox.audit() if a["method"] in WRITES]
        assert intents(tmp_path / "old") == []
        fresh = await new.apply(hook)
        assert fresh.report.writes_ok
        sent = intents(tmp_path / "new")
        assert sent and all(i["fence"]["member"] == new.member for i in sent)  # type: ignore[index]
        assert len([a for a in sandbox.audit() if a["method"] in WRITES]) == len(sent)
        await old.leave()
        await new.leave()

    asyncio.run(scenario())


def rollout_generations(sandbox: Sandbox) -> dict[str, int]:
    from reconciler.sandbox import store

    conn = store.connect(sandbox.state_dir)
    try:
        return {s["id"]: int((s["data"].get("imageDeployment") or {})
                             .get("rolloutGeneration", 0))
                for s in store.all_services(conn)}
    finally:
        conn.close()


def test_two_owners_at_once_still_make_one_rollout_the_control_plane_is_the_last_line(
        repo: Repo, sandbox: Sandbox, etcd: Etcd, tmp_path: Path) -> None:
    """Two watchers that each own everything (a misconfiguration: two groups over one
    root), so no fence can stop either: both apply at once, and the control plane's
    compare-and-swap and idempotency keys still let exactly one rollout through."""
    def hook(event: Event) -> None:
        return None

    async def scenario() -> None:
        a = member(repo, etcd, tmp_path / "a")
        b = member(repo, etcd, tmp_path / "b")
        b.target = parse_target(f"{etcd.url}/another-group")
        b.group = "another-group"
        assert (await a.round()).owned == frozenset({0, 1})
        assert (await b.round()).owned == frozenset({0, 1})
        before = rollout_generations(sandbox)
        first, second = await asyncio.gather(a.apply(hook), b.apply(hook))
        after = rollout_generations(sandbox)
        moved = {s: after[s] - before.get(s, 0) for s in after if after[s] != before.get(s, 0)}
        # every rollout the desired state asks for (checkout's promotion, ledger's
        # creation, ...) happened once, never twice
        assert {"svc-checkout", "svc-ledger"} <= set(moved), moved
        assert set(moved.values()) == {1}, moved
        assert first.report.writes_ok and second.report.writes_ok
        await a.leave()
        await b.leave()

    asyncio.run(scenario())
