"""The project's Python ``ControlPlaneClient`` against a real Node ``TypedRouter``.

server.mjs mounts the real @api.global/typedrequest 3.3.0 router, so every reply here is
what the library produces, not what the sandbox imitates. The client does its normal
identity exchange (``getIdentityByToken``) against the same router before each first call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from interop_harness import NodeServer

from reconciler.shell.controlplane import (
    MAX_RETRY_REPLIES,
    CasMismatch,
    ControlPlaneClient,
    DomainError,
    NotFound,
    ProtocolError,
    TransportError,
    Unauthorized,
    UnknownMethod,
)
from reconciler.shell.endpoints import Connection

pytestmark = [pytest.mark.node, pytest.mark.xdist_group("interop-python-client")]

T = TypeVar("T")


def connection(url: str, *, ca_file: Path | None = None,
               call_timeout: float = 10.0) -> Connection:
    """A ``Connection`` for a loopback control plane (mesh fields unused)."""
    return Connection(
        control_plane_url=url,
        control_plane_ca=ca_file,
        token_env="RECONCILE_TOKEN",
        call_timeout=call_timeout,
        gateway="gateway.interop.test",
        mesh_port=18444,
        mesh_ca=None,
        static_addresses=("127.0.0.2",),
        settings_clusters=(),
        concurrency=4,
        probe_timeout=5.0,
        wallet_address="rInterop",
        auth_app_id="interop",
        signer_key_env="RECONCILE_SIGNER_KEY",
    )


def with_client(url: str, token: str, body: Callable[[ControlPlaneClient], Awaitable[T]],
                *, ca_file: Path | None = None) -> T:
    async def run() -> T:
        async with ControlPlaneClient(connection(url, ca_file=ca_file), token=token) as cp:
            return await body(cp)

    return asyncio.run(run())


def seen_ids(server: NodeServer, method: str) -> list[str]:
    """Correlation ids of every delivery of ``method`` the router has seen so far."""

    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("interopSeen", {})

    seen = with_client(server.url, server.token, body)["seen"]
    return [s["correlationId"] for s in seen if s["method"] == method]


def test_success_with_identity_exchange(node_server: NodeServer) -> None:
    async def body(cp: ControlPlaneClient) -> tuple[dict[str, Any], dict[str, Any]]:
        raw = await cp.call("getServiceById", {"serviceId": "svc-checkout"})
        typed = await cp.get_service("svc-checkout")
        return raw, typed

    raw, service = with_client(node_server.url, node_server.token, body)
    # The handler demands the identity that getIdentityByToken handed out: the exchange
    # and the injection into `request.identity` both worked against the real router.
    assert raw["service"]["id"] == "svc-checkout"
    assert service == raw["service"]
    assert service["data"]["name"] == "checkout"


def test_typed_response_error_becomes_a_typed_exception_with_the_code(
        node_server: NodeServer) -> None:
    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("getServiceById", {"serviceId": "svc-missing"})

    with pytest.raises(NotFound) as caught:
        with_client(node_server.url, node_server.token, body)
    assert caught.value.code == "SERVICE_NOT_FOUND"
    assert caught.value.data == {"code": "SERVICE_NOT_FOUND", "serviceId": "svc-missing"}
    assert "svc-missing" in caught.value.message


def test_cas_mismatch_carries_expected_and_actual(node_server: NodeServer) -> None:
    data = {"code": "ROLLOUT_GENERATION_MISMATCH", "expected": 3, "actual": 4}

    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("failWith", {"text": "generation moved", "data": data})

    with pytest.raises(CasMismatch) as caught:
        with_client(node_server.url, node_server.token, body)
    assert (caught.value.code, caught.value.expected, caught.value.actual) == (
        "ROLLOUT_GENERATION_MISMATCH", 3, 4)


def test_typed_response_error_without_data_is_a_domain_error_without_code(
        node_server: NodeServer) -> None:
    # The real wire is then `error: {text}` -- no `data` key at all.
    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("failWith", {"text": "bare failure"})

    with pytest.raises(DomainError) as caught:
        with_client(node_server.url, node_server.token, body)
    assert type(caught.value) is DomainError
    assert caught.value.code == ""
    assert caught.value.data == {}
    assert "bare failure" in caught.value.message


def test_retry_is_honoured_with_the_same_correlation_id(node_server: NodeServer) -> None:
    async def body(cp: ControlPlaneClient) -> tuple[dict[str, Any], int]:
        await cp.call("echo", {})  # the identity exchange happens here, not below
        before = cp.requests_sent
        result = await cp.call("flaky", {"failTimes": 2, "waitForMs": 20})
        return result, cp.requests_sent - before

    earlier = len(seen_ids(node_server, "flaky"))
    result, sent = with_client(node_server.url, node_server.token, body)
    assert result == {"ok": True, "attempts": 3}
    assert sent == 3
    ids = seen_ids(node_server, "flaky")[earlier:]
    assert len(ids) == 3 and len(set(ids)) == 1


def test_retry_is_bounded(node_server: NodeServer) -> None:
    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("flaky", {"failTimes": 1000, "waitForMs": 1})

    before = len(seen_ids(node_server, "flaky"))
    with pytest.raises(TransportError) as caught:
        with_client(node_server.url, node_server.token, body)
    assert "retry" in caught.value.message
    ids = seen_ids(node_server, "flaky")[before:]
    assert len(ids) == MAX_RETRY_REPLIES + 1 and len(set(ids)) == 1


def test_unknown_method(node_server: NodeServer) -> None:
    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("noSuchMethod", {})

    with pytest.raises(UnknownMethod) as caught:
        with_client(node_server.url, node_server.token, body)
    assert caught.value.data == {}


@pytest.mark.parametrize("method", ["crash", "returnNothing"])
def test_null_response_without_error_is_a_protocol_error(
        node_server: NodeServer, method: str) -> None:
    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call(method, {})

    with pytest.raises(ProtocolError, match="neither a response nor an error"):
        with_client(node_server.url, node_server.token, body)


def test_body_null_from_the_real_router_is_a_protocol_error(node_server: NodeServer) -> None:
    # The fault path strips `correlation`, so the router answers `null` -- here already for
    # the identity exchange, which is the first envelope the client sends.
    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("echo", {})

    with pytest.raises(ProtocolError, match="null"):
        with_client(node_server.fault_url("strip-correlation"), node_server.token, body)


@pytest.mark.parametrize(("fault", "status", "transient"),
                         [("http-500", 500, True), ("http-400", 400, False)])
def test_non_200_is_a_transport_error(node_server: NodeServer, fault: str, status: int,
                                      transient: bool) -> None:
    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("echo", {})

    with pytest.raises(TransportError) as caught:
        with_client(node_server.fault_url(fault), node_server.token, body)
    assert not isinstance(caught.value, ProtocolError)
    assert (caught.value.status, caught.value.transient) == (status, transient)


def test_bad_token_is_unauthorized_and_never_echoed(node_server: NodeServer) -> None:
    canary = "canary-bad-token-0b5e9c"

    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.call("echo", {})

    with pytest.raises(Unauthorized) as caught:
        with_client(node_server.url, canary, body)
    assert caught.value.code == "UNAUTHORIZED"
    assert canary not in str(caught.value) and canary not in repr(caught.value)


def test_over_tls_with_the_ca_and_refused_without_it(node_tls_server: NodeServer) -> None:
    async def body(cp: ControlPlaneClient) -> dict[str, Any]:
        return await cp.get_service("svc-checkout")

    service = with_client(node_tls_server.url, node_tls_server.token, body,
                          ca_file=node_tls_server.ca_file)
    assert service["id"] == "svc-checkout"
    # Without the CA the system/certifi roots apply, and the throwaway CA is not in them.
    with pytest.raises(TransportError, match="TLS"):
        with_client(node_tls_server.url, node_tls_server.token, body)
