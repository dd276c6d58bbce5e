"""The real Node ``TypedRequest`` client against the sandbox's control plane, over TLS.

The other direction of the interop proof: the sandbox (``sandbox`` fixture,
tests/conftest.py) must be something the real @api.global/typedrequest 3.3.0 client can
talk to. The client trusts the sandbox CA through ``NODE_EXTRA_CA_CERTS``; the token goes
through the environment (``RECONCILE_TOKEN``) and stdin, never the argv. The last test
sends the same malformed envelopes to the sandbox and to the real router and checks they
are refused alike.
"""

from __future__ import annotations

import ssl
from typing import Any, Protocol

import httpx
import pytest
from interop_harness import NodeServer, RunNodeClient

pytestmark = [pytest.mark.node, pytest.mark.integration]

UNKNOWN_METHOD_TEXT = "There is no available method for this call on the server side"
IDENTITY_FIELDS = {"name", "userId", "type", "role", "expiresAt", "jwt"}


class Sandbox(Protocol):
    """What these tests use of the ``sandbox`` fixture (issue 3)."""

    @property
    def control_plane_url(self) -> str: ...
    @property
    def ca_file(self) -> Any: ...  # str or Path
    @property
    def token(self) -> str: ...


def typedrequest_url(sandbox: Sandbox) -> str:
    base = str(sandbox.control_plane_url).rstrip("/")
    return base if base.endswith("/typedrequest") else base + "/typedrequest"


def node_env(sandbox: Sandbox) -> dict[str, str]:
    return {"NODE_EXTRA_CA_CERTS": str(sandbox.ca_file), "RECONCILE_TOKEN": sandbox.token}


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


def test_bad_token_and_unknown_method_surface_as_typed_response_errors(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    url, env = typedrequest_url(sandbox), node_env(sandbox)
    bad = run_node_client(url, "getIdentityByToken", {"token": "canary-not-a-token-91c2"},
                          env=env)
    assert bad.out["errorClass"] == "TypedResponseError", bad.out
    assert bad.out["data"]["code"] == "UNAUTHORIZED"

    unknown = run_node_client(url, "noSuchMethod", {}, with_identity=True, env=env)
    assert unknown.out["errorClass"] == "TypedResponseError", unknown.out
    assert unknown.out["text"] == UNKNOWN_METHOD_TEXT


def test_tls_is_verified_without_the_sandbox_ca_the_call_fails(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    result = run_node_client(typedrequest_url(sandbox), "getIdentityByToken",
                             {"token": sandbox.token}, env={})
    assert result.out["ok"] is False
    assert result.out["errorClass"] == "TypeError"  # undici's "fetch failed"
    assert "certificate" in (result.out.get("cause") or "").lower(), result.out


def test_sandbox_refuses_malformed_envelopes_like_the_real_router(
        sandbox: Sandbox, node_server: NodeServer) -> None:
    no_correlation = {"method": "getIdentityByToken", "request": {"token": "x"},
                      "response": None}
    as_response = {**no_correlation, "correlation": {"id": "uni_" + "0" * 24,
                                                     "phase": "response"}}
    unknown = {"method": "noSuchMethod", "request": {}, "response": None,
               "correlation": {"id": "uni_" + "1" * 24, "phase": "request"}}
    context = ssl.create_default_context(cafile=str(sandbox.ca_file))
    with httpx.Client(verify=context, trust_env=False, timeout=10.0) as tls, \
            httpx.Client(trust_env=False, timeout=10.0) as plain:
        for client, url in ((tls, typedrequest_url(sandbox)), (plain, node_server.url)):
            for body in (no_correlation, as_response):
                reply = client.post(url, json=body)
                assert (reply.status_code, reply.text) == (200, "null"), (url, body)
            reply = client.post(url, json=unknown)
            assert reply.status_code == 200
            assert reply.json()["error"]["text"] == UNKNOWN_METHOD_TEXT, url
            assert reply.json()["correlation"]["phase"] == "response", url
            garbage = client.post(url, content=b"{oops",
                                  headers={"content-type": "application/json"})
            assert garbage.status_code == 400, url
            assert client.head(url).status_code == 200, url
