"""Promotion over time against two sandboxes (staging and prod, each a real control plane
and three clusters on loopback): a prod promotion is NO-GO until staging has proven the
digest for the soak, and the proof is the judge's on staging now, never "succeeded"."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox import cluster as cluster_mod
from reconciler.sandbox.launcher import Sandbox
from tests.promotion.pipeline_repo import NEW, OLD, PipelineRepo, make_pipeline_repo

pytestmark = pytest.mark.integration


@pytest.fixture
def two(tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> PipelineRepo:
    staging = sandbox_factory(name="staging")
    prod = sandbox_factory(name="prod")
    return make_pipeline_repo(tmp_path, staging, prod, soak="20s")


def plan_json(repo: PipelineRepo, env: str, *extra: str) -> tuple[int, dict[str, object]]:
    result = repo.run("plan", str(repo.path), "--env", env, "--format", "json",
                      "--detailed-exitcode", *extra)
    assert result.code in (0, 2, 3), result.out + result.err
    return result.code, json.loads(result.out)


def blockers(plan: dict[str, object], code: str) -> list[dict[str, object]]:
    found = plan["blockers"]
    assert isinstance(found, list)
    return [b for b in found if b["code"] == code]


def apply(repo: PipelineRepo, env: str, *, process: bool = False) -> None:
    result = repo.run("apply", str(repo.path), "--env", env, "--auto-approve",
                      process=process)
    assert result.code == Exit.OK, result.out + result.err


def eligible_at(message: str) -> float:
    found = re.search(r"eligible (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)Z", message)
    assert found, message
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=UTC).timestamp()


def wait_until_soaked(repo: PipelineRepo, env: str = "prod") -> None:
    """Wait on the clock the product reads: until the eligible time the plan's own
    ``not_soaked`` blocker names (shown to the second, so one second more), then once
    more while it still names one."""
    for _ in range(3):
        _, plan = plan_json(repo, env)
        soaking = blockers(plan, "not_soaked")
        if not soaking:
            return
        time.sleep(max(0.0, eligible_at(str(soaking[0]["message"])) + 1.0 - time.time()))
    raise AssertionError(f"still not soaked: {soaking}")


def test_prod_waits_for_the_soak_on_staging_then_goes(two: PipelineRepo) -> None:
    # Never deployed to staging: not proven upstream, naming what staging runs.
    code, plan = plan_json(two, "prod")
    assert code == Exit.CHANGES_NO_GO
    [unproven] = blockers(plan, "not_proven_upstream")
    assert unproven["service"] == "checkout" and "staging does not prove" in unproven["message"]
    assert OLD[:19] in unproven["message"]  # staging's current rollout is the old digest

    started = time.time()
    apply(two, "staging")
    applied = time.time()
    code, plan = plan_json(two, "prod")
    assert code == Exit.CHANGES_NO_GO
    assert not blockers(plan, "not_proven_upstream")
    [soak] = blockers(plan, "not_soaked")
    assert "proven on staging" in soak["message"] and "of 20s" in soak["message"]
    when = eligible_at(str(soak["message"]))
    # counted from staging's success (the time shown is rounded up to the second)
    assert started - 1 <= when - 20 <= applied + 1

    time.sleep(max(0.0, when - time.time()) + 0.5)
    code, plan = plan_json(two, "prod")
    assert code == Exit.CHANGES, plan["blockers"]
    assert {c["service"] for c in plan["changes"]} == {"checkout"}  # promote + egress


def test_a_staging_rollback_resets_the_clock(two: PipelineRepo) -> None:
    apply(two, "staging")
    code, plan = plan_json(two, "prod")
    [first] = blockers(plan, "not_soaked")
    # Staging goes back to the old digest after the promotion was written.
    two.pin("staging", OLD, "v2.3.0")
    apply(two, "staging")
    code, plan = plan_json(two, "prod")
    assert code == Exit.CHANGES_NO_GO
    [unproven] = blockers(plan, "not_proven_upstream")
    assert "rolled back or moved on" in str(unproven["message"])
    assert not blockers(plan, "not_soaked")
    # Forward again: a new rollout, so the soak starts again from its success.
    two.pin("staging", NEW, "v2.4.0")
    apply(two, "staging")
    code, plan = plan_json(two, "prod")
    assert code == Exit.CHANGES_NO_GO
    [again] = blockers(plan, "not_soaked")
    assert eligible_at(str(again["message"])) > eligible_at(str(first["message"]))


def tamper_runtime(sandbox: Sandbox, cluster: str, app: str, **fields: object) -> None:
    """``cluster`` reports ``fields`` for ``app`` from now on; its deployer sees nothing to
    do, so the control plane keeps the rollout's status (succeeded)."""
    sandbox.kill(cluster)
    path = cluster_mod.cluster_dir(sandbox.state_dir, cluster) / "runtime.json"
    data = json.loads(path.read_text())
    data["apps"][app].update(fields)
    path.write_text(json.dumps(data, sort_keys=True))
    sandbox.restart(cluster)


