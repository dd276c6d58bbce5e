"""What the real @api.global/typedrequest 3.3.0 puts on the wire, pinned against CONTRACT.md §1.

Raw HTTP against a real ``TypedRouter`` (server.mjs), and the real ``TypedRequest`` client
(client.mjs) against the same router. Each test names the contract row it checks; where the
library differs from the contract's wording, the test says so and pins what the library does,
so that an upgrade which changes it fails here first.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from interop_harness import NodeServer, RunNodeClient

pytestmark = [pytest.mark.node, pytest.mark.xdist_group("interop-wire")]

UNKNOWN_METHOD_TEXT = "There is no available method for this call on the server side"
CORRELATION_ID = re.compile(r"^uni_[0-9a-f]{24}$")


def envelope(method: str, request: dict[str, Any], cid: str = "uni_0123456789abcdef01234567"
             ) -> dict[str, Any]:
    return {"method": method, "request": request, "response": None,
            "correlation": {"id": cid, "phase": "request"}}


def post(url: str, body: Any) -> httpx.Response:
    return httpx.post(url, json=body, timeout=10.0)


def test_success_echoes_the_envelope_with_response_phase_and_a_localdata_null(
        node_server: NodeServer) -> None:
    sent = envelope("echo", {"a": 1})
    sent["extra"] = "kept"
    reply = post(node_server.url, sent)
    assert reply.status_code == 200
    body = reply.json()
    assert body["response"] == {"echo": {"a": 1}}
    assert body["correlation"] == {"id": sent["correlation"]["id"], "phase": "response"}
    assert body["request"] == {"a": 1}
    # Not in CONTRACT.md: the router always adds `"localData": null`, and echoes unknown
    # top-level keys. A strict envelope model must allow extra keys.
    assert "localData" in body and body["localData"] is None
    assert body["extra"] == "kept"
    assert "error" not in body and "retry" not in body


def test_typed_response_error_is_error_text_and_data_with_the_code(
        node_server: NodeServer) -> None:
    body = post(node_server.url, envelope("failWith", {"text": "nope", "data": {
        "code": "SERVICE_NOT_FOUND", "serviceId": "svc-x"}})).json()
    assert body["error"] == {"text": "nope", "data": {"code": "SERVICE_NOT_FOUND",
                                                      "serviceId": "svc-x"}}
    assert body["response"] is None
    assert body["correlation"]["phase"] == "response"
    assert "retry" not in body


def test_typed_response_error_without_data_omits_the_data_key(node_server: NodeServer) -> None:
    # CONTRACT.md says `error: {text, data}`; TypedResponseError's data is optional and
    # JSON.stringify drops `undefined`, so the real wire can be `error: {text}` alone.
    body = post(node_server.url, envelope("failWith", {"text": "bare"})).json()
    assert body["error"] == {"text": "bare"}


def test_unknown_method_is_an_error_with_empty_data_and_no_code(node_server: NodeServer) -> None:
    body = post(node_server.url, envelope("noSuchMethod", {})).json()
    assert body["error"] == {"text": UNKNOWN_METHOD_TEXT, "data": {}}
    assert body["correlation"]["phase"] == "response"
    assert body["response"] is None


@pytest.mark.parametrize("method", ["crash", "returnNothing"])
def test_handler_that_throws_a_plain_error_or_returns_nothing_answers_null_response(
        node_server: NodeServer, method: str) -> None:
    # CONTRACT row "response: null and no error": this is how it arises -- the router
    # swallows any non-TypedResponseError exception (console.log) and answers 200.
    reply = post(node_server.url, envelope(method, {}))
    assert reply.status_code == 200
    body = reply.json()
    assert body["response"] is None
    assert "error" not in body and "retry" not in body
    assert body["correlation"]["phase"] == "response"


def test_a_stale_response_in_the_request_survives_a_handler_that_returns_nothing(
        node_server: NodeServer) -> None:
    # The router only overwrites `response` when the handler returns something truthy: a
    # client must send `response: null`, or a silent failure comes back looking like data.
    sent = envelope("returnNothing", {})
    sent["response"] = {"stale": True}
    assert post(node_server.url, sent).json()["response"] == {"stale": True}


@pytest.mark.parametrize("mutate", ["drop", "phase-response"])
def test_envelope_that_is_not_a_request_is_answered_with_body_null(
        node_server: NodeServer, mutate: str) -> None:
    sent = envelope("echo", {})
    if mutate == "drop":
        del sent["correlation"]
    else:
        sent["correlation"]["phase"] = "response"
    reply = post(node_server.url, sent)
    assert reply.status_code == 200
    assert reply.text == "null"


def test_retry_is_a_top_level_field_and_the_same_correlation_id_then_succeeds(
        node_server: NodeServer) -> None:
    # 3.3.0 has no server-side API for `retry` (TypedHandler sets only response/error);
    # server.mjs sets it from router middleware. Shape: {waitForMs, reason}, no `error`.
    sent = envelope("flaky", {"failTimes": 1}, cid="uni_aaaaaaaaaaaaaaaaaaaaaaaa")
    first = post(node_server.url, sent).json()
    assert first["retry"] == {"waitForMs": 50, "reason": "warming up (1)"}
    assert "error" not in first and first["response"] is None
    second = post(node_server.url, sent).json()
    assert "retry" not in second
    assert second["response"] == {"ok": True, "attempts": 2}


def test_head_is_liveness_and_garbage_is_http_400(node_server: NodeServer) -> None:
    assert httpx.head(node_server.url, timeout=5.0).status_code == 200
    bad = httpx.post(node_server.url, content=b"{not json", timeout=5.0,
                     headers={"content-type": "application/json"})
    assert bad.status_code == 400
    assert bad.json() == {"error": "Invalid request"}


# --- the real TypedRequest client against the real router --------------------------------


def test_node_client_success_and_correlation_id_format(
        node_server: NodeServer, run_node_client: RunNodeClient) -> None:
    result = run_node_client(node_server.url, "echo", {"x": [1, 2]})
    assert result.returncode == 0, result.stderr
    assert result.out == {"ok": True, "response": {"echo": {"x": [1, 2]}}}
    seen = post(node_server.url, envelope("interopSeen", {})).json()["response"]["seen"]
    ids = [s["correlationId"] for s in seen if s["method"] == "echo"]
    assert ids and CORRELATION_ID.match(ids[-1]), ids


def test_node_client_raises_typed_response_error_with_text_and_data(
        node_server: NodeServer, run_node_client: RunNodeClient) -> None:
    result = run_node_client(node_server.url, "failWith",
                             {"text": "conflict", "data": {"code": "ROLLOUT_ID_MISMATCH"}})
    assert result.returncode == 1
    assert result.out == {"ok": False, "errorClass": "TypedResponseError", "text": "conflict",
                          "data": {"code": "ROLLOUT_ID_MISMATCH"}}
    unknown = run_node_client(node_server.url, "noSuchMethod", {})
    assert unknown.out == {"ok": False, "errorClass": "TypedResponseError",
                           "text": UNKNOWN_METHOD_TEXT, "data": {}}


def test_node_client_honours_retry_with_the_same_correlation_id(
        node_server: NodeServer, run_node_client: RunNodeClient) -> None:
    result = run_node_client(node_server.url, "flaky", {"failTimes": 2, "waitForMs": 30})
    assert result.out == {"ok": True, "response": {"ok": True, "attempts": 3}}
    seen = post(node_server.url, envelope("interopSeen", {})).json()["response"]["seen"]
    flaky_ids = [s["correlationId"] for s in seen if s["method"] == "flaky"]
    last = flaky_ids[-1]
    assert flaky_ids[-3:] == [last, last, last]  # re-sent three times, one correlation id
    # The library's retry has no bound (it recurses for as long as the server says retry).


def test_node_client_treats_a_null_response_as_a_result_not_an_error(
        node_server: NodeServer, run_node_client: RunNodeClient) -> None:
    # CONTRACT.md: treat as an error. The library resolves fire() with null instead.
    result = run_node_client(node_server.url, "crash", {})
    assert result.out == {"ok": True, "response": None}


def test_node_client_on_body_null_and_error_with_retry_fails_with_a_type_error(
        node_server: NodeServer, run_node_client: RunNodeClient) -> None:
    # body `null`: the client dereferences it -> TypeError, not TypedResponseError.
    stripped = run_node_client(node_server.fault_url("strip-correlation"), "echo", {})
    assert stripped.out["ok"] is False
    assert stripped.out["errorClass"] == "TypeError"
    # `error` together with `retry` (CONTRACT: never sent) makes the client return null
    # from its transport and crash on it: also a TypeError, the retry is not honoured.
    both = run_node_client(node_server.url, "flaky", {"failTimes": 1, "alsoError": True})
    assert both.out["ok"] is False
    assert both.out["errorClass"] == "TypeError"


def test_node_client_non_200_is_a_plain_error_with_the_status(
        node_server: NodeServer, run_node_client: RunNodeClient) -> None:
    result = run_node_client(node_server.fault_url("http-500"), "echo", {})
    assert result.out["ok"] is False
    assert result.out["errorClass"] == "Error"
    assert result.out["message"].startswith("HTTP 500")


def test_node_client_over_tls_trusts_node_extra_ca_certs_only(
        node_tls_server: NodeServer, run_node_client: RunNodeClient) -> None:
    # The mechanism the sandbox tests rely on: undici honours NODE_EXTRA_CA_CERTS.
    trusted = run_node_client(node_tls_server.url, "echo", {"tls": True},
                              env={"NODE_EXTRA_CA_CERTS": str(node_tls_server.ca_file)})
    assert trusted.out == {"ok": True, "response": {"echo": {"tls": True}}}
    untrusted = run_node_client(node_tls_server.url, "echo", {})
    assert untrusted.out["errorClass"] == "TypeError"
    assert "certificate" in untrusted.out["cause"].lower(), untrusted.out
