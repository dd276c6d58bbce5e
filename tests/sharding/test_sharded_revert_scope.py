"""A sharded member's revert reads and plans only its own shards' services: the revert
and its rollback load the whole commit (they pin a file of it), but every plan they make
through the member's reconciler is scoped to the services of the shards it holds -- at
10,000 services a revert must not read the fleet. In process, two members of one group
on a real etcd, the real sandbox, a release one cluster refuses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler import engine
from reconciler.core.desired import DesiredState
from reconciler.core.events import Event
from reconciler.core.live import LiveSnapshot
from reconciler.core.sharding import LeaseTiming
from reconciler.exitcodes import Exit
from reconciler.sandbox.etcd import Etcd
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell.endpoints import Overrides
from tests.e2e_repo import Repo
from tests.sharding.group import wait_converged
from tests.sharding.test_sharded_env_revert_e2e import NEW, OLD, pin

pytestmark = pytest.mark.integration


def member(repo: Repo, etcd: Etcd, name: str, state: Path) -> engine.ShardedWatchSteps:
    return engine.ShardedWatchSteps(
        repo.path, overrides=Overrides(), env=repo.env(RECONCILE_STATE_DIR=str(state)),
        target=f"{etcd.url}/revert-scope", shards=4, timing=LeaseTiming(3, 2.0, 0.5),
        resync=2.0, member=name, applying=True, on_gate_failure="revert")


@pytest.mark.timeout(600)
def test_a_members_revert_and_rollback_plan_only_the_services_of_its_shards(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, etcd: Etcd, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    pin(repo, OLD, "v2.3.0", "checkout stays at v2.3.0 for now")
    applied = repo.run("apply", str(repo.path), "--auto-approve", timeout=300)
    assert applied.code == Exit.OK, applied.out + applied.err
    wait_converged(repo)
    # What each plan made through a reconciler read: the services it observed.
    observed: list[frozenset[str]] = []
    real = engine.Reconciler.observe

    async def observe(self: engine.Reconciler, desired: DesiredState,
                      progress: object = None) -> LiveSnapshot:
        observed.append(frozenset(s.name for s in desired.services))
        return await real(self, desired, progress)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.Reconciler, "observe", observe)

    def hook(event: Event) -> None:
        return None

    async def scenario() -> None:
        a = member(repo, etcd, "a", tmp_path / "a")
        b = member(repo, etcd, "b", tmp_path / "b")
        try:
            await a.round()
            await b.round()
            for _ in range(60):  # a took all four, then hands two over to b
                owned = (await a.round()).owned, (await b.round()).owned
                if len(owned[0]) == len(owned[1]) == 2:
                    break
                await asyncio.sleep(0.5)
            desired = engine.load_worktree(repo.path)
            everyone = frozenset(s.name for s in desired.services)
            owner = a if "checkout" in a.owned_names(desired) else b
            own = owner.owned_names(desired)
            assert "checkout" in own and len(own) < len(everyone), (own, everyone)
            sandbox.fault("sn3", "refuse-digest", digest=NEW)
            pin(repo, NEW, "v2.4.0", "promote checkout to v2.4.0")
            run = await owner.apply(hook)
            assert run.revert_error is None, run.revert_error
            assert run.reverted is not None and run.reverted.rollback is not None, \
                run.revert_story()
            assert run.reverted.rollback.report.writes_ok
            assert [i.service for i in run.reverted.items] == ["checkout"]
        finally:
            await a.leave()
            await b.leave()
        # the apply's plan, the revert's and the rollback's: each read the owner's
        # services only, never the other member's
        assert len(observed) >= 3, observed
        assert all("checkout" in seen and seen <= own for seen in observed), \
            (observed, own)

    asyncio.run(scenario())
    assert OLD in (repo.path / "services" / "checkout.yaml").read_text()
