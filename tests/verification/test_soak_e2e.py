"""Issue 34 over two environments (staging and prod, each a real sandbox) and a real
Prometheus scraping staging's clusters: prod's promotion soaks on staging only while
staging's clusters pass the check staging holds checkout to. When one staging cluster
starts answering errors for the digest, the soak stops counting: prod's plan says staging
does not prove the digest, naming the cluster, the check and the value."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.prometheus import start_prometheus
from tests.promotion.pipeline_repo import NEW, make_pipeline_repo
from tests.verification.test_verification_e2e import PROMETHEUS_CHECK

pytestmark = pytest.mark.integration


def test_staging_soak_stops_counting_while_one_cluster_fails_its_check(
        tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> None:
    staging = sandbox_factory(name="staging")
    prod = sandbox_factory(name="prod")
    prom = start_prometheus(staging, tmp_path / "prometheus")
    try:
        repo = make_pipeline_repo(tmp_path, staging, prod, soak="1h")
        root = repo.path / "environments" / "staging"
        settings = json.loads((root / "settings.yaml").read_text())
        settings["verification"] = {"prometheus": {"url": prom.url}}
        settings["policy"]["convergence"] = {"intervalSeconds": 0.25, "attempts": 80}
        (root / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")
        (root / "verifications").mkdir()
        (root / "verifications" / "checkout.yaml").write_text(
            "apiVersion: reconcile/v1\nkind: Verification\nname: checkout-works\n"
            "scope:\n  services: [checkout]\nchecks:\n" + PROMETHEUS_CHECK)
        repo.commit("staging verifies checkout")

        done = repo.run("apply", str(repo.path), "--env", "staging", "--auto-approve",
                        timeout=300)
        assert done.code == Exit.OK, done.out + done.err

        def prod_blockers() -> list[dict[str, object]]:
            result = repo.run("plan", str(repo.path), "--env", "prod", "--format", "json")
            assert result.code == Exit.OK, result.out + result.err
            found = json.loads(result.out)["blockers"]
            assert isinstance(found, list)
            return [b for b in found if b["service"] == "checkout"]

        # Verified and counting: the only thing prod waits for is the soak.
        assert [b["code"] for b in prod_blockers()] == ["not_soaked"]

        staging.fault("sn2", "app-errors", digest=NEW)
        deadline = time.monotonic() + 90
        while True:
            seen = prod_blockers()
            if any(b["code"] == "not_proven_upstream" for b in seen):
                break
            assert time.monotonic() < deadline, seen
            time.sleep(1.0)
        [stopped] = [b for b in seen if b["code"] == "not_proven_upstream"]
        message = str(stopped["message"])
        assert stopped["cluster"] == "sn2", stopped
        assert "check checkout-works/error-ratio failed" in message, message
        assert not any(b["code"] == "not_soaked" for b in seen)  # no time counts now
    finally:
        prom.stop()
