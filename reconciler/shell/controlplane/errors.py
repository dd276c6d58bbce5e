"""Every way a control-plane call fails, as one exception tree, mapped in one place.

Policy (kopf's ``_cogs/clients/errors.py``): our own exception tree; the original
exception chained (``raise ... from exc``) where a library's failure is mapped, so a
debugger sees the cause while the message stays ours; server text and library text
pass ``Redactor`` (the token and the identity's jwt removed, then ``core.sanitize.safe``:
bounded, control characters stripped) before they reach any message.

Exceptions::

    ControlPlaneError                 every message sanitized, never the token
    ├── TransportError                connect / TLS / timeout / deadline / non-200 /
    │   │                             HTTP 400 / retry budget spent; ``.transient``
    │   └── ProtocolError             null body, null response, malformed reply
    └── DomainError                   ``error`` in the reply; ``.code``, ``.data``
        ├── CasMismatch               ROLLOUT_GENERATION_MISMATCH, ROLLOUT_ID_MISMATCH,
        │                             EGRESS_REVISION_MISMATCH; ``.expected``, ``.actual``
        ├── IdempotencyKeyReused      IDEMPOTENCY_KEY_REUSED
        ├── NotFound                  SERVICE_NOT_FOUND, RELEASE_NOT_FOUND
        ├── Unauthorized              UNAUTHORIZED
        ├── Forbidden                 FORBIDDEN
        ├── RollbackTargetNotAccepted ROLLBACK_TARGET_NOT_ACCEPTED
        ├── InvalidRequest            INVALID_REQUEST
        └── UnknownMethod             "There is no available method ..." (no code)

The httpx boundary is ``mapped_transport_errors``: the only place an httpx exception
becomes one of ours (httpx's own ``_transports/default.py`` maps httpcore's the same way).
``describe_transport_error`` is shared with the cluster prober, which words the same
connect/TLS failures for its silent observations.

Must not: do I/O, or put a secret it was told about into any message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, Protocol

import httpx

from reconciler.core.cpcodes import CAS_MISMATCHES, ControlPlaneCode
from reconciler.core.sanitize import REDACTED, register_secret, safe

UNKNOWN_METHOD_TEXT: Final = "There is no available method for this call on the server side"


class ControlPlaneError(Exception):
    """Base of every control-plane failure; the message is sanitized and token-free.

    ``in_doubt``: the request went out (its headers were sent) and no answer came back
    for it -- a timeout, or the connection dropped -- so the control plane may have
    committed it. Only a ``TransportError`` can be in doubt; a refusal was an answer."""

    in_doubt = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TransportError(ControlPlaneError):
    """The exchange itself failed; ``transient`` says whether re-sending may help."""

    def __init__(self, message: str, *, transient: bool, status: int | None = None,
                 in_doubt: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        self.in_doubt = in_doubt
        self.status = status

    def again(self, message: str) -> TransportError:
        """The same failure (same class, same flags) with another message."""
        return TransportError(message, transient=self.transient, status=self.status,
                              in_doubt=self.in_doubt)


class ProtocolError(TransportError):
    """The server answered, but not with a well-formed TypedRequest reply."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, transient=False, status=status)

    def again(self, message: str) -> ProtocolError:
        return ProtocolError(message, status=self.status)


