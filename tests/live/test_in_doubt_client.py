"""The client says when a write is *in doubt*: its request went out and no answer came.

httpcore's trace says when a request's headers start going out; a failure after that (a
read timeout, a dropped connection, the call deadline) may have been committed by the
control plane, so it is ``in_doubt``. A failure before it (connection refused), or any
answer at all (a 503, a refusal), is not.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from reconciler.shell.controlplane import ControlPlaneClient, ControlPlaneError
from tests.live.fakes import FakeControlPlane, connection


class _Writes(httpx.AsyncBaseTransport):
    """Answers the identity exchange; every write fails with ``exc``, after its request
    went out when ``sent`` (the trace event httpcore fires) or before it otherwise."""

    def __init__(self, exc: Exception | None, *, sent: bool, status: int = 200) -> None:
        self.exc, self.sent, self.status = exc, sent, status
        self.fake = FakeControlPlane()
        self.writes = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        envelope = json.loads(body)
        if envelope["method"] == "getIdentityByToken":
            return self.fake.handle(request)
        self.writes += 1
        trace = request.extensions.get("trace")
        if self.sent and trace is not None:
            await trace("http11.send_request_headers.started", {})
        if self.exc is not None:
            raise self.exc
        return httpx.Response(self.status, json={"error": "Service Unavailable"})


async def _promote(transport: _Writes) -> ControlPlaneError:
    client = ControlPlaneClient(connection(call_timeout=1.0), token="tok-abcdef",
                                transport=transport)
    try:
        with pytest.raises(ControlPlaneError) as info:
            await client.promote("svc-a", "rel-1", idempotency_key="k-1",
                                 expected_generation=1, expected_rollout_id="r-1")
    finally:
        await client.aclose()
    return info.value


@pytest.mark.parametrize("exc", [httpx.ReadTimeout("read timed out"),
                                 httpx.RemoteProtocolError("Server disconnected")])
def test_a_write_sent_and_unanswered_is_in_doubt(exc: Exception) -> None:
    transport = _Writes(exc, sent=True)
    error = asyncio.run(_promote(transport))
    assert error.in_doubt, error
    assert transport.writes >= 1


def test_a_write_that_never_left_is_not_in_doubt() -> None:
    error = asyncio.run(_promote(_Writes(httpx.ConnectError("connection refused"),
                                         sent=False)))
    assert not error.in_doubt, error


def test_an_answered_write_is_not_in_doubt_even_a_503() -> None:
    error = asyncio.run(_promote(_Writes(None, sent=True, status=503)))
    assert not error.in_doubt and "503" in str(error), error


def test_one_unanswered_attempt_makes_the_whole_call_in_doubt() -> None:
    """Retried with the same key: the first attempt may have landed, whatever the last
    one said."""
    transport = _Writes(httpx.ReadTimeout("read timed out"), sent=True)
    attempts: list[Exception | None] = [httpx.ReadTimeout("t"), httpx.ConnectError("refused")]
    original = transport.handle_async_request

    async def handle(request: httpx.Request) -> httpx.Response:
        if json.loads(await request.aread())["method"] != "getIdentityByToken" and attempts:
            transport.exc = attempts.pop(0)
            transport.sent = isinstance(transport.exc, httpx.ReadTimeout)
        return await original(request)

    transport.handle_async_request = handle  # type: ignore[method-assign]
    error = asyncio.run(_promote(transport))
    assert error.in_doubt, error
    assert transport.writes == 3 and "refused" in str(error)  # the last attempt's words
