"""The control-plane client against an in-process fake: every row of CONTRACT §1's table."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from reconciler.shell import controlplane as cp
from reconciler.shell.controlplane import (
    CasMismatch,
    ControlPlaneClient,
    ControlPlaneError,
    DomainError,
    Forbidden,
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    ProtocolError,
    RollbackTargetNotAccepted,
    TransportError,
    Unauthorized,
    UnknownMethod,
    parse_grants,
    parse_service,
    token_from_env,
)
from reconciler.shell.endpoints import ConfigError
from tests.live.fakes import CANARY, FakeControlPlane, connection, error

SERVICE = {"id": "svc-checkout", "data": {"name": "checkout", "egressRevision": 1,
                                          "egress": [{"host": "api.stripe.com", "port": 443}]}}


def client(fake: FakeControlPlane, **conn: Any) -> ControlPlaneClient:
    return ControlPlaneClient(connection(**conn), token=CANARY, transport=fake.transport())


async def run(fake: FakeControlPlane, method: str, request: dict[str, Any] | None = None,
              **conn: Any) -> dict[str, Any]:
    async with client(fake, **conn) as c:
        return await c.call(method, request or {})


def test_a_call_sends_the_envelope_with_a_fresh_correlation_id_and_the_identity() -> None:
    fake = FakeControlPlane(script={"getServices": [{"services": [SERVICE]}]})

    async def go() -> None:
        async with client(fake) as c:
            assert await c.get_services() == [SERVICE]
            await c.get_services()

    asyncio.run(go())
    calls = fake.calls("getServices")
    assert len(calls) == 2
    ids = [e["correlation"]["id"] for e in calls]
    assert all(re.fullmatch(r"uni_[0-9a-f]{24}", i) for i in ids)
    assert ids[0] != ids[1]
    assert calls[0]["correlation"]["phase"] == "request"
    assert calls[0]["response"] is None
    assert calls[0]["request"]["identity"]["jwt"] == "jwt-1"
    assert fake.exchanges == 1, "the identity is cached between calls"
    assert fake.calls("getIdentityByToken")[0]["request"] == {"token": CANARY}


@pytest.mark.parametrize(("code", "cls"), [
    ("ROLLOUT_GENERATION_MISMATCH", CasMismatch),
    ("ROLLOUT_ID_MISMATCH", CasMismatch),
    ("EGRESS_REVISION_MISMATCH", CasMismatch),
    ("IDEMPOTENCY_KEY_REUSED", IdempotencyKeyReused),
    ("SERVICE_NOT_FOUND", NotFound),
    ("RELEASE_NOT_FOUND", NotFound),
    ("FORBIDDEN", Forbidden),
    ("ROLLBACK_TARGET_NOT_ACCEPTED", RollbackTargetNotAccepted),
    ("INVALID_REQUEST", InvalidRequest),
    ("SOMETHING_NEW", DomainError),
])
def test_an_error_reply_becomes_the_exception_its_code_names(
        code: str, cls: type[DomainError]) -> None:
    fake = FakeControlPlane(script={"m": [error(code, "nope", expected=3, actual=4)]})
    with pytest.raises(cls) as info:
        asyncio.run(run(fake, "m"))
    assert type(info.value) is cls
    assert info.value.code == code
    assert code in str(info.value) and "nope" in str(info.value)
    if isinstance(info.value, CasMismatch):
        assert (info.value.expected, info.value.actual) == (3, 4)


def test_unauthorized_re_exchanges_the_identity_once_then_raises() -> None:
    fake = FakeControlPlane(script={"m": [error("UNAUTHORIZED")]})
    with pytest.raises(Unauthorized):
        asyncio.run(run(fake, "m"))
    assert fake.exchanges == 2
    assert len(fake.calls("m")) == 2


def test_unauthorized_once_then_success_after_re_exchange() -> None:
    fake = FakeControlPlane(script={"m": [error("UNAUTHORIZED"), {"ok": True}]})
    assert asyncio.run(run(fake, "m")) == {"ok": True}
    assert fake.exchanges == 2
    assert fake.calls("m")[1]["request"]["identity"]["jwt"] == "jwt-2"


def test_an_identity_near_its_expiry_is_exchanged_again() -> None:
    fake = FakeControlPlane(script={"m": [{"ok": 1}]}, identity_expires_in_ms=5_000)

    async def go() -> None:
        async with client(fake) as c:
            await c.call("m", {})
            await c.call("m", {})

    asyncio.run(go())
    assert fake.exchanges == 2


def test_retry_is_honoured_with_the_same_correlation_id() -> None:
    fake = FakeControlPlane(script={"m": [{"retry": {"waitForMs": 10, "reason": "busy"}},
                                          {"retry": {"waitForMs": 0, "reason": "busy"}},
                                          {"ok": True}]})
    assert asyncio.run(run(fake, "m")) == {"ok": True}
    ids = {e["correlation"]["id"] for e in fake.calls("m")}
    assert len(fake.calls("m")) == 3 and len(ids) == 1


def test_retry_is_bounded_in_count() -> None:
    fake = FakeControlPlane(script={"m": [{"retry": {"waitForMs": 0, "reason": "busy"}}]})
    with pytest.raises(TransportError, match="retry more than"):
        asyncio.run(run(fake, "m"))
    assert len(fake.calls("m")) == cp.MAX_RETRY_REPLIES + 1


def test_retry_is_bounded_by_the_call_deadline() -> None:
    fake = FakeControlPlane(script={"m": [{"retry": {"waitForMs": 60_000, "reason": "x"}}]})
    started = time.monotonic()
    with pytest.raises(TransportError, match="deadline") as info:
        asyncio.run(run(fake, "m", call_timeout=0.3))
    assert info.value.transient
    # Obeying the reply would wait 60 s; the deadline is 0.3 s. 15 s tells the two apart
    # on a loaded machine too.
    assert time.monotonic() - started < 15.0


def test_a_null_response_without_error_is_a_failure_not_empty() -> None:
    fake = FakeControlPlane(script={"getServices": [lambda env: httpx.Response(200, json={
        **env, "response": None})]})

    async def go() -> None:
        async with client(fake) as c:
            await c.get_services()

    with pytest.raises(ProtocolError, match="neither a response nor an error"):
        asyncio.run(go())


def test_a_null_body_is_a_failure() -> None:
    fake = FakeControlPlane(script={"m": [httpx.Response(200, content=b"null")]})
    with pytest.raises(ProtocolError, match="body is null"):
        asyncio.run(run(fake, "m"))


def test_http_400_invalid_request_is_a_transport_error() -> None:
    fake = FakeControlPlane(script={"m": [httpx.Response(400, json={"error": "Invalid request"})]})
    with pytest.raises(TransportError, match="HTTP 400") as info:
        asyncio.run(run(fake, "m"))
    assert not info.value.transient and info.value.status == 400
    assert len(fake.calls("m")) == 1, "a 400 is not retried"


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_transient_and_reads_are_retried_boundedly(status: int) -> None:
    fake = FakeControlPlane(script={"getServices": [httpx.Response(status)]})

    async def go() -> None:
        async with client(fake) as c:
            await c.get_services()

    with pytest.raises(TransportError, match=f"HTTP {status}.*after 3 attempts") as info:
        asyncio.run(go())
    assert info.value.transient
    assert len(fake.calls("getServices")) == cp.MAX_TRANSIENT_ATTEMPTS


def test_redirects_are_not_followed() -> None:
    fake = FakeControlPlane(script={"m": [httpx.Response(
        307, headers={"Location": "https://evil.test/typedrequest"})]})
    with pytest.raises(TransportError, match="HTTP 307"):
        asyncio.run(run(fake, "m"))


def test_garbage_json_is_a_protocol_error() -> None:
    fake = FakeControlPlane(script={"m": [httpx.Response(200, content=b"{not json")]})
    with pytest.raises(ProtocolError, match="not JSON"):
        asyncio.run(run(fake, "m"))


def test_an_unknown_method_is_its_own_error() -> None:
    with pytest.raises(UnknownMethod, match="no available method"):
        asyncio.run(run(FakeControlPlane(), "noSuchMethod"))


def test_a_trickling_server_cannot_outlive_the_call_deadline() -> None:
    async def trickle() -> AsyncIterator[bytes]:
        for _ in range(1000):
            await asyncio.sleep(0.05)
            yield b" "

    fake = FakeControlPlane(script={"m": [lambda env: httpx.Response(200, content=trickle())]})
    started = time.monotonic()
    with pytest.raises(TransportError, match="deadline"):
        asyncio.run(run(fake, "m", call_timeout=0.5))
    # The trickle lasts 50 s; the deadline is 0.5 s. 15 s tells the two apart on a loaded
    # machine too.
    assert time.monotonic() - started < 15.0


def test_connect_errors_are_transient_and_say_unreachable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    async def go() -> None:
        async with ControlPlaneClient(connection(), token=CANARY,
                                      transport=httpx.MockTransport(refuse)) as c:
            await c.get_services()

    with pytest.raises(TransportError, match="unreachable: connection refused") as info:
        asyncio.run(go())
    assert info.value.transient


def test_a_keyed_write_is_re_sent_with_the_same_idempotency_key_after_a_transient_failure() -> None:
    fake = FakeControlPlane(script={"promoteServiceImageRelease": [
        httpx.Response(503), httpx.Response(502), {"service": SERVICE}]})

    async def go() -> dict[str, Any]:
        async with client(fake) as c:
            return await c.promote("svc-checkout", "rel-1", idempotency_key="key-1",
                                   expected_generation=3, expected_rollout_id="r3")

    written = asyncio.run(go())
    assert written.service == SERVICE and written.replayed is False
    sent = fake.calls("promoteServiceImageRelease")
    assert len(sent) == 3
    assert {e["request"]["idempotencyKey"] for e in sent} == {"key-1"}
    assert len({e["correlation"]["id"] for e in sent}) == 3
    request = sent[0]["request"]
    assert request["expectedRolloutGeneration"] == 3
    assert request["expectedCurrentRolloutId"] == "r3"
    assert request["enableImmutableImage"] is True


def test_a_keyed_write_gives_up_after_the_bound() -> None:
    fake = FakeControlPlane(script={"setServiceEgress": [httpx.Response(503)]})

    async def go() -> None:
        async with client(fake) as c:
            await c.set_egress("svc", [], idempotency_key="k", expected_revision=1)

    with pytest.raises(TransportError):
        asyncio.run(go())
    sent = fake.calls("setServiceEgress")
    assert len(sent) == cp.MAX_TRANSIENT_ATTEMPTS
    assert all(e["request"]["idempotencyKey"] == "k" and e["request"]["egress"] == []
               for e in sent)


def test_a_domain_error_on_a_keyed_write_is_not_retried() -> None:
    fake = FakeControlPlane(script={"rollbackServiceImageRelease": [
        error("ROLLOUT_GENERATION_MISMATCH", expected=3, actual=5)]})

    async def go() -> None:
        async with client(fake) as c:
            await c.rollback("svc", "rel", idempotency_key="k", expected_generation=3,
                             expected_rollout_id="r")

    with pytest.raises(CasMismatch):
        asyncio.run(go())
    assert len(fake.calls("rollbackServiceImageRelease")) == 1


def test_promote_without_an_expected_rollout_id_omits_the_field() -> None:
    fake = FakeControlPlane(script={"promoteServiceImageRelease": [{"service": SERVICE}]})

    async def go() -> None:
        async with client(fake) as c:
            await c.promote("svc", "rel", idempotency_key="k", expected_generation=0,
                            expected_rollout_id=None)

    asyncio.run(go())
    assert "expectedCurrentRolloutId" not in fake.calls("promoteServiceImageRelease")[0]["request"]


def test_the_token_never_appears_in_errors_or_reprs() -> None:
    """Canary: a server echoing the token (and the jwt) back in every failure shape."""
    leaky = f"bad token {CANARY} jwt-1"
    fake = FakeControlPlane(script={
        "a": [error("FORBIDDEN", leaky)],
        "b": [httpx.Response(500, text=leaky)],
        "c": [httpx.Response(400, json={"error": leaky})],
        "d": [{"error": {"text": leaky}}],
    })
    messages: list[str] = []

    async def go() -> None:
        async with client(fake) as c:
            messages.append(repr(c))
            for method in "abcd":
                try:
                    await c.call(method, {})
                except ControlPlaneError as exc:
                    messages.extend([str(exc), repr(exc), exc.message])

    asyncio.run(go())
    assert len(messages) > 4
    for text in messages:
        assert CANARY not in text and "jwt-1" not in text, text


def test_token_from_env_names_the_variable_and_never_a_value() -> None:
    conn = connection(token_env="MY_TOKEN")
    assert token_from_env(conn, {"MY_TOKEN": " t0k "}) == "t0k"
    with pytest.raises(ConfigError, match="MY_TOKEN"):
        token_from_env(conn, {})
    with pytest.raises(ConfigError, match="MY_TOKEN"):
        token_from_env(conn, {"MY_TOKEN": "  "})


def test_the_http_client_ignores_proxies_and_ssl_cert_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:1")
    monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent.pem")
    c = ControlPlaneClient(connection(), token=CANARY)
    try:
        assert c._http.trust_env is False
        assert c._http.follow_redirects is False
        assert c._http._mounts == {}
    finally:
        asyncio.run(c.aclose())


SEED_SERVICE = {
    "id": "svc-checkout",
    "data": {
        "name": "checkout", "immutableImageRequired": True, "egressRevision": 1,
        "egress": [{"host": "api.stripe.com", "port": 443}],
        "imageDeployment": {
            "policy": "immutable-digest", "rolloutId": "r3", "rolloutGeneration": 3,
            "releaseId": "rel-230", "registryHost": "registry.sandbox.test",
            "repository": "shop/checkout", "requestedDigest": "sha256:" + "b" * 64,
            "digestPinnedImageReference": "x", "manifestMediaType": "m", "createdAt": 5,
            "mode": "promotion",
            "targetScope": {"targetClusterIds": ["sn1", "sn2", "sn3"], "targetNodeNames": [],
                            "replicasPerNode": 1, "requiredReplicaCount": 6}},
        "imageRolloutStatus": {
            "rolloutId": "r3", "rolloutGeneration": 3, "expectedDigest": "sha256:" + "b" * 64,
            "status": "succeeded", "requiredReplicaCount": 6, "observedReplicaCount": 6,
            "healthyReplicaCount": 6, "verifiedReplicaCount": 6, "failedReplicaCount": 0,
            "updatedAt": 9, "reporters": []},
    },
}
SEED_RELEASE = {"id": "rel-230", "data": {
    "serviceId": "svc-checkout", "imageId": "i", "registryHost": "registry.sandbox.test",
    "repository": "shop/checkout", "registryRootDigest": "sha256:" + "b" * 64,
    "digestPinnedImageReference": "x",
    "manifestMediaType": "application/vnd.oci.image.index.v1+json",
    "observedTags": ["v2.3.0"], "firstObservedAt": 1, "lastObservedAt": 2,
    "observationCount": 1, "acceptedAt": 3, "lastPromotedAt": 4, "promotionCount": 1}}


def test_parse_service_maps_the_seed_shapes() -> None:
    live = parse_service(SEED_SERVICE, [SEED_RELEASE])
    assert live.service_id == "svc-checkout" and live.name == "checkout"
    assert live.immutable_required
    assert live.deployment is not None and live.deployment.target_cluster_ids == ("sn1", "sn2",
                                                                                    "sn3")
    assert live.deployment.required_replica_count == 6
    assert live.rollout_status is not None and live.rollout_status.status == "succeeded"
    assert live.egress is not None and live.egress[0].host == "api.stripe.com"
    assert live.egress_revision == 1
    assert live.releases[0].accepted_at == 3 and live.releases[0].tags == ("v2.3.0",)


def test_parse_service_without_egress_keeps_none_not_empty() -> None:
    live = parse_service({"id": "s", "data": {"name": "n"}}, [])
    assert live.egress is None and live.deployment is None and live.egress_revision == 0


@pytest.mark.parametrize("broken", [
    {"id": "s"},
    {"id": "s", "data": {"name": 3}},
    {"id": "s", "data": {"name": "n", "imageDeployment": {"rolloutId": "r"}}},
    {"id": "s", "data": {"name": "n", "egress": [{"host": "h", "port": "443"}]}},
])
def test_parse_service_rejects_malformed_replies(broken: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError, match="service s: malformed reply"):
        parse_service(broken, [])


def test_parse_grants_rejects_unknown_capabilities() -> None:
    ok = parse_grants([{"userId": "u", "serviceId": "s",
                        "capabilities": ["deployment:preflight"]}])
    assert ok[0].capabilities[0].value == "deployment:preflight"
    with pytest.raises(ProtocolError):
        parse_grants([{"userId": "u", "serviceId": "s", "capabilities": ["root"]}])


def test_capabilities_are_asked_once_per_client_and_cached() -> None:
    fake = FakeControlPlane(script={"getCapabilities": [
        {"methods": ["getServices", "getServicesReleases"]}]})

    async def go() -> list[frozenset[str]]:
        async with client(fake) as c:
            together = await asyncio.gather(c.capabilities(), c.capabilities())
            return [*together, await c.capabilities()]

    answers = asyncio.run(go())
    assert answers == [frozenset({"getServices", "getServicesReleases"})] * 3
    assert len(fake.calls("getCapabilities")) == 1


def test_an_upstream_without_get_capabilities_has_no_extensions() -> None:
    fake = FakeControlPlane()  # unscripted: "There is no available method ..."

    async def go() -> frozenset[str]:
        async with client(fake) as c:
            assert await c.capabilities() == frozenset()
            return await c.capabilities()

    assert asyncio.run(go()) == frozenset()
    assert len(fake.calls("getCapabilities")) == 1


def test_capabilities_failures_other_than_unknown_method_propagate() -> None:
    fake = FakeControlPlane(script={"getCapabilities": [error("FORBIDDEN", "nope")]})

    async def go() -> None:
        async with client(fake) as c:
            await c.capabilities()

    with pytest.raises(Forbidden):
        asyncio.run(go())
    malformed = FakeControlPlane(script={"getCapabilities": [{"methods": "getServices"}]})

    async def go_malformed() -> None:
        async with client(malformed) as c:
            await c.capabilities()

    with pytest.raises(ProtocolError, match="getCapabilities"):
        asyncio.run(go_malformed())


def test_capabilities_after_a_dead_control_plane_are_an_error_not_an_empty_set() -> None:
    fake = FakeControlPlane(script={"getCapabilities": [httpx.Response(503)]})

    async def go() -> None:
        async with client(fake) as c:
            await c.capabilities()

    with pytest.raises(TransportError):
        asyncio.run(go())
