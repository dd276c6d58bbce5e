"""The real Node ``TypedRequest`` client against the sandbox's control plane, over TLS.

The other direction of the interop proof: the sandbox must be something the real
@api.global/typedrequest 3.3.0 client can talk to. The client trusts the sandbox CA through
``NODE_EXTRA_CA_CERTS``; the token goes through the environment (``RECONCILE_TOKEN``) and
stdin, never the argv. The last tests send the same envelopes to the sandbox and to the
real ``TypedRouter`` and require the same answer: a sandbox that is more lenient (or says
more) than the real thing lets the client pass tests it would fail in production.

One sandbox serves the module (read-only tests): started by ``tests.sandboxes`` with the
same options as the shared ``sandbox`` fixture, which is per test and would cost a start
per test.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from interop_harness import NodeServer, RunNodeClient, node_env, typedrequest_url

from reconciler.sandbox.launcher import Sandbox
from tests import sandboxes

pytestmark = [pytest.mark.node, pytest.mark.integration, pytest.mark.xdist_group("interop-sandbox")]

UNKNOWN_METHOD_TEXT = "There is no available method for this call on the server side"
IDENTITY_FIELDS = {"name", "userId", "type", "role", "expiresAt", "jwt"}
CONVERGE_DELAY_MS = 200  # as tests/conftest.py


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    yield from sandboxes.for_module(tmp_path_factory, "interop",
                                    converge_delay_ms=CONVERGE_DELAY_MS)


def test_identity_exchange_then_get_service(sandbox: Sandbox,
                                            run_node_client: RunNodeClient) -> None:
    url, env = typedrequest_url(sandbox), node_env(sandbox)
    exchanged = run_node_client(url, "getIdentityByToken", {"token": sandbox.token}, env=env)
    assert exchanged.returncode == 0, exchanged.out
    identity = exchanged.out["response"]["identity"]
    assert set(identity) >= IDENTITY_FIELDS, identity
    assert identity["type"] in {"machine", "human"}

    got = run_node_client(url, "getServiceById",
                          {"identity": identity, "serviceId": "svc-checkout"}, env=env)
    assert got.returncode == 0, got.out
    service = got.out["response"]["service"]
    assert service["id"] == "svc-checkout"
    assert service["data"]["name"] == "checkout"
    assert sandbox.token not in got.stderr


def test_service_not_found_surfaces_as_typed_response_error(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    result = run_node_client(typedrequest_url(sandbox), "getServiceById",
                             {"serviceId": "svc-does-not-exist"}, with_identity=True,
                             env=node_env(sandbox))
    assert result.returncode == 1
    assert result.out["errorClass"] == "TypedResponseError", result.out
    assert result.out["data"]["code"] == "SERVICE_NOT_FOUND"
    assert isinstance(result.out["text"], str) and result.out["text"]


def test_bad_token_surfaces_as_typed_response_error(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    bad = run_node_client(typedrequest_url(sandbox), "getIdentityByToken",
                          {"token": "canary-not-a-token-91c2"}, env=node_env(sandbox))
    assert bad.out["errorClass"] == "TypedResponseError", bad.out
    assert bad.out["data"]["code"] == "UNAUTHORIZED"
    assert "canary-not-a-token-91c2" not in bad.out["text"]


def test_tls_is_verified_without_the_sandbox_ca_the_call_fails(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    result = run_node_client(typedrequest_url(sandbox), "getIdentityByToken",
                             {"token": sandbox.token}, env={})
    assert result.out["ok"] is False
    assert result.out["errorClass"] == "TypeError"  # undici's "fetch failed"
    assert "certificate" in (result.out.get("cause") or "").lower(), result.out


# --- the sandbox answers malformed or unroutable envelopes as the real router does ------


def _both(sandbox: Sandbox, node_server: NodeServer, body: dict[str, Any]
          ) -> tuple[httpx.Response, httpx.Response]:
    context = ssl.create_default_context(cafile=str(sandbox.ca_file))
    with httpx.Client(verify=context, trust_env=False, timeout=10.0) as tls, \
            httpx.Client(trust_env=False, timeout=10.0) as plain:
        return (tls.post(typedrequest_url(sandbox), json=body),
                plain.post(node_server.url, json=body))


NO_CORRELATION: dict[str, Any] = {"method": "getIdentityByToken", "request": {"token": "x"},
                                  "response": None}


@pytest.mark.parametrize("correlation", [None, {"id": "uni_" + "0" * 24, "phase": "response"}],
                         ids=["missing", "phase-response"])
def test_an_envelope_that_is_not_a_request_is_answered_null(
        sandbox: Sandbox, node_server: NodeServer, correlation: dict[str, str] | None) -> None:
    body = dict(NO_CORRELATION)
    if correlation is not None:
        body["correlation"] = correlation
    sandbox_reply, real_reply = _both(sandbox, node_server, body)
    assert (real_reply.status_code, real_reply.text) == (200, "null")
    assert (sandbox_reply.status_code, sandbox_reply.text) == (200, "null"), (
        "the real TypedRouter does not route this envelope; the sandbox answered "
        + sandbox_reply.text[:300])


def test_unknown_method_error_is_the_real_routers(sandbox: Sandbox,
                                                  node_server: NodeServer) -> None:
    body = {"method": "noSuchMethod", "request": {}, "response": None,
            "correlation": {"id": "uni_" + "1" * 24, "phase": "request"}}
    sandbox_reply, real_reply = _both(sandbox, node_server, body)
    real = real_reply.json()
    assert real["error"] == {"text": UNKNOWN_METHOD_TEXT, "data": {}}
    mine = sandbox_reply.json()
    assert sandbox_reply.status_code == 200
    assert mine["correlation"] == real["correlation"]
    # A code here would make a client classify it differently against the sandbox
    # (e.g. INVALID_REQUEST) than against the real control plane (no code).
    assert mine["error"] == real["error"]


def test_garbage_is_http_400_and_head_is_200(sandbox: Sandbox,
                                             node_server: NodeServer) -> None:
    context = ssl.create_default_context(cafile=str(sandbox.ca_file))
    with httpx.Client(verify=context, trust_env=False, timeout=10.0) as tls, \
            httpx.Client(trust_env=False, timeout=10.0) as plain:
        for client, url in ((tls, typedrequest_url(sandbox)), (plain, node_server.url)):
            garbage = client.post(url, content=b"{oops",
                                  headers={"content-type": "application/json"})
            assert (garbage.status_code, garbage.json()) == (400, {"error": "Invalid request"})
            assert client.head(url).status_code == 200, url