def test_a_staging_cluster_on_the_old_digest_is_named_though_staging_says_succeeded(
        two: PipelineRepo) -> None:
    two.write_pipeline(soak="1s")
    two.commit("soak 1s")
    apply(two, "staging")
    wait_until_soaked(two)  # the second of soak is the product's clock, not assumed
    code, _ = plan_json(two, "prod")
    assert code == Exit.CHANGES  # proven and soaked: GO
    tamper_runtime(two.staging, "sn2", "checkout", resolvedDigest=OLD)
    statuses = two.staging.rollout_statuses()
    assert statuses["svc-checkout"]["status"] == "succeeded"
    code, plan = plan_json(two, "prod")
    assert code == Exit.CHANGES_NO_GO
    [unproven] = blockers(plan, "not_proven_upstream")
    assert unproven["cluster"] == "sn2"
    assert f"sn2: runs {OLD}" in str(unproven["message"])
    assert not blockers(plan, "not_soaked")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


def test_a_staging_cluster_outage_mid_soak_restarts_the_clock_and_promote_refuses(
        two: PipelineRepo) -> None:
    """Issue 31: sn2 down for most of the soak. Once it is back, staging proves the digest
    again -- but only since sn2 came back: ``promote --commit`` refuses (not soaked,
    eligible a soak after sn2's return, naming sn2's healthySince) and writes nothing;
    after that soak it commits, and the sentence in the commit says whose time it is."""
    two.write_pipeline(soak="20s")
    two.pin("prod", OLD, "v2.3.0")  # commits the pipeline too: prod pins what it runs
    apply(two, "staging")
    dry = ("promote", "checkout", "--to", "prod", "-C", str(two.path), "--dry-run")
    soaking = two.run(*dry)
    assert soaking.code == Exit.REFUSED_NO_GO, soaking.out + soaking.err
    assert "not_soaked" in soaking.err and "control plane's rollout success" in soaking.err
    first = eligible_at(soaking.err)

    two.staging.fault("sn2", "down")
    # Down past the end of the soak the control plane's success alone would give.
    time.sleep(max(0.0, first + 1.5 - time.time()))
    unproven = two.run(*dry)
    assert unproven.code == Exit.REFUSED_NO_GO, unproven.out + unproven.err
    assert "not_proven_upstream" in unproven.err and "sn2" in unproven.err, unproven.err
    two.staging.fault("sn2", "down", on=False)
    back = time.time()

    before = two.service_file("prod").read_bytes()
    head = git(two.path, "rev-parse", "HEAD")
    refused = two.run("promote", "checkout", "--to", "prod", "-C", str(two.path), "--commit")
    assert refused.code == Exit.REFUSED_NO_GO, refused.out + refused.err
    assert "not_soaked" in refused.err and "sn2 the latest" in refused.err, refused.err
    again = eligible_at(refused.err)
    assert again >= first + 1  # not the old eligible time, which has passed
    assert back - 2 <= again - 20 <= time.time() + 1  # a soak after sn2 came back (said rounded up)
    assert two.service_file("prod").read_bytes() == before
    assert git(two.path, "rev-parse", "HEAD") == head
    assert git(two.path, "status", "--porcelain") == ""

    time.sleep(max(0.0, again + 1.0 - time.time()))
    done = two.run("promote", "checkout", "--to", "prod", "-C", str(two.path), "--commit")
    assert done.code == Exit.OK, done.out + done.err
    message = git(two.path, "log", "-1", "--format=%B")
    found = re.search(r"proven on staging clusters sn1, sn2, sn3 since "
                      r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z by every cluster's healthySince "
                      r"\(sn2 the latest\) \(soak 20s\)", message)
    assert found, message
    since = datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=UTC).timestamp()
    assert back - 2 <= since <= back + 1  # true: sn2 has run it healthily since then
