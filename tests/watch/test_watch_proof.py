"""Proof, not hope, for the watcher: `watch --apply` never reports an apply as done, nor
its metrics a service as converged, while a cluster runs another digest.

The real watcher process on a temporary git repo against the real sandbox; events from
its JSON log lines, metrics from its Prometheus endpoint.
"""

from __future__ import annotations

import re
import socket
import urllib.request
from collections.abc import Callable

import pytest

from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo
from tests.plan.builders import digest
from tests.watch.test_watch_e2e import is_plan, watching

pytestmark = pytest.mark.integration

OLD_CHECKOUT = digest("checkout", "v2.3.0")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metric(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    match = re.search(rf"^{re.escape(name)} (\S+)$", body, re.MULTILINE)
    assert match, f"{name} not served:\n{body}"
    return float(match.group(1))


def is_apply_end(event: dict[str, object]) -> bool:
    return event["event"] in ("applied", "apply-failed", "apply-refused")


def test_watch_apply_never_reports_done_while_a_cluster_runs_another_digest(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=4)
    sandbox.fault("sn1", "stuck")
    port = free_port()
    with watching(repo, "--apply", "--resync", "1", "--metrics-port", str(port)) as w:
        first = w.wait_for(is_apply_end, timeout=90)
        assert first["event"] == "apply-failed", first
        assert any("checkout" in line and "sn1" in line for line in first["lines"]), first
        sandbox.wait_settled()  # the rollout ended; sn1 kept the old digest
        assert sandbox.cluster_status()["sn1"]["checkout"]["resolvedDigest"] == OLD_CHECKOUT

        # A newer commit with only an egress edit is applied at once; it must fail too.
        checkout = repo.path / "services" / "checkout.yaml"
        checkout.write_text(checkout.read_text() + "  - host: api.sendgrid.com\n")
        repo.commit("checkout may reach api.sendgrid.com")
        second = w.wait_for(lambda e: is_apply_end(e) and e.get("commit") != first["commit"],
                            timeout=90)
        assert second["event"] == "apply-failed", second
        assert any("checkout" in line and "sn1" in line for line in second["lines"]), second

        plan = w.wait_for(lambda e: is_plan(e) and "resync" in e["message"], timeout=30)
        assert plan["verdict"] != "no_changes", plan
        assert metric(port, "reconcile_services_not_proven_converged") >= 1
        assert metric(port, 'reconcile_plan_verdict{verdict="no_changes"}') == 0
        assert metric(port, "reconcile_last_successful_apply_timestamp_seconds") == 0
    assert not [e for e in w.seen if e["event"] == "applied"]
