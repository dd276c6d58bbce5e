"""The TypedRequest envelope (CONTRACT §1, typedrequest 3.x): build one, read a reply.

Owns the request envelope (a fresh ``uni_<24 hex>`` correlation id per envelope) and
the reading of a reply envelope into one of three outcomes: an answer (``response``),
a wait (``retry``, bounded by ``MAX_RETRY_WAIT_SECONDS``), or a raised exception
(``error``, a null body, a null response -- never "empty").

Pure: no I/O; callers (``session``) send and receive the bytes.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Final

from reconciler.shell.controlplane.errors import ProtocolError, Redact, domain_error

#: Ceiling for a server's ``retry.waitForMs`` (the call deadline bounds it too).
MAX_RETRY_WAIT_SECONDS: Final = 10.0


def new_correlation_id() -> str:
    """``uni_`` + 24 lower-case hex characters (the typedrequest 3.x shape)."""
    return "uni_" + secrets.token_hex(12)


def encode(method: str, payload: dict[str, Any]) -> bytes:
    """One request envelope, compact JSON; re-sent unchanged after a ``retry`` reply."""
    envelope = {
        "method": method,
        "request": payload,
        "response": None,
        "correlation": {"id": new_correlation_id(), "phase": "request"},
    }
    return json.dumps(envelope, separators=(",", ":")).encode()


def decode(method: str, content: bytes, *, status: int) -> Any:
    """The reply body as JSON (``ProtocolError`` when it is not JSON)."""
    try:
        return json.loads(content)
    except ValueError as exc:
        raise ProtocolError(f"{method}: the reply is not JSON", status=status) from exc


def wait_of(method: str, reply: Any, redact: Redact) -> float | None:
    """Raise for an error reply; the seconds to wait for a ``retry``; None for an answer."""
    if reply is None:
        raise ProtocolError(f"{method}: the reply body is null (the envelope was not routed)")
    if not isinstance(reply, dict):
        raise ProtocolError(f"{method}: the reply is not a TypedRequest envelope")
    error = reply.get("error")
    if error is not None:
        raise domain_error(method, error, redact)
    retry = reply.get("retry")
    if retry is not None:
        wait_ms = retry.get("waitForMs", 0) if isinstance(retry, dict) else 0
        if not isinstance(wait_ms, int | float) or wait_ms < 0:
            wait_ms = 0
        return min(float(wait_ms) / 1000.0, MAX_RETRY_WAIT_SECONDS)
    return None


def response_of(method: str, reply: dict[str, Any]) -> dict[str, Any]:
    """The ``response`` of an answered envelope; a null one is an upstream failure."""
    response = reply.get("response")
    if response is None:
        raise ProtocolError(
            f"{method}: the reply has neither a response nor an error "
            "(the handler failed upstream)")
    if not isinstance(response, dict):
        raise ProtocolError(f"{method}: the response is not an object")
    return response
