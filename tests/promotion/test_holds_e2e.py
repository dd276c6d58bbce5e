"""Freezes, windows and policies against two sandboxes: each holds a prod promotion that
staging has proven and soaked, says so as a blocker, and lets it go when lifted -- a window
that ends while ``watch`` runs lets the very next cycle apply, without a restart."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.promotion.pipeline_repo import NEW, PipelineRepo, make_pipeline_repo
from tests.promotion.test_soak_e2e import apply, blockers, plan_json
from tests.watch.events import watch_process

pytestmark = pytest.mark.integration


def test_a_committed_freeze_holds_every_prod_promotion_until_unfreeze(
        soaked: PipelineRepo) -> None:
    done = soaked.run("freeze", str(soaked.path), "--env", "prod", "--reason",
                      "incident 4711", "--until", "2d")
    assert done.code == Exit.OK, done.err
    assert (soaked.path / "freezes" / "prod.yaml").is_file()
    code, plan = plan_json(soaked, "prod")
    assert code == Exit.CHANGES_NO_GO
    [frozen] = blockers(plan, "frozen")
    assert '"incident 4711" until' in str(frozen["message"])
    assert frozen["services"] == ["checkout"]
    # An emergency override lifts it, and says so.
    code, plan = plan_json(soaked, "prod", "--override-window", "hotfix for 4711")
    assert code == Exit.CHANGES
    assert any("override-window: hotfix for 4711" in n for n in plan["notes"])
    assert any("lifted: frozen" in n for n in plan["notes"])

    undone = soaked.run("unfreeze", str(soaked.path), "--env", "prod")
    assert undone.code == Exit.OK, undone.err
    assert not (soaked.path / "freezes" / "prod.yaml").exists()
    code, _ = plan_json(soaked, "prod")
    assert code == Exit.CHANGES


def test_an_emergency_override_applies_through_a_freeze_and_history_says_so(
        soaked: PipelineRepo) -> None:
    assert soaked.run("freeze", str(soaked.path), "--env", "prod", "--reason", "incident 4712",
                      "--until", "2026-12-31T00:00:00Z").code == Exit.OK
    refused = soaked.run("apply", str(soaked.path), "--env", "prod", "--auto-approve")
    assert refused.code == Exit.REFUSED_NO_GO and "frozen" in refused.err
    forced = soaked.run("apply", str(soaked.path), "--env", "prod", "--auto-approve",
                        "--override-window", "hotfix for 4712")
    assert forced.code == Exit.OK, forced.out + forced.err
    history = soaked.run("history", str(soaked.path), "--env", "prod")
    assert history.code == Exit.OK, history.err
    assert "override-window: hotfix for 4712" in history.out
    assert soaked.prod.rollout_statuses()["svc-checkout"]["expectedDigest"] == NEW


POLICY = """apiVersion: reconcile/v1
kind: Policy
name: registries
environments: [prod]
rules:
  - name: internal-registry-only
    expression: change.registryHost == "registry.internal.test"
    message: prod runs images from registry.internal.test only
"""


def test_a_cel_rule_denying_the_registry_blocks_naming_the_rule(soaked: PipelineRepo) -> None:
    (soaked.path / "policies").mkdir()
    (soaked.path / "policies" / "registries.yaml").write_text(POLICY)
    soaked.commit("prod policy")
    code, plan = plan_json(soaked, "prod")
    assert code == Exit.CHANGES_NO_GO
    [denied] = blockers(plan, "policy_denied")
    assert denied["service"] == "checkout"
    assert 'rule "internal-registry-only"' in str(denied["message"])
    assert "policies/registries.yaml" in str(denied["message"])
    # The rule allows the registry the example uses: GO.
    (soaked.path / "policies" / "registries.yaml").write_text(
        POLICY.replace("registry.internal.test", "registry.sandbox.test"))
    soaked.commit("allow the sandbox registry")
    code, _ = plan_json(soaked, "prod")
    assert code == Exit.CHANGES


def test_a_deny_window_that_ends_while_watch_runs_lets_the_next_cycle_apply(
        soaked: PipelineRepo) -> None:
    now = datetime.now(UTC)
    ends_in = 45
    duration = now.second + ends_in
    soaked.write_pipeline(windows=[{"kind": "deny", "name": "release-freeze",
                                    "schedule": f"{now.minute} {now.hour} * * *",
                                    "duration": f"{duration}s", "timezone": "UTC"}])
    soaked.commit("a deny window open now")
    with watch_process(str(soaked.path), "--env", "prod", "--apply", "--resync", "2",
                       "--log-format", "json", env=soaked.env()) as watch:
        first = watch.wait_for(lambda e: e["event"] == "plan", timeout=90)
        assert first["verdict"] == "no_go", first
        assert time.time() < now.timestamp() + ends_in, "the window ended before the plan"
        applied = watch.wait_for(lambda e: e["event"] in ("applied", "apply-failed",
                                                          "apply-refused"), timeout=180)
        assert applied["event"] == "applied", applied
        assert time.time() >= now.timestamp() + ends_in - 1  # not before the window ended
    assert soaked.prod.rollout_statuses()["svc-checkout"]["expectedDigest"] == NEW


def test_watch_never_applies_an_unsoaked_promotion(tmp_path: Path,
                                                  sandbox_factory: Callable[..., Sandbox],
                                                  ) -> None:
    repo = make_pipeline_repo(tmp_path, sandbox_factory(name="staging"),
                              sandbox_factory(name="prod"), soak="1h")
    apply(repo, "staging")
    result = repo.run("apply", str(repo.path), "--env", "prod", "--auto-approve")
    assert result.code == Exit.REFUSED_NO_GO, result.out + result.err
    assert "not_soaked" in result.err
    assert repo.prod.rollout_statuses()["svc-checkout"]["expectedDigest"] != NEW
    assert json.loads(repo.run("plan", str(repo.path), "--env", "prod", "--format",
                               "json").out)["verdict"] == "no_go"
