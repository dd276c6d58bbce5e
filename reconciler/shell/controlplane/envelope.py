"""The TypedRequest envelope (CONTRACT §1, typedrequest 3.x): build one, read a reply.

Owns the request envelope (a fresh ``uni_<24 hex>`` correlation id per envelope) and
the reading of a reply envelope into one of three outcomes: an answer (``response``),
a wait (``retry``, bounded by ``MAX_RETRY_WAIT_SECONDS``), or a raised exception
(``error``, a null body, a null response -- never "empty"). ``answer_as`` decodes an
answer's ``response`` from the bytes straight into a wire model (``core.wireshape``);
anything else is read whole by ``decode`` and the functions after it.

Pure: no I/O; callers (``session``) send and receive the bytes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from functools import cache
from typing import Any, Final, TypeVar

from pydantic import BaseModel, JsonValue, ValidationError, create_model

from reconciler.core.wireshape import Body, WireModel, problem
from reconciler.core.wireshape import decode as decode_into
from reconciler.shell.controlplane.errors import ProtocolError, Redact, domain_error

M = TypeVar("M", bound=BaseModel)

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


def decode(method: str, content: Body, *, status: int) -> Any:
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


@cache
def _envelope_of(shape: type[BaseModel]) -> type[WireModel]:
    """The reply envelope whose ``response`` is ``shape`` (one model per shape)."""
    response: Any = shape | None
    return create_model(f"{shape.__name__}Envelope", __base__=WireModel,
                        response=(response, None), error=(JsonValue, None),
                        retry=(JsonValue, None))


def answer_as(method: str, content: Body, shape: type[M]) -> M | None:
    """The ``response`` of a plain answer decoded into ``shape``; None for anything else
    (an error, a retry, a null response, a reply that does not fit): ``decode`` then
    reads it whole and says what it is. A shape with a reader of its own for plain
    answers (``fast_answer``, e.g. ``getServices``'s, which decodes in chunks) is read
    by it first; what it declines is read here as for any other shape."""
    fast = _FAST_ANSWERS.get(shape)
    if fast is not None:
        answer = fast(content)
        if answer is not None:
            return answer  # type: ignore[return-value]  # the shape's own reader
    try:
        reply = decode_into(_envelope_of(shape), content)
    except ValidationError:
        return None
    response = getattr(reply, "response", None)
    if getattr(reply, "error", None) is not None or getattr(reply, "retry", None) is not None:
        return None
    return response if isinstance(response, shape) else None


#: A shape's own reader of plain answers (``answer_as``); registered by the module that
#: owns the shape, so this one knows no shape.
_FAST_ANSWERS: dict[type[BaseModel], Callable[[Body], BaseModel | None]] = {}


def fast_answer(shape: type[M], reader: Callable[[Body], M | None]) -> None:
    """Register ``reader`` as the first reader of ``shape``'s plain answers: it returns
    exactly what ``answer_as`` would have, or None to leave the reply to it."""
    _FAST_ANSWERS[shape] = reader


def misfit(method: str, content: Body, shape: type[BaseModel]) -> None:
    """Raise the ``ProtocolError`` of an answer whose response does not fit ``shape``,
    naming the first field at fault (``getServices: response.services is not a list``)."""
    try:
        decode_into(_envelope_of(shape), content)
    except ValidationError as exc:
        raise ProtocolError(f"{method}: {problem(exc)}") from exc
    raise ProtocolError(f"{method}: the response is not what it should be")
