"""The snapshot pass over fakes: what is unknown stays unknown, and totals fail loudly."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.core.desired import DesiredState, Service, Settings
from reconciler.core.live import LiveService, LiveSnapshot, ObservationKind, ReadFailure
from reconciler.shell.controlplane import ControlPlaneClient, ControlPlaneError, Unauthorized
from reconciler.shell.endpoints import ConfigError, Connection, Overrides, parse_resolve
from reconciler.shell.observing import observe_async, signer_key_path
from reconciler.shell.probing import Prober
from reconciler.shell.progress import StderrProgress
from tests.live.fakes import (
    CANARY,
    SETTINGS,
    FakeControlPlane,
    FakeMesh,
    connection,
    error,
    signer_pem,
    three_clusters,
)


def service(name: str) -> Service:
    return Service.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Service", "name": name,
        "serviceId": f"svc-{name}", "appId": name,
        "release": {"registryHost": "registry.test", "repository": f"shop/{name}",
                    "digest": "sha256:" + "a" * 64}})


def desired(*names: str) -> DesiredState:
    return DesiredState(settings=Settings.model_validate(SETTINGS),
                        services=tuple(service(n) for n in names), grants=())


def raw_service(name: str, targets: list[str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "egressRevision": 0}
    if targets is not None:
        data["imageDeployment"] = {
            "rolloutId": "r1", "rolloutGeneration": 1, "releaseId": "rel",
            "requestedDigest": "sha256:" + "a" * 64, "mode": "promotion",
            "targetScope": {"targetClusterIds": targets, "requiredReplicaCount": 2}}
    return {"id": f"svc-{name}", "data": data}


def snapshot(cp: FakeControlPlane, mesh: FakeMesh, state: DesiredState) -> LiveSnapshot:
    async def go() -> LiveSnapshot:
        conn = connection()
        client = ControlPlaneClient(conn, token=CANARY, transport=cp.transport())
        prober = Prober(conn, signer_key=signer_pem(), transport=mesh.transport())
        async with client, prober:
            return await observe_async(state, conn, env={}, client=client, prober=prober)

    return asyncio.run(go())


def test_a_snapshot_holds_services_grants_mesh_and_one_row_per_cluster_per_app() -> None:
    cp = FakeControlPlane(script={
        "getServices": [{"services": [raw_service("checkout", ["sn1", "sn2", "sn3"]),
                                      raw_service("other")]}],
        "getServiceImageReleases": [{"releases": []}],
        "getServiceDeploymentGrants": [{"grants": [
            {"userId": "bot", "serviceId": "svc-checkout",
             "capabilities": ["deployment:promote-route"]}]}],
    })
    snap = snapshot(cp, FakeMesh(three_clusters(("checkout",))), desired("checkout"))
    assert set(snap.services) == {"svc-checkout"}
    assert isinstance(snap.services["svc-checkout"], LiveService)
    assert snap.grants is not None and snap.grants[0].user_id == "bot"
    assert [o.cluster_id for o in snap.observations["checkout"]] == ["sn1", "sn2", "sn3"]
    assert all(o.kind is ObservationKind.ANSWERED for o in snap.observations["checkout"])
    assert snap.control_plane_url == "https://cp.test"


def test_a_service_missing_upstream_or_failing_is_a_read_failure_never_absent() -> None:
    cp = FakeControlPlane(script={
        "getServices": [{"services": [raw_service("a"), raw_service("b")]}],
        "getServiceImageReleases": [
            lambda env: {"releases": []} if env["request"]["serviceId"] == "svc-a"
            else error("FORBIDDEN", "no capability")],
        "getServiceDeploymentGrants": [httpx.Response(503)],
    })
    snap = snapshot(cp, FakeMesh(three_clusters(("a", "b", "c"))), desired("a", "b", "c"))
    assert isinstance(snap.services["svc-a"], LiveService)
    b, c = snap.services["svc-b"], snap.services["svc-c"]
    assert isinstance(b, ReadFailure) and b.code == "FORBIDDEN"
    assert isinstance(c, ReadFailure) and c.code == "SERVICE_NOT_FOUND"
    assert snap.grants is None and snap.grants_error is not None
    assert "HTTP 503" in snap.grants_error


def test_rollout_targets_join_the_expected_clusters() -> None:
    cp = FakeControlPlane(script={
        "getServices": [{"services": [raw_service("checkout", ["sn1", "sn2", "sn3", "sn7"])]}],
        "getServiceImageReleases": [{"releases": []}],
        "getServiceDeploymentGrants": [{"grants": []}],
    })
    snap = snapshot(cp, FakeMesh(three_clusters(("checkout",))), desired("checkout"))
    assert snap.mesh.expected_clusters == ("sn1", "sn2", "sn3", "sn7")
    rows = {o.cluster_id: o for o in snap.observations["checkout"]}
    assert rows["sn7"].kind is ObservationKind.SILENT


def test_a_total_control_plane_failure_raises() -> None:
    cp = FakeControlPlane(script={"getServices": [error("UNAUTHORIZED")],
                                  "getServiceDeploymentGrants": [{"grants": []}]})
    with pytest.raises(Unauthorized):
        snapshot(cp, FakeMesh(three_clusters()), desired("checkout"))
    cp = FakeControlPlane(script={"getServices": [httpx.Response(502)],
                                  "getServiceDeploymentGrants": [{"grants": []}]})
    with pytest.raises(ControlPlaneError):
        snapshot(cp, FakeMesh(three_clusters()), desired("checkout"))


def test_signer_key_path_names_the_variable(tmp_path: Path) -> None:
    conn = connection()
    with pytest.raises(ConfigError, match="RECONCILE_SIGNER_KEY"):
        signer_key_path(conn, {})
    with pytest.raises(ConfigError, match="names no existing file"):
        signer_key_path(conn, {"RECONCILE_SIGNER_KEY": str(tmp_path / "nope")})
    key = tmp_path / "k.pem"
    key.write_bytes(signer_pem())
    assert signer_key_path(conn, {"RECONCILE_SIGNER_KEY": str(key)}) == key


# -- endpoints ----------------------------------------------------------------------------


def test_overrides_flags_win_over_env_and_env_over_settings(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "other.pem").write_text("x")
    env = Overrides.from_env({"RECONCILE_CONTROL_PLANE_URL": "https://env.test",
                              "RECONCILE_GATEWAY": "gw.env.test"})
    flags = Overrides(control_plane_url="https://flag.test")
    merged = flags.over(env)
    assert merged.control_plane_url == "https://flag.test"
    assert merged.gateway == "gw.env.test" and merged.resolve is None
    conn = Connection.build(Settings.model_validate(SETTINGS), repo_root=tmp_path,
                            overrides=merged)
    assert conn.control_plane_url == "https://flag.test"
    assert conn.typedrequest_url == "https://flag.test/typedrequest"
    assert conn.gateway == "gw.env.test"
    assert conn.control_plane_ca == (tmp_path / "ca.pem").resolve()
    assert conn.static_addresses == ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    assert conn.mesh_port == 18444 and conn.settings_clusters == ("sn1", "sn2", "sn3")
    over_ca = Connection.build(Settings.model_validate(SETTINGS), repo_root=tmp_path,
                               overrides=Overrides(ca_file=str(tmp_path / "other.pem")))
    assert over_ca.mesh_ca == over_ca.control_plane_ca == (tmp_path / "other.pem").resolve()


def test_resolve_override_sets_addresses_and_port(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    conn = Connection.build(
        Settings.model_validate(SETTINGS), repo_root=tmp_path,
        overrides=Overrides(resolve="gateway.sandbox.test:2443:127.0.0.9,[::1],127.0.0.9"))
    assert conn.static_addresses == ("127.0.0.9", "::1") and conn.mesh_port == 2443
    with pytest.raises(ConfigError, match="names host"):
        Connection.build(Settings.model_validate(SETTINGS), repo_root=tmp_path,
                         overrides=Overrides(resolve="other.test:1:127.0.0.1"))


@pytest.mark.parametrize(("text", "message"), [
    ("gw", "expected HOST:PORT:ADDR"),
    ("gw:x:127.0.0.1", "not a number"),
    ("gw:0:127.0.0.1", "outside"),
    ("gw:1:localhost", "not an IP address"),
])
def test_parse_resolve_rejects_bad_entries(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_resolve(text)


def test_a_missing_ca_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"controlPlane\.caFile"):
        Connection.build(Settings.model_validate(SETTINGS), repo_root=tmp_path,
                         overrides=Overrides())


def test_a_connection_holds_no_secret() -> None:
    assert CANARY not in repr(connection())


# -- progress -----------------------------------------------------------------------------


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_progress_draws_only_on_a_terminal() -> None:
    for tty in (True, False):
        stream = _Stream(tty)
        progress = StderrProgress("reading", stream=stream, min_interval=0)
        progress.add(3)
        progress.advance(3)
        progress.close()
        assert ("reading: 3/3" in stream.getvalue()) is tty
        assert stream.getvalue() == "" or tty
