"""``controlPlane.timeoutSeconds`` is the total deadline for one call, retries included.

The identity exchange, the re-sends after transient failures and the back-off between
them all spend one budget: against a server that answers too late, a read gives up after
about ``timeoutSeconds`` -- not after several of them stacked up.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox import launcher
from reconciler.shell.controlplane import ControlPlaneClient, TransportError
from reconciler.shell.endpoints import Connection, Overrides
from tests.e2e_repo import make_repo
from tests.live.fakes import CANARY, FakeControlPlane, connection

#: Slack for scheduling, process start-up and the TLS handshake on a loaded CI machine.
MARGIN_S = 0.6


def _slow_transport(delay: float) -> httpx.MockTransport:
    """A well-behaved fake control plane that takes ``delay`` seconds over every reply."""
    fake = FakeControlPlane(script={"getServices": [{"services": []}]})

    async def handle(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(delay)
        return fake.handle(request)

    return httpx.MockTransport(handle)


def test_a_slow_server_costs_one_deadline_not_one_per_attempt() -> None:
    budget = 0.5

    async def go() -> None:
        async with ControlPlaneClient(connection(call_timeout=budget), token=CANARY,
                                      transport=_slow_transport(30)) as c:
            await c.get_services()

    started = time.monotonic()
    with pytest.raises(TransportError, match="deadline") as info:
        asyncio.run(go())
    elapsed = time.monotonic() - started
    assert elapsed < budget + MARGIN_S, f"gave up after {elapsed:.2f}s, deadline {budget}s"
    assert info.value.transient
    assert CANARY not in str(info.value)


def test_the_public_call_is_bounded_including_the_identity_exchange() -> None:
    budget = 0.4

    async def go() -> None:
        async with ControlPlaneClient(connection(call_timeout=budget), token=CANARY,
                                      transport=_slow_transport(0.3)) as c:
            # The identity exchange (0.3 s) and the call (0.3 s) share one 0.4 s budget.
            await c.call("getServices", {})

    started = time.monotonic()
    with pytest.raises(TransportError, match="deadline"):
        asyncio.run(go())
    assert time.monotonic() - started < budget + MARGIN_S


def test_transient_failures_are_still_retried_within_the_budget() -> None:
    fake = FakeControlPlane(script={"getServices": [
        httpx.Response(503), {"services": []}]})

    async def go() -> list[dict[str, Any]]:
        async with ControlPlaneClient(connection(call_timeout=2.0), token=CANARY,
                                      transport=fake.transport()) as c:
            return await c.get_services()

    assert asyncio.run(go()) == []
    assert len(fake.calls("getServices")) == 2


def test_no_back_off_starts_that_the_deadline_cannot_cover() -> None:
    fake = FakeControlPlane(script={"getServices": [httpx.Response(503)] * 5})

    async def go() -> None:
        # 0.1 s budget < the 0.2 s first back-off: one attempt, then a clear answer.
        async with ControlPlaneClient(connection(call_timeout=0.1), token=CANARY,
                                      transport=fake.transport()) as c:
            await c.get_services()

    started = time.monotonic()
    with pytest.raises(TransportError, match=r"503.*deadline"):
        asyncio.run(go())
    assert time.monotonic() - started < 0.1 + MARGIN_S
    assert len(fake.calls("getServices")) == 1


# -- real processes over loopback HTTPS ---------------------------------------------------


@pytest.mark.integration
def test_the_sandbox_slow_fault_costs_one_deadline(sandbox: launcher.Sandbox) -> None:
    sandbox.fault(launcher.CONTROL_PLANE, "slow", ms=11_000)
    budget = 1.0
    conn = Connection.build(_settings(sandbox, budget), repo_root=sandbox.state_dir,
                            overrides=Overrides())

    async def go() -> None:
        async with ControlPlaneClient(conn, token=sandbox.token) as c:
            await c.get_services()

    started = time.monotonic()
    with pytest.raises(TransportError, match="deadline"):
        asyncio.run(go())
    elapsed = time.monotonic() - started
    assert elapsed < budget + MARGIN_S, f"gave up after {elapsed:.2f}s, deadline {budget}s"


@pytest.mark.integration
def test_plan_gives_up_after_about_timeout_seconds(tmp_path: Path,
                                                   sandbox: launcher.Sandbox) -> None:
    budget = 2.0
    repo = make_repo(tmp_path, sandbox)
    settings_file = repo.path / "settings.yaml"
    settings = json.loads(settings_file.read_text())
    settings["controlPlane"]["timeoutSeconds"] = budget
    settings_file.write_text(json.dumps(settings, indent=2) + "\n")
    repo.commit("short control-plane deadline")
    # What a plan costs on this machine now, the control plane answering at once:
    # interpreter start-up, loading the repo, the reads. On a loaded machine that alone
    # can be seconds, so the bound below is relative to it, not absolute.
    started = time.monotonic()
    healthy = repo.run("plan", str(repo.path), timeout=60)
    baseline = time.monotonic() - started
    assert healthy.code in (Exit.OK, Exit.CHANGES), healthy.out + healthy.err
    sandbox.fault(launcher.CONTROL_PLANE, "slow", ms=11_000)

    started = time.monotonic()
    result = repo.run("plan", str(repo.path), timeout=60)
    elapsed = time.monotonic() - started
    assert result.code == Exit.ERROR, result.out + result.err
    assert "deadline" in result.err, result.err
    # One deadline on top of a plan's own cost; five stacked deadlines (the old
    # behaviour) would cost four more deadlines, 8 s, on top of that.
    assert elapsed < baseline + budget + 3.0, \
        f"plan gave up after {elapsed:.1f}s, deadline {budget}s, a healthy plan {baseline:.1f}s"


def _settings(sandbox: launcher.Sandbox, timeout: float) -> Any:
    from reconciler.core.desired import Settings

    doc = json.loads(sandbox.settings_yaml())
    doc["controlPlane"]["timeoutSeconds"] = timeout
    return Settings.model_validate(doc)
