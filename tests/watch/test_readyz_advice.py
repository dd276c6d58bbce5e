"""``/readyz`` says what happened, never what to do: with the control plane gone, the
watcher's log line carries the next step (a loopback URL: the local sandbox hint), and
the ``/readyz`` body -- read by probes, often from other hosts -- does not."""

from __future__ import annotations

import pytest

from reconciler.sandbox.launcher import CONTROL_PLANE, Sandbox
from tests.e2e_repo import Repo
from tests.watch.test_watch_e2e import is_plan, watching
from tests.watch.test_watch_health import get
from tests.watch.test_watch_proof import free_port

pytestmark = pytest.mark.integration


def test_the_readyz_body_has_no_advice_while_the_log_has_it(repo: Repo,
                                                           sandbox: Sandbox) -> None:
    port = free_port()
    with watching(repo, "--resync", "1", "--metrics-port", str(port)) as w:
        w.wait_for(is_plan)
        sandbox.kill(CONTROL_PLANE)
        unreadable = w.wait_for(lambda e: e["event"] == "live-unreadable", timeout=30)
        assert "unreachable" in unreadable["message"]
        assert "reconcile sandbox up" in unreadable["message"]  # 127.0.0.1: loopback
        w.wait_for(lambda e: e["event"] == "unready", timeout=30)
        status, body = get(port, "/readyz")
        assert status == 503 and "unreachable" in body
        assert "sandbox" not in body and "--control-plane" not in body
