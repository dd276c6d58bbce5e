"""The control-plane client: TypedRequest over HTTPS, exactly as CONTRACT.md §1 says.

Owns the envelope (a fresh ``uni_<24 hex>`` correlation id per call), the identity
exchange (``getIdentityByToken``, cached, re-exchanged before ``expiresAt`` and once on
``UNAUTHORIZED``), ``retry`` replies (same envelope, same correlation id, bounded count,
bounded by the call's deadline), the mapping of every failure to one exception tree, the
bounded retry of transient failures -- for keyed writes always with the *same*
idempotency key -- and the parsing of wire replies into ``core.live`` models.

The call deadline (``controlPlane.timeoutSeconds``, ``Connection.call_timeout``) is the
total for one call as the caller sees it: the identity exchange, every re-send after a
``retry`` reply or a transient failure, and the back-off pauses between them all spend
the same budget. Each HTTP attempt's own timeout is clipped to what is left of it, and
no back-off starts that could not finish before it.

It must not print, log, or put the machine token (or the identity's jwt) in any string
it produces: every message that leaves this module passes ``_Redactor`` and
``core.sanitize.safe``. It never follows redirects, never reads proxy or
``SSL_CERT_*`` variables (``trust_env=False``) and never turns a failure into an empty
answer.

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

Callers: ``observing`` (reads) and the apply engine (writes), both as
``async with ControlPlaneClient(conn, token=...) as cp:``.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

import httpx
from pydantic import ValidationError

from reconciler.core.live import (
    EgressRule,
    ImageRelease,
    LiveGrant,
    LiveService,
    RolloutPlan,
    RolloutStatus,
)
from reconciler.core.names import Capability
from reconciler.core.sanitize import safe
from reconciler.shell.endpoints import ConfigError, Connection, ssl_context

#: ``retry`` replies honoured per call (on top of the first send).
MAX_RETRY_REPLIES: Final = 5
#: Attempts for a call that failed transiently (connect error, 5xx, timeout).
MAX_TRANSIENT_ATTEMPTS: Final = 3
#: Pause before re-sending after a transient failure (doubled each time).
TRANSIENT_BACKOFF_SECONDS: Final = 0.2
#: Re-exchange the identity this long before its ``expiresAt``.
IDENTITY_SKEW_MS: Final = 30_000
#: Ceiling for a server's ``retry.waitForMs`` (the call deadline bounds it too).
MAX_RETRY_WAIT_SECONDS: Final = 10.0

#: httpcore trace event fired once per TCP connection opened.
CONNECT_EVENT: Final = "connection.connect_tcp.complete"

UNKNOWN_METHOD_TEXT: Final = "There is no available method for this call on the server side"

#: The event-loop time by which the call in progress (in this task) must be answered;
#: None outside a call. Set once by the outermost entry point, shared by everything the
#: call does (identity exchange, re-sends, back-off), so nothing nested extends it.
_CALL_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "reconcile_call_deadline", default=None)


class ControlPlaneError(Exception):
    """Base of every control-plane failure; the message is sanitized and token-free."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TransportError(ControlPlaneError):
    """The exchange itself failed; ``transient`` says whether re-sending may help."""

    def __init__(self, message: str, *, transient: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status


class ProtocolError(TransportError):
    """The server answered, but not with a well-formed TypedRequest reply."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, transient=False, status=status)


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


_CODE_CLASSES: Final[dict[str, type[DomainError]]] = {
    "ROLLOUT_GENERATION_MISMATCH": CasMismatch,
    "ROLLOUT_ID_MISMATCH": CasMismatch,
    "EGRESS_REVISION_MISMATCH": CasMismatch,
    "IDEMPOTENCY_KEY_REUSED": IdempotencyKeyReused,
    "SERVICE_NOT_FOUND": NotFound,
    "RELEASE_NOT_FOUND": NotFound,
    "UNAUTHORIZED": Unauthorized,
    "FORBIDDEN": Forbidden,
    "ROLLBACK_TARGET_NOT_ACCEPTED": RollbackTargetNotAccepted,
    "INVALID_REQUEST": InvalidRequest,
}


def token_from_env(conn: Connection, env: Mapping[str, str]) -> str:
    """The machine token from the variable the settings name; the error names the variable."""
    value = env.get(conn.token_env, "").strip()
    if not value:
        raise ConfigError(
            f"the control-plane token is missing: environment variable {conn.token_env} "
            "is unset or empty (controlPlane.tokenEnv names it); set it to a machine user's "
            'token (for the sandbox: eval "$(reconcile sandbox env)")')
    return value


def new_correlation_id() -> str:
    """``uni_`` + 24 lower-case hex characters (the typedrequest 3.x shape)."""
    return "uni_" + secrets.token_hex(12)


class _Redactor:
    """Removes known secrets from text, then bounds and de-fangs it with ``safe``."""

    def __init__(self) -> None:
        self._secrets: list[str] = []

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= 4 and secret not in self._secrets:
            self._secrets.append(secret)

    def __call__(self, text: object, limit: int = 300) -> str:
        value = str(text)
        for secret in self._secrets:
            value = value.replace(secret, "<redacted>")
        return safe(value, limit)


class ControlPlaneClient:
    """Async TypedRequest client; one per run, used as an async context manager.

    ``transport`` replaces the network (tests pass ``httpx.MockTransport``).
    ``requests_sent`` and ``connections_opened`` count what went over the wire.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        token: str,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int | None = None,
    ) -> None:
        self._conn = conn
        self._url = conn.typedrequest_url
        self._token = token
        self._redact = _Redactor()
        self._redact.add(token)
        self._identity: dict[str, Any] | None = None
        self._identity_lock = asyncio.Lock()
        self._capabilities: frozenset[str] | None = None
        self._capabilities_lock = asyncio.Lock()
        self.requests_sent = 0
        self.connections_opened = 0
        limit = max_connections or max(conn.concurrency, 4)
        #: How many calls a caller should keep in flight (the connection pool's size).
        self.concurrency = limit
        timeout = conn.call_timeout
        self._http = httpx.AsyncClient(
            verify=ssl_context(conn.control_plane_ca) if transport is None else True,
            trust_env=False,
            follow_redirects=False,
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
            headers={"Accept": "application/json"},
        )

    def __repr__(self) -> str:
        # Never the token, never the identity.
        return f"ControlPlaneClient(url={self._url!r})"

    async def __aenter__(self) -> ControlPlaneClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- the envelope -------------------------------------------------------------------

    async def call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """One TypedRequest call: identity injected, ``retry`` honoured, total deadline.

        Re-exchanges the identity once if the server answers ``UNAUTHORIZED``. Does not
        re-send after a transport failure (see the typed methods for that). The whole of
        it, identity exchange included, runs within one ``call_timeout``.
        """
        return await self._within_deadline(method, lambda: self._call(method, request))

    async def _call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        identity = await self._ensure_identity()
        try:
            return await self._exchange(method, {**request, "identity": identity})
        except Unauthorized:
            # The identity may have been revoked or expired early: exchange once more.
            await self._drop_identity(identity)
            identity = await self._ensure_identity()
            return await self._exchange(method, {**request, "identity": identity})

    async def _within_deadline(
        self, method: str, run: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """Run ``run`` under the call deadline: a fresh one unless a call is in progress."""
        if _CALL_DEADLINE.get() is not None:
            return await run()  # nested: the outer call's budget applies
        budget = self._conn.call_timeout
        deadline = asyncio.get_running_loop().time() + budget
        token = _CALL_DEADLINE.set(deadline)
        try:
            async with asyncio.timeout_at(deadline):
                return await run()
        except TimeoutError:
            raise TransportError(
                f"{method}: no complete answer within the {budget:g}s call deadline "
                "(retries included)", transient=True) from None
        finally:
            _CALL_DEADLINE.reset(token)

    def _remaining(self) -> float:
        """Seconds left of the current call's deadline (the whole budget outside a call)."""
        deadline = _CALL_DEADLINE.get()
        if deadline is None:
            return self._conn.call_timeout
        return max(0.0, deadline - asyncio.get_running_loop().time())

    async def _exchange(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Send one envelope until it gets an answer, within what is left of the deadline."""
        budget = self._conn.call_timeout
        envelope = {
            "method": method,
            "request": payload,
            "response": None,
            "correlation": {"id": new_correlation_id(), "phase": "request"},
        }
        body = json.dumps(envelope, separators=(",", ":")).encode()
        try:
            async with asyncio.timeout(self._remaining()):
                for _ in range(MAX_RETRY_REPLIES + 1):
                    reply = await self._post(method, body)
                    wait = self._interpret(method, reply)
                    if wait is None:
                        return self._response_of(method, reply)
                    await asyncio.sleep(wait)
        except TimeoutError:
            raise TransportError(
                f"{method}: no complete answer within the {budget:g}s call deadline "
                "(retries included)", transient=True) from None
        raise TransportError(
            f"{method}: the server asked to retry more than {MAX_RETRY_REPLIES} times",
            transient=True)

    async def _post(self, method: str, body: bytes) -> Any:
        self.requests_sent += 1
        # This attempt may use what is left of the call's deadline, never more.
        left = min(self._conn.call_timeout, self._remaining())
        try:
            response = await self._http.post(
                self._url, content=body,
                headers={"Content-Type": "application/json"},
                timeout=httpx.Timeout(left, connect=min(left, 5.0)),
                extensions={"trace": self._trace})
        except httpx.TimeoutException as exc:
            raise TransportError(f"{method}: timed out ({type(exc).__name__})",
                                 transient=True) from None
        except httpx.TransportError as exc:
            raise TransportError(f"{method}: {describe_transport_error(exc, self._redact)}",
                                 transient=True) from None
        if response.status_code != 200:
            detail = self._redact(response.text, 120) if response.content else ""
            raise TransportError(
                f"{method}: HTTP {response.status_code}" + (f" {detail}" if detail else ""),
                transient=response.status_code >= 500 or response.status_code == 429,
                status=response.status_code)
        try:
            return json.loads(response.content)
        except ValueError:
            raise ProtocolError(f"{method}: the reply is not JSON", status=200) from None

    async def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's ``trace`` hook: counts TCP connections actually opened."""
        if event == CONNECT_EVENT:
            self.connections_opened += 1

    def _interpret(self, method: str, reply: Any) -> float | None:
        """Raise for an error reply; return the wait for a ``retry``; None for an answer."""
        if reply is None:
            raise ProtocolError(
                f"{method}: the reply body is null (the envelope was not routed)")
        if not isinstance(reply, dict):
            raise ProtocolError(f"{method}: the reply is not a TypedRequest envelope")
        error = reply.get("error")
        if error is not None:
            raise self._domain_error(method, error)
        retry = reply.get("retry")
        if retry is not None:
            wait_ms = retry.get("waitForMs", 0) if isinstance(retry, dict) else 0
            if not isinstance(wait_ms, int | float) or wait_ms < 0:
                wait_ms = 0
            return min(float(wait_ms) / 1000.0, MAX_RETRY_WAIT_SECONDS)
        return None

    def _domain_error(self, method: str, error: Any) -> DomainError:
        if not isinstance(error, dict):
            return DomainError(f"{method}: {self._redact(error)}", code="", data={})
        text = self._redact(error.get("text", ""))
        data = error.get("data")
        data = data if isinstance(data, dict) else {}
        code = data.get("code")
        code = code if isinstance(code, str) else ""
        if not code and str(error.get("text", "")).startswith(UNKNOWN_METHOD_TEXT):
            return UnknownMethod(f"{method}: {text}", code="UNKNOWN_METHOD", data=data)
        cls = _CODE_CLASSES.get(code, DomainError)
        label = f"{self._redact(code, 60)}: " if code else ""
        return cls(f"{method}: {label}{text}", code=code, data=data)

    def _response_of(self, method: str, reply: dict[str, Any]) -> dict[str, Any]:
        response = reply.get("response")
        if response is None:
            raise ProtocolError(
                f"{method}: the reply has neither a response nor an error "
                "(the handler failed upstream)")
        if not isinstance(response, dict):
            raise ProtocolError(f"{method}: the response is not an object")
        return response

    # -- identity -----------------------------------------------------------------------

    async def _ensure_identity(self) -> dict[str, Any]:
        async with self._identity_lock:
            if self._identity is None or _expired(self._identity):
                self._identity = await self._exchange_token()
            return self._identity

    async def _drop_identity(self, stale: dict[str, Any]) -> None:
        async with self._identity_lock:
            if self._identity is stale:  # another caller may have re-exchanged already
                self._identity = None

    async def _exchange_token(self) -> dict[str, Any]:
        # No retry here: the typed method around this call retries it as a whole, and
        # nested retries would multiply the attempts (and the time) against a dead server.
        response = await self._exchange("getIdentityByToken", {"token": self._token})
        identity = response.get("identity")
        if not isinstance(identity, dict):
            raise ProtocolError("getIdentityByToken: the response carries no identity")
        jwt = identity.get("jwt")
        self._redact.add(jwt if isinstance(jwt, str) else None)
        return identity

    # -- retries of transient failures ------------------------------------------------

    async def _with_transient_retries(
        self, attempt: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """Re-run ``attempt`` after a transient ``TransportError``, boundedly in count and
        within the current call's deadline (no back-off that would outlive it)."""
        delay = TRANSIENT_BACKOFF_SECONDS
        for number in range(1, MAX_TRANSIENT_ATTEMPTS + 1):
            try:
                result: dict[str, Any] = await attempt()
                return result
            except TransportError as exc:
                last = number == MAX_TRANSIENT_ATTEMPTS
                out_of_time = exc.transient and not last and self._remaining() <= delay
                if not exc.transient or last or out_of_time:
                    if number == 1 and not out_of_time:
                        raise
                    plural = "s" if number > 1 else ""
                    why = (f"; the {self._conn.call_timeout:g}s call deadline leaves no "
                           "time for another" if out_of_time else "")
                    raise type(exc)(f"{exc.message} (after {number} attempt{plural}{why})",
                                    **_transport_kwargs(exc)) from None
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """One read (or idempotent/keyed write) with transient retries, all of it within
        one ``call_timeout``."""
        return await self._within_deadline(
            method, lambda: self._with_transient_retries(lambda: self._call(method, request)))

    # -- typed methods ------------------------------------------------------------------

    async def capabilities(self) -> frozenset[str]:
        """The method names this control plane answers ([ext] ``getCapabilities``).

        Asked once per client and cached (concurrent callers share the one request). The
        real upstream has no such method: its "There is no available method" answer
        means "no extensions" (the empty set), never an error. Any other failure
        propagates as for every read, so a dead control plane is not mistaken for an
        upstream without extensions.
        """
        async with self._capabilities_lock:
            if self._capabilities is None:
                try:
                    response = await self._read("getCapabilities", {})
                except UnknownMethod:
                    self._capabilities = frozenset()
                else:
                    methods = response.get("methods")
                    if not isinstance(methods, list) or not all(
                            isinstance(m, str) for m in methods):
                        raise ProtocolError(
                            "getCapabilities: response.methods is not a list of strings")
                    self._capabilities = frozenset(safe(m, 120) for m in methods)
            return self._capabilities

    async def get_services(self) -> list[dict[str, Any]]:
        response = await self._read("getServices", {})
        return _list_field(response, "services", "getServices")

    async def get_service(self, service_id: str) -> dict[str, Any]:
        response = await self._read("getServiceById", {"serviceId": service_id})
        return _dict_field(response, "service", "getServiceById")

    async def get_releases(self, service_id: str) -> list[dict[str, Any]]:
        response = await self._read("getServiceImageReleases", {"serviceId": service_id})
        return _list_field(response, "releases", "getServiceImageReleases")

    async def get_grants(self) -> list[dict[str, Any]]:
        response = await self._read("getServiceDeploymentGrants", {})
        return _list_field(response, "grants", "getServiceDeploymentGrants")

    async def promote(
        self,
        service_id: str,
        release_id: str,
        *,
        idempotency_key: str,
        expected_generation: int,
        expected_rollout_id: str | None,
    ) -> Written:
        """``promoteServiceImageRelease``; transient failures re-sent with the same key."""
        request: dict[str, Any] = {
            "serviceId": service_id,
            "releaseId": release_id,
            "idempotencyKey": idempotency_key,
            "expectedRolloutGeneration": expected_generation,
            "enableImmutableImage": True,
        }
        if expected_rollout_id is not None:
            request["expectedCurrentRolloutId"] = expected_rollout_id
        response = await self._read("promoteServiceImageRelease", request)
        return _write_result(response, "promoteServiceImageRelease")

    async def rollback(
        self,
        service_id: str,
        release_id: str,
        *,
        idempotency_key: str,
        expected_generation: int,
        expected_rollout_id: str,
    ) -> Written:
        """``rollbackServiceImageRelease``; transient failures re-sent with the same key."""
        request = {
            "serviceId": service_id,
            "releaseId": release_id,
            "idempotencyKey": idempotency_key,
            "expectedCurrentRolloutId": expected_rollout_id,
            "expectedRolloutGeneration": expected_generation,
        }
        response = await self._read("rollbackServiceImageRelease", request)
        return _write_result(response, "rollbackServiceImageRelease")

    async def set_egress(
        self,
        service_id: str,
        egress: list[dict[str, Any]],
        *,
        idempotency_key: str,
        expected_revision: int,
    ) -> Written:
        """``setServiceEgress`` (``[]`` clears); transient failures re-sent with the same key."""
        request = {
            "serviceId": service_id,
            "egress": [{"host": e["host"], "port": e["port"]} for e in egress],
            "idempotencyKey": idempotency_key,
            "expectedEgressRevision": expected_revision,
        }
        response = await self._read("setServiceEgress", request)
        return _write_result(response, "setServiceEgress")

    async def configure_grant(
        self, user_id: str, service_id: str, capabilities: list[str]
    ) -> dict[str, Any]:
        """``configureServiceDeploymentMachineUser``: idempotent, so safe to re-send."""
        request = {"userId": user_id, "serviceId": service_id,
                   "capabilities": list(capabilities)}
        return await self._read("configureServiceDeploymentMachineUser", request)


def _transport_kwargs(exc: TransportError) -> dict[str, Any]:
    if isinstance(exc, ProtocolError):
        return {"status": exc.status}
    return {"transient": exc.transient, "status": exc.status}


def _expired(identity: Mapping[str, Any]) -> bool:
    expires = identity.get("expiresAt")
    if not isinstance(expires, int | float) or isinstance(expires, bool):
        return False  # no expiry given: keep it until the server says UNAUTHORIZED
    return time.time() * 1000 >= float(expires) - IDENTITY_SKEW_MS


def describe_transport_error(exc: httpx.TransportError, redact: Any = safe) -> str:
    """A short, safe phrase for a connect/TLS/protocol failure."""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "certificate" in lowered or "ssl" in lowered or "tls" in lowered:
        return "TLS: " + str(redact(text, 160))
    if "refused" in lowered:
        return "unreachable: connection refused"
    if isinstance(exc, httpx.ConnectError):
        return "unreachable: " + str(redact(text, 160))
    if isinstance(exc, httpx.RemoteProtocolError):
        return "protocol error: " + str(redact(text, 160))
    return str(redact(text, 160))


def _list_field(response: Mapping[str, Any], name: str, method: str) -> list[dict[str, Any]]:
    value = response.get(name)
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ProtocolError(f"{method}: response.{name} is not a list of objects")
    return value


def _dict_field(response: Mapping[str, Any], name: str, method: str) -> dict[str, Any]:
    value = response.get(name)
    if not isinstance(value, dict):
        raise ProtocolError(f"{method}: response.{name} is not an object")
    return value


# -- wire -> core.live ------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """A keyed write's reply: the service as it is now, and whether the control plane
    says it replayed an earlier call with the same key and changed nothing now
    (``idempotentReplay`` [ext]; an upstream without the extension never says so)."""

    service: dict[str, Any]
    replayed: bool


def _write_result(response: Any, method: str) -> Written:
    return Written(service=_dict_field(response, "service", method),
                   replayed=isinstance(response, dict)
                   and response.get("idempotentReplay") is True)


def parse_service(raw: dict[str, Any], releases: list[dict[str, Any]]) -> LiveService:
    """An ``IService`` and its ``IImageRelease[]`` as a validated ``LiveService``.

    Raises ``ProtocolError`` naming the service and the field when the reply is malformed.
    """
    service_id = raw.get("id")
    label = safe(service_id, 80) if isinstance(service_id, str) else "<no id>"
    try:
        data = _obj(raw.get("data"), "data")
        plan = data.get("imageDeployment")
        status = data.get("imageRolloutStatus")
        egress = data.get("egress")
        return LiveService(
            service_id=_text(service_id, "id"),
            name=_text(data.get("name"), "data.name"),
            immutable_required=bool(data.get("immutableImageRequired", False)),
            deployment=None if plan is None else _plan(_obj(plan, "imageDeployment")),
            rollout_status=None if status is None else _status(
                _obj(status, "imageRolloutStatus")),
            egress=None if egress is None else parse_egress(egress),
            egress_revision=_int(data.get("egressRevision", 0), "data.egressRevision"),
            releases=tuple(_release(r) for r in releases),
        )
    except (ValueError, TypeError, KeyError, ValidationError) as exc:
        raise ProtocolError(f"service {label}: malformed reply: {safe(_first_line(exc), 200)}") \
            from None


def parse_grants(raw: list[dict[str, Any]]) -> tuple[LiveGrant, ...]:
    """``getServiceDeploymentGrants`` entries as ``LiveGrant``s (unknown capability: error)."""
    try:
        return tuple(
            LiveGrant(
                user_id=_text(g.get("userId"), "userId"),
                service_id=_text(g.get("serviceId"), "serviceId"),
                capabilities=tuple(Capability(_text(c, "capabilities[]"))
                                   for c in _seq(g.get("capabilities"), "capabilities")),
            )
            for g in raw
        )
    except (ValueError, TypeError, ValidationError) as exc:
        raise ProtocolError(f"grants: malformed reply: {safe(_first_line(exc), 200)}") from None


def parse_egress(raw: Any) -> tuple[EgressRule, ...]:
    """``[{host, port}]`` -> ``EgressRule``s; used for control-plane and cluster replies."""
    rules = []
    for entry in _seq(raw, "egress"):
        item = _obj(entry, "egress[]")
        rules.append(EgressRule(host=_text(item.get("host"), "egress[].host"),
                                port=_int(item.get("port"), "egress[].port")))
    return tuple(rules)


def _plan(raw: dict[str, Any]) -> RolloutPlan:
    scope = raw.get("targetScope") or {}
    scope = _obj(scope, "imageDeployment.targetScope")
    rollback_of = raw.get("rollbackOfRolloutId")
    return RolloutPlan(
        rollout_id=_text(raw.get("rolloutId"), "imageDeployment.rolloutId"),
        rollout_generation=_int(raw.get("rolloutGeneration"), "imageDeployment.rolloutGeneration"),
        release_id=_text(raw.get("releaseId"), "imageDeployment.releaseId"),
        requested_digest=_text(raw.get("requestedDigest"), "imageDeployment.requestedDigest"),
        mode=_text(raw.get("mode"), "imageDeployment.mode"),
        rollback_of_rollout_id=None if rollback_of is None else _text(
            rollback_of, "imageDeployment.rollbackOfRolloutId"),
        target_cluster_ids=tuple(_text(c, "targetScope.targetClusterIds[]")
                                 for c in _seq(scope.get("targetClusterIds", []),
                                               "targetScope.targetClusterIds")),
        required_replica_count=_int(scope.get("requiredReplicaCount", 0),
                                    "targetScope.requiredReplicaCount"),
        created_at=_int(raw.get("createdAt", 0), "imageDeployment.createdAt"),
    )


def _status(raw: dict[str, Any]) -> RolloutStatus:
    reason = raw.get("mismatchReason")
    return RolloutStatus(
        rollout_id=_text(raw.get("rolloutId"), "imageRolloutStatus.rolloutId"),
        rollout_generation=_int(raw.get("rolloutGeneration"),
                                "imageRolloutStatus.rolloutGeneration"),
        expected_digest=_text(raw.get("expectedDigest"), "imageRolloutStatus.expectedDigest"),
        status=_text(raw.get("status"), "imageRolloutStatus.status"),
        mismatch_reason=None if reason is None else _text(reason, "mismatchReason"),
        required=_int(raw.get("requiredReplicaCount", 0), "requiredReplicaCount"),
        observed=_int(raw.get("observedReplicaCount", 0), "observedReplicaCount"),
        healthy=_int(raw.get("healthyReplicaCount", 0), "healthyReplicaCount"),
        verified=_int(raw.get("verifiedReplicaCount", 0), "verifiedReplicaCount"),
        failed=_int(raw.get("failedReplicaCount", 0), "failedReplicaCount"),
    )


def _release(raw: dict[str, Any]) -> ImageRelease:
    data = _obj(raw.get("data"), "release.data")

    def optional_int(name: str) -> int | None:
        value = data.get(name)
        return None if value is None else _int(value, f"release.data.{name}")

    return ImageRelease(
        id=_text(raw.get("id"), "release.id"),
        registry_host=_text(data.get("registryHost"), "release.data.registryHost"),
        repository=_text(data.get("repository"), "release.data.repository"),
        digest=_text(data.get("registryRootDigest"), "release.data.registryRootDigest"),
        media_type=_text(data.get("manifestMediaType"), "release.data.manifestMediaType"),
        tags=tuple(_text(t, "release.data.observedTags[]")
                   for t in _seq(data.get("observedTags", []), "release.data.observedTags")),
        first_observed_at=_int(data.get("firstObservedAt", 0), "release.data.firstObservedAt"),
        accepted_at=optional_int("acceptedAt"),
        last_promoted_at=optional_int("lastPromotedAt"),
        promotion_count=_int(data.get("promotionCount", 0), "release.data.promotionCount"),
    )


def _obj(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{field} is not an object")
    return value


def _seq(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{field} is not a list")
    return value


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{field} is not a string")
    return safe(value, 1000)


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} is not an integer")
    return value


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