class DomainError(ControlPlaneError):
    """The control plane refused the request (``error`` with ``data.code``)."""

    def __init__(self, message: str, *, code: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class CasMismatch(DomainError):
    """A compare-and-swap precondition did not hold; ``expected``/``actual`` from the server."""

    def __init__(self, message: str, *, code: str, data: dict[str, Any]) -> None:
        super().__init__(message, code=code, data=data)
        self.expected: object = data.get("expected")
        self.actual: object = data.get("actual")


class IdempotencyKeyReused(DomainError):
    """The key was used before with a different payload."""


class NotFound(DomainError):
    """SERVICE_NOT_FOUND or RELEASE_NOT_FOUND."""


class Unauthorized(DomainError):
    """The identity is bad or expired (after one re-exchange)."""


class Forbidden(DomainError):
    """The identity lacks the capability."""


class RollbackTargetNotAccepted(DomainError):
    """A rollback named a release that was never accepted."""


class InvalidRequest(DomainError):
    """The server rejected the payload's shape."""


class UnknownMethod(DomainError):
    """The server has no handler for the method (TypedRequest's own text, no code)."""


#: ``error.data.code`` -> the exception raised for it (anything else: ``DomainError``).
CODE_CLASSES: Final[dict[str, type[DomainError]]] = {
    **dict.fromkeys(CAS_MISMATCHES, CasMismatch),
    ControlPlaneCode.IDEMPOTENCY_KEY_REUSED: IdempotencyKeyReused,
    ControlPlaneCode.SERVICE_NOT_FOUND: NotFound,
    ControlPlaneCode.RELEASE_NOT_FOUND: NotFound,
    ControlPlaneCode.UNAUTHORIZED: Unauthorized,
    ControlPlaneCode.FORBIDDEN: Forbidden,
    ControlPlaneCode.ROLLBACK_TARGET_NOT_ACCEPTED: RollbackTargetNotAccepted,
    ControlPlaneCode.INVALID_REQUEST: InvalidRequest,
}


class Redact(Protocol):
    """Anything that turns untrusted text into a bounded, secret-free string."""

    def __call__(self, text: object, limit: int = 300) -> str: ...


class Redactor:
    """Removes known secrets from text, then bounds and de-fangs it with ``safe``.

    A secret it is told about is registered for the whole run
    (``core.sanitize.register_secret``), so it is redacted from every output, not only
    from this client's error messages: a control plane that echoes the token or the
    session jwt into a rollout status is redacted in the plan, the journal and the logs."""

    def __init__(self) -> None:
        self._secrets: list[str] = []

    def add(self, secret: str | None) -> None:
        register_secret(secret)
        if secret and len(secret) >= 4 and secret not in self._secrets:
            self._secrets.append(secret)

    def __call__(self, text: object, limit: int = 300) -> str:
        value = str(text)
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        return safe(value, limit)


def domain_error(method: str, error: Any, redact: Redact) -> DomainError:
    """The exception for a reply's ``error`` member (CONTRACT §1, §1.3)."""
    if not isinstance(error, dict):
        return DomainError(f"{method}: {redact(error)}", code="", data={})
    text = redact(error.get("text", ""))
    data = error.get("data")
    data = data if isinstance(data, dict) else {}
    code = data.get("code")
    code = code if isinstance(code, str) else ""
    if not code and str(error.get("text", "")).startswith(UNKNOWN_METHOD_TEXT):
        return UnknownMethod(f"{method}: {text}", code=ControlPlaneCode.UNKNOWN_METHOD,
                             data=data)
    cls = CODE_CLASSES.get(code, DomainError)
    label = f"{redact(code, 60)}: " if code else ""
    return cls(f"{method}: {label}{text}", code=code, data=data)


def describe_transport_error(exc: httpx.TransportError, redact: Redact = safe) -> str:
    """A short, safe phrase for a connect/TLS/protocol failure."""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "certificate" in lowered or "ssl" in lowered or "tls" in lowered:
        return "TLS: " + redact(text, 160)
    if "refused" in lowered:
        return "unreachable: connection refused"
    if isinstance(exc, httpx.ConnectError):
        return "unreachable: " + redact(text, 160)
    if isinstance(exc, httpx.RemoteProtocolError):
        return "protocol error: " + redact(text, 160)
    return redact(text, 160)


@contextmanager
def mapped_transport_errors(method: str, redact: Redact) -> Iterator[None]:
    """httpx's failures inside the block become ``TransportError``s (all transient: a
    re-send may reach a server that was briefly away), the original chained."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise TransportError(f"{method}: timed out ({type(exc).__name__})",
                             transient=True) from exc
    except httpx.TransportError as exc:
        raise TransportError(f"{method}: {describe_transport_error(exc, redact)}",
                             transient=True) from exc


def http_status_error(method: str, response: httpx.Response, redact: Redact) -> TransportError:
    """A non-200 reply: transient for 5xx and 429 (a re-send may succeed), else not."""
    detail = redact(response.text, 120) if response.content else ""
    return TransportError(
        f"{method}: HTTP {response.status_code}" + (f" {detail}" if detail else ""),
        transient=response.status_code >= 500 or response.status_code == 429,
        status=response.status_code)
