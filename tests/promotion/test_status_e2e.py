"""``reconcile status`` against two sandboxes and against a 2,000-service fleet: the rows
say what the judge proves per environment and per cluster, what the next promotion waits
for and when; and it costs exactly the reads of one snapshot per environment."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks import fleet
from reconciler import engine
from reconciler.exitcodes import Exit
from reconciler.sandbox import launcher
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell.endpoints import Overrides
from tests.e2e_repo import PROJECT
from tests.promotion.pipeline_repo import NEW, OLD, make_pipeline_repo
from tests.promotion.test_soak_e2e import apply, tamper_runtime

pytestmark = pytest.mark.integration


def test_status_shows_each_environment_the_next_promotion_and_each_cluster(
        tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> None:
    repo = make_pipeline_repo(tmp_path, sandbox_factory(name="staging"),
                              sandbox_factory(name="prod"), soak="1h")
    repo.pin("prod", OLD, "v2.3.0")
    apply(repo, "staging")
    apply(repo, "prod")
    tamper_runtime(repo.prod, "sn3", "checkout", lastError="disk full")

    result = repo.run("status", str(repo.path), "--format", "json")
    assert result.code == Exit.OK, result.out + result.err
    doc = json.loads(result.out)
    assert doc["format"] == "reconcile.status" and doc["environments"] == ["staging", "prod"]
    staging, prod = doc["services"]
    assert (staging["environment"], staging["pinned"], staging["proof"]) == \
        ("staging", NEW, "converged")
    assert staging["proven_clusters"] == staging["expected_clusters"] == 3
    assert staging["since"] is not None and staging["next"] is None
    assert (prod["environment"], prod["pinned"], prod["proof"]) == ("prod", OLD, "converged")
    nxt = prod["next"]
    assert nxt["digest"] == NEW and not nxt["ready"]
    assert nxt["blockers"][0].startswith("not_soaked: checkout:")
    assert nxt["eligible_at"] >= staging["since"] + 3_600_000 - 1000
    # The since a promotion is soaked by, on whose word: the same clock as the gate's.
    assert staging["since_source"].startswith("by ")
    said = [c["healthy_since"] for c in staging["clusters"]]
    assert all(isinstance(t, int) for t in said) and staging["since"] >= max(said)
    assert "proven on staging" in nxt["blockers"][0] and "(since " in nxt["blockers"][0]
    sn3 = next(c for c in prod["clusters"] if c["cluster"] == "sn3")
    assert sn3["running"] == OLD and sn3["proven"] and sn3["last_error"] == "disk full"

    shown = repo.run("status", str(repo.path), "--clusters")
    assert shown.code == Exit.OK
    assert "next promotion" in shown.out and "not_soaked; eligible" in shown.out
    assert "disk full" in shown.out
    markdown = repo.run("status", str(repo.path), "--format", "markdown", "--env", "prod")
    assert "| checkout | prod |" in markdown.out and "| checkout | staging |" not in markdown.out


def test_status_of_a_2000_service_fleet_costs_one_snapshot(tmp_path: Path) -> None:
    n = 2000
    seed = fleet.write_seed(tmp_path / "seed.json", n)
    sandbox = launcher.start(tmp_path / "sandbox", seed=seed, converge_delay_ms=200)
    try:
        root = tmp_path / "repo"
        fleet.write_repo(root, sandbox, n, pin="current")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")},
               **sandbox.env(), "RECONCILE_STATE_DIR": str(tmp_path / "state")}
        sources = ("control-plane", *sandbox.clusters)

        def marks() -> dict[str, int]:
            return {s: len(sandbox.audit(s)) for s in sources}

        def spent(before: dict[str, int]) -> dict[str, list[str]]:
            return {s: sorted(e.get("method") or e.get("path") or "?"
                              for e in sandbox.audit(s)[before[s]:]) for s in sources}

        before = marks()
        desired, _ = engine.load_consistent(root)

        async def snapshot() -> None:
            async with engine.Reconciler(root, desired, overrides=Overrides.from_env(env),
                                         env=env) as reconciler:
                await reconciler.observe(desired)

        asyncio.run(snapshot())
        one_snapshot = spent(before)
        before = marks()
        proc = subprocess.run([sys.executable, "-m", "reconciler", "status", str(root),
                               "--format", "json"], cwd=PROJECT, capture_output=True,
                              text=True, env=env, timeout=600)
        assert proc.returncode == Exit.OK, proc.stderr
        assert spent(before) == one_snapshot
        assert sum(len(v) for v in one_snapshot.values()) < 40  # pages, not 2,000 reads
        rows = json.loads(proc.stdout)["services"]
        assert len(rows) == n and all(r["proof"] == "converged" for r in rows)
    finally:
        sandbox.stop()
