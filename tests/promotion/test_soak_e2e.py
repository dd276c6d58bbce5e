"""Promotion over time against two sandboxes (staging and prod, each a real control plane
and three clusters on loopback): a prod promotion is NO-GO until staging has proven the
digest for the soak, and the proof is the judge's on staging now, never "succeeded"."""

from __future__ import annotations

import json
import re
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


def apply(repo: PipelineRepo, env: str) -> None:
    result = repo.run("apply", str(repo.path), "--env", env, "--auto-approve")
    assert result.code == Exit.OK, result.out + result.err


def eligible_at(message: str) -> float:
    found = re.search(r"eligible (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)Z", message)
    assert found, message
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=UTC).timestamp()


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
    assert started - 1 <= when - 20 <= applied  # counted from staging's success

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
