"""``apply --timeout`` bounds the whole run, gate included (issue 18, item 8).

With a slow control plane (every reply 1 s late) and a cluster that never proves the
change (its operator's allow-list drops the new egress destination: the rollout itself
succeeds, so nothing tells the gate to stop early -- a stuck cluster would, because the
control plane reports that rollout mismatched), an unbounded apply polls for as long as
the gate's budget lasts (minutes); with ``--timeout`` it ends
within the bound plus one call's grace, exits 15 and names what is still unproven: the
service, the cluster and the digest it should run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import PROJECT, Repo
from tests.plan.builders import digest

pytestmark = pytest.mark.integration

NEW_CHECKOUT = digest("checkout", "v2.4.0")
#: The bound counts from the process's start; past it: closing the clients, the journal's
#: last line, the interpreter's exit -- and a busy test machine.
GRACE_S = 10.0


def test_timeout_bounds_the_gate_over_a_slow_control_plane_and_an_unproven_cluster(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=200, interval_seconds=0.5)  # a budget of minutes
    sandbox.fault("sn3", "egress-allow", hosts="api.stripe.com")  # drops hooks.slack.com
    sandbox.fault("control-plane", "latency", ms=1000)
    # Long enough for the reads and the writes on a busy machine; the gate's own budget
    # (200 polls, each a second or more) is many times longer.
    bound = 45.0
    started = time.monotonic()
    result = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout",
                      "--timeout", f"{bound:g}s", timeout=120)
    elapsed = time.monotonic() - started
    said = result.out + result.err
    assert result.code == Exit.NOT_CONVERGED, said
    assert elapsed < bound + GRACE_S, f"apply took {elapsed:.1f}s with --timeout {bound:g}s"
    assert f"--timeout {bound:g}s expired" in result.err, said
    assert "gate stopped by --timeout" in result.err, said
    # What is unproven, by name: the service, the cluster, the digest it should run.
    lines = [x for x in result.err.splitlines() if "checkout on sn3" in x]
    assert lines and NEW_CHECKOUT in lines[0], said
    assert "Converged" not in result.out and "Apply complete" not in result.out


def test_timeout_that_expires_while_reading_sends_nothing(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox)
    sandbox.fault("control-plane", "latency", ms=3000)
    before = [a for a in sandbox.audit() if a["method"].startswith(("promote", "setService"))]
    result = repo.run("apply", str(repo.path), "--auto-approve", "--timeout", "2", timeout=60)
    assert result.code == Exit.NOT_CONVERGED, result.out + result.err
    assert "--timeout 2s expired while reading the live world" in result.err, result.err
    assert "nothing was sent" in result.err and "checkout" in result.err
    after = [a for a in sandbox.audit() if a["method"].startswith(("promote", "setService"))]
    assert after == before


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1m 30s"])
def test_a_bad_timeout_is_a_usage_error(tmp_path: Path, value: str) -> None:
    result = subprocess.run([sys.executable, "-m", "reconciler", "apply", str(tmp_path),
                             "--auto-approve", "--timeout", value], cwd=PROJECT,
                            capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == Exit.USAGE, result.stdout + result.stderr
    assert "invalid duration" in result.stderr


def test_watch_timeout_without_apply_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "reconciler", "watch", str(tmp_path),
                             "--timeout", "30s"], cwd=PROJECT, capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == Exit.USAGE, result.stdout + result.stderr
    assert "--timeout bounds each apply: it needs --apply" in result.stderr
