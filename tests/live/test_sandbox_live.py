"""The live side over real loopback HTTPS: the sandbox's control plane and cluster mesh.

One sandbox per module (starting one costs about a second); every test switches its
faults on and clears them after. Timeouts are shortened with ``dataclasses.replace`` so a
black hole costs a second, not five.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.live import LiveService, LiveSnapshot, ObservationKind
from reconciler.sandbox import launcher
from reconciler.shell.controlplane import (
    ControlPlaneClient,
    ControlPlaneError,
    ProtocolError,
    TransportError,
    Unauthorized,
)
from reconciler.shell.endpoints import Connection, Overrides
from reconciler.shell.observing import observe, observe_async
from reconciler.shell.probing import Prober
from tests import sandboxes
from tests.sandboxes import APPS, desired

pytestmark = pytest.mark.integration

CANARY = "canary-0d6f2b9e8a7c4135"


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[launcher.Sandbox]:
    yield from sandboxes.for_module(tmp_path_factory, "live")


@pytest.fixture(autouse=True)
def _clean_faults(sb: launcher.Sandbox) -> Iterator[None]:
    sb.clear_faults()
    yield
    sb.clear_faults()


def conn_for(sb: launcher.Sandbox, tmp: Path, **changes: Any) -> Connection:
    state = desired(sb)
    conn = Connection.build(state.settings, repo_root=tmp,
                            overrides=Overrides.from_env(sb.env()))
    return dataclasses.replace(conn, **{"probe_timeout": 1.0, "call_timeout": 3.0, **changes})


def snap(sb: launcher.Sandbox, tmp: Path, env: dict[str, str] | None = None,
         **changes: Any) -> LiveSnapshot:
    return observe(desired(sb), conn_for(sb, tmp, **changes), env=env or sb.env())


def rows(snapshot: LiveSnapshot, app: str = "checkout") -> dict[str, Any]:
    return {o.cluster_id: o for o in snapshot.observations[app]}


def test_a_clean_snapshot_reads_everything_over_real_tls(sb: launcher.Sandbox,
                                                         tmp_path: Path) -> None:
    snapshot = snap(sb, tmp_path)
    assert all(isinstance(s, LiveService) for s in snapshot.services.values())
    checkout = snapshot.services["svc-checkout"]
    assert isinstance(checkout, LiveService) and checkout.rollout_generation == 3
    assert snapshot.grants is not None and snapshot.grants_error is None
    assert snapshot.mesh.expected_clusters == ("sn1", "sn2", "sn3")
    for app in APPS:
        for obs in snapshot.observations[app]:
            assert obs.kind is ObservationKind.ANSWERED, obs
            assert obs.runtime is not None and obs.runtime.resolved_digest is not None


def test_the_settings_resolve_list_and_the_override_agree(sb: launcher.Sandbox,
                                                          tmp_path: Path) -> None:
    conn = conn_for(sb, tmp_path)
    assert conn.static_addresses == tuple(sb.addresses.values())
    assert conn.mesh_port == sb.mesh_port and conn.gateway == sb.gateway


def test_a_short_dns_answer_leaves_that_cluster_silent(sb: launcher.Sandbox,
                                                       tmp_path: Path) -> None:
    sb.fault("sn2", "dns-missing")
    snapshot = snap(sb, tmp_path, env=sb.env())
    assert snapshot.mesh.expected_clusters == ("sn1", "sn2", "sn3")
    r = rows(snapshot)
    assert r["sn2"].kind is ObservationKind.SILENT and "not resolved by DNS" in r["sn2"].reason
    assert r["sn1"].kind is r["sn3"].kind is ObservationKind.ANSWERED


def test_an_empty_dns_answer_is_a_total_gap(sb: launcher.Sandbox, tmp_path: Path) -> None:
    async def nothing(host: str, port: int) -> list[str]:
        return []

    conn = conn_for(sb, tmp_path, static_addresses=None)

    async def go() -> LiveSnapshot:
        prober = Prober(conn, signer_key=sb.signer_key_file, resolver=nothing)
        async with prober:
            return await observe_async(desired(sb), conn, env=sb.env(), prober=prober)

    snapshot = asyncio.run(go())
    assert snapshot.mesh.resolve_error is not None
    assert all(o.kind is ObservationKind.SILENT for o in snapshot.observations["checkout"])


def test_a_long_dns_answer_adds_a_cluster_and_a_dead_address_is_reported(
        sb: launcher.Sandbox, tmp_path: Path) -> None:
    addresses = (*sb.addresses.values(), "127.0.0.77")
    snapshot = snap(sb, tmp_path, static_addresses=addresses)
    r = rows(snapshot)
    assert r["127.0.0.77"].kind is ObservationKind.SILENT
    assert "unreachable" in r["127.0.0.77"].reason
    assert snapshot.mesh.unnamed_addresses == ("127.0.0.77",)


def test_a_black_holed_cluster_is_silent_and_the_snapshot_ends_in_time(
        sb: launcher.Sandbox, tmp_path: Path) -> None:
    sb.fault("sn3", "blackhole")
    started = time.monotonic()
    snapshot = snap(sb, tmp_path)
    assert time.monotonic() - started < 5.0
    for app in APPS:
        r = rows(snapshot, app)
        assert r["sn3"].kind is ObservationKind.SILENT
        assert r["sn1"].kind is ObservationKind.ANSWERED
    assert "timed out after 1s" in (snapshot.mesh.resolved[2].error or "")


def test_a_down_cluster_is_unreachable(sb: launcher.Sandbox, tmp_path: Path) -> None:
    sb.fault("sn1", "down")
    r = rows(snap(sb, tmp_path))
    assert r["sn1"].kind is ObservationKind.SILENT
    assert "unreachable" in (r["sn1"].reason or "") or "timed out" in (r["sn1"].reason or "")


def test_a_trickling_cluster_cannot_outlive_the_probe_timeout(sb: launcher.Sandbox,
                                                              tmp_path: Path) -> None:
    sb.fault("sn2", "trickle", ms=100)
    started = time.monotonic()
    r = rows(snap(sb, tmp_path))
    assert time.monotonic() - started < 5.0
    assert r["sn2"].kind is ObservationKind.SILENT
    assert "timed out after 1s" in (r["sn2"].reason or "")


@pytest.mark.parametrize("kind", ["garbage", "truncated"])
def test_garbage_json_is_silent_malformed(sb: launcher.Sandbox, tmp_path: Path,
                                          kind: str) -> None:
    sb.fault("sn1", kind)
    r = rows(snap(sb, tmp_path))
    assert r["sn1"].kind is ObservationKind.SILENT
    # App by app, or on the batch route's first page (which says so).
    assert r["sn1"].reason in ("malformed JSON",
                               "batch status read failed on page 1: malformed JSON")


def test_ansi_in_last_error_is_neutralised(sb: launcher.Sandbox, tmp_path: Path) -> None:
    sb.fault("sn2", "ansi")
    r = rows(snap(sb, tmp_path))
    runtime = r["sn2"].runtime
    assert runtime is not None and runtime.last_error
    assert "\x1b" not in runtime.last_error and "\\x1b" in runtime.last_error
    assert all(ord(c) >= 0x20 for c in runtime.last_error)


def test_a_reused_token_that_gets_401_is_re_minted(sb: launcher.Sandbox,
                                                   tmp_path: Path) -> None:
    sb.fault("sn2", "reauth")
    r = rows(snap(sb, tmp_path, concurrency=1))
    assert r["sn2"].kind is ObservationKind.ANSWERED


def test_a_token_from_one_cluster_is_refused_by_another_and_handled(
        sb: launcher.Sandbox, tmp_path: Path) -> None:
    conn = conn_for(sb, tmp_path)

    async def go() -> tuple[LiveSnapshot, LiveSnapshot]:
        prober = Prober(conn, signer_key=sb.signer_key_file)
        async with prober:
            first = await observe_async(desired(sb), conn, env=sb.env(), prober=prober)
            # Poison the cache: sn1's session offered to sn2 must be refused there, and
            # the prober must recover by minting sn2's own.
            prober._tokens["127.0.0.3"] = prober._tokens["127.0.0.2"]
            second = await observe_async(desired(sb), conn, env=sb.env(), prober=prober)
            return first, second

    _first, second = asyncio.run(go())
    assert rows(second)["sn2"].kind is ObservationKind.ANSWERED
    refused = [e for e in sb.audit("sn2") if e.get("status") == 401]
    assert refused, "sn2 refused the foreign token"


def test_control_plane_5xx_and_retry_replies_are_absorbed(sb: launcher.Sandbox,
                                                          tmp_path: Path) -> None:
    sb.fault(launcher.CONTROL_PLANE, "5xx", times=2)
    assert isinstance(snap(sb, tmp_path).services["svc-checkout"], LiveService)
    sb.clear_faults()
    sb.fault(launcher.CONTROL_PLANE, "retry", times=2, waitForMs=50)
    assert isinstance(snap(sb, tmp_path).services["svc-checkout"], LiveService)


def test_a_null_response_is_a_failure(sb: launcher.Sandbox, tmp_path: Path) -> None:
    conn = conn_for(sb, tmp_path)

    async def go() -> None:
        async with ControlPlaneClient(conn, token=sb.token) as cp:
            await cp.get_services()  # identity cached
            sb.fault(launcher.CONTROL_PLANE, "null-response", times=1)
            await cp.call("getServices", {})

    with pytest.raises(ProtocolError, match="neither a response nor an error"):
        asyncio.run(go())


def test_a_slow_control_plane_hits_the_call_deadline(sb: launcher.Sandbox,
                                                     tmp_path: Path) -> None:
    sb.fault(launcher.CONTROL_PLANE, "slow", ms=3000)
    started = time.monotonic()
    with pytest.raises(TransportError, match="deadline"):
        snap(sb, tmp_path, call_timeout=0.5)
    assert time.monotonic() - started < 4.0


def test_the_canary_token_appears_in_no_output(sb: launcher.Sandbox, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    with pytest.raises(Unauthorized) as info:
        snap(sb, tmp_path, env={**sb.env(), "RECONCILE_TOKEN": CANARY})
    texts += [str(info.value), repr(info.value)]
    snapshot = snap(sb, tmp_path)
    texts.append(snapshot.model_dump_json())
    texts.append(repr(conn_for(sb, tmp_path)))
    out = capsys.readouterr()
    texts += [out.out, out.err, caplog.text]
    for text in texts:
        assert CANARY not in text
        assert sb.token not in text


def test_an_unreachable_control_plane_raises(sb: launcher.Sandbox, tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match="unreachable"):
        snap(sb, tmp_path, control_plane_url="https://127.0.0.1:9")
