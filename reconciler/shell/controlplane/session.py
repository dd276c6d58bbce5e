"""One TypedRequest session with the control plane: transport, identity, deadline, retry.

Owns the HTTP client (TLS against the control-plane CA, no redirects, no proxy or
``SSL_CERT_*`` variables: ``trust_env=False``), the identity injected into every
payload (``identity.Identities``, re-exchanged once on ``UNAUTHORIZED``), ``retry``
replies (same envelope, same correlation id, at most ``MAX_RETRY_REPLIES``), and the
bounded re-sending of a call that failed transiently -- for keyed writes always the
*same* payload, so the *same* idempotency key.

The call deadline (``controlPlane.timeoutSeconds``, ``Connection.call_timeout``) is the
total for one call as the caller sees it: the identity exchange, every re-send after a
``retry`` reply or a transient failure, and the back-off pauses between them all spend
the same budget. Each HTTP attempt's own timeout is clipped to what is left of it, and
no back-off starts that could not finish before it.

``Session`` knows methods only by name; ``client.ControlPlaneClient`` adds the typed
methods on top. Must not print, log, or put the token or the jwt into any message
(``errors.Redactor``), and must never turn a failure into an empty answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ssl
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Final, NotRequired, Self, TypedDict, TypeVar

import httpx
from pydantic import BaseModel

from reconciler.core.wireshape import Body
from reconciler.shell import heap
from reconciler.shell.controlplane import envelope
from reconciler.shell.controlplane.errors import (
    ProtocolError,
    Redactor,
    SchemeMismatch,
    TransportError,
    Unauthorized,
    http_status_error,
    mapped_transport_errors,
)
from reconciler.shell.controlplane.identity import Identities
from reconciler.shell.endpoints import Connection, ssl_context

#: ``retry`` replies honoured per call (on top of the first send).
MAX_RETRY_REPLIES: Final = 5
#: A reply's shape, decoded straight from the bytes (``read_as``).
M = TypeVar("M", bound=BaseModel)
#: What one call gives: the response as a JSON object, or as its wire model.
R = TypeVar("R")
#: Attempts for a call that failed transiently (connect error, 5xx, timeout).
MAX_TRANSIENT_ATTEMPTS: Final = 3
#: Pause before re-sending after a transient failure (doubled each time).
TRANSIENT_BACKOFF_SECONDS: Final = 0.2

#: httpcore trace event fired once per TCP connection opened.
CONNECT_EVENT: Final = "connection.connect_tcp.complete"

#: The event-loop time by which the call in progress (in this task) must be answered;
#: None outside a call. Set once by the outermost entry point, shared by everything the
#: call does (identity exchange, re-sends, back-off), so nothing nested extends it.
_CALL_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "reconcile_call_deadline", default=None)


class _Unanswered:
    """The outermost call's record (in this task) of whether one of its own requests went
    out -- headers sent, per httpcore's trace -- and got no answer: then its failure is
    *in doubt* (the control plane may have committed it), not a plain failure."""

    def __init__(self) -> None:
        self.started = False  # the attempt in progress has sent its request headers
        self.in_doubt = False


_UNANSWERED: contextvars.ContextVar[_Unanswered | None] = contextvars.ContextVar(
    "reconcile_unanswered", default=None)
#: httpcore trace events fired when a request's headers start going out (HTTP/1.1, 2).
SEND_EVENTS: Final = frozenset({"http11.send_request_headers.started",
                                "http2.send_request_headers.started"})
#: The identity exchange: its requests never make the caller's write in doubt.
IDENTITY_METHOD: Final = "getIdentityByToken"


class SessionOptions(TypedDict):
    """What a session takes beside its connection; subclasses pass it on unchanged."""

    token: str
    transport: NotRequired[httpx.AsyncBaseTransport | None]
    max_connections: NotRequired[int | None]


class Session:
    """Async TypedRequest session; one per run, used as an async context manager.

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
        self._redact = Redactor()
        self._redact.add(token)
        self._identities = Identities(self._exchange_token)
        self.requests_sent = 0
        self.connections_opened = 0
        #: whether an http:// URL was checked for a server speaking TLS (a test transport
        #: replaces the network: nothing to check)
        self._scheme_checked = transport is not None
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
        return f"{type(self).__name__}(url={self._url!r})"

    async def __aenter__(self) -> Self:
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

    # -- one call -----------------------------------------------------------------------

    async def call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """One TypedRequest call: identity injected, ``retry`` honoured, total deadline.

        Re-exchanges the identity once if the server answers ``UNAUTHORIZED``. Does not
        re-send after a transport failure (``read`` does). The whole of it, identity
        exchange included, runs within one ``call_timeout``.
        """
        return await self._within_deadline(method, lambda: self._call(method, request))

    async def read(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """One read (or idempotent/keyed write) with transient retries, all of it within
        one ``call_timeout``."""
        return await self._within_deadline(
            method, lambda: self._with_transient_retries(lambda: self._call(method, request)))

    async def read_as(self, method: str, request: dict[str, Any], shape: type[M]) -> M:
        """``read``, with the response decoded from the reply's bytes straight into
        ``shape`` (a narrow wire model, ``core.wireshape``): fields it does not name are
        never built. A response that does not fit is a ``ProtocolError`` naming the field."""
        return await self._within_deadline(
            method, lambda: self._with_transient_retries(
                lambda: self._call(method, request, shape)))

    async def _call(self, method: str, request: dict[str, Any],
                    shape: type[M] | None = None) -> Any:
        identity = await self._identities.current()
        try:
            return await self._exchange(method, {**request, "identity": identity}, shape)
        except Unauthorized:
            # The identity may have been revoked or expired early: exchange once more.
            await self._identities.drop(identity)
            identity = await self._identities.current()
            return await self._exchange(method, {**request, "identity": identity}, shape)

    async def _ensure_identity(self) -> dict[str, Any]:
        """The identity the next call sends (exchanged now if there is none yet)."""
        return await self._identities.current()

    # -- the deadline -------------------------------------------------------------------

    async def _within_deadline(self, method: str, run: Callable[[], Awaitable[R]]) -> R:
        """Run ``run`` under the call deadline: a fresh one unless a call is in progress."""
        if _CALL_DEADLINE.get() is not None:
            return await run()  # nested: the outer call's budget applies
        budget = self._conn.call_timeout
        deadline = asyncio.get_running_loop().time() + budget
        token = _CALL_DEADLINE.set(deadline)
        unanswered = _Unanswered()
        marker = _UNANSWERED.set(unanswered)
        try:
            async with asyncio.timeout_at(deadline):
                return await run()
        except TimeoutError as exc:
            raise TransportError(
                f"{method}: no complete answer within the {budget:g}s call deadline "
                "(retries included)", transient=True, in_doubt=unanswered.in_doubt) from exc
        except TransportError as exc:
            if unanswered.in_doubt and not exc.in_doubt:
                # An earlier attempt went out unanswered: whatever the last one said, the
                # control plane may hold the first.
                doubtful = exc.again(exc.message)
                doubtful.in_doubt = True
                raise doubtful from exc
            raise
        finally:
            _UNANSWERED.reset(marker)
            _CALL_DEADLINE.reset(token)

    def _remaining(self) -> float:
        """Seconds left of the current call's deadline (the whole budget outside a call)."""
        deadline = _CALL_DEADLINE.get()
        if deadline is None:
            return self._conn.call_timeout
        return max(0.0, deadline - asyncio.get_running_loop().time())

    # -- the envelope on the wire -------------------------------------------------------

    async def _exchange(self, method: str, payload: dict[str, Any],
                        shape: type[M] | None = None) -> Any:
        """Send one envelope until it gets an answer, within what is left of the deadline
        (``shape``: the answer's response decoded into it, see ``read_as``)."""
        budget = self._conn.call_timeout
        body = envelope.encode(method, payload)
        try:
            async with asyncio.timeout(self._remaining()):
                for _ in range(MAX_RETRY_REPLIES + 1):
                    content = await self._post(method, body)
                    if shape is not None:
                        answer = envelope.answer_as(method, content, shape)
                        if answer is not None:
                            return answer
                    # Not a plain answer (an error, a retry, malformed): read it whole.
                    reply = envelope.decode(method, content, status=200)
                    wait = envelope.wait_of(method, reply, self._redact)
                    if wait is None:
                        response = envelope.response_of(method, reply)
                        if shape is not None:
                            # An answer that did not fit ``shape``: say where (raises).
                            envelope.misfit(method, content, shape)
                        return response
                    await asyncio.sleep(wait)
        except TimeoutError as exc:
            raise TransportError(
                f"{method}: no complete answer within the {budget:g}s call deadline "
                "(retries included)", transient=True) from exc
        raise TransportError(
            f"{method}: the server asked to retry more than {MAX_RETRY_REPLIES} times",
            transient=True)

    async def _post(self, method: str, body: bytes) -> Body:
        """One envelope sent; the reply's bytes (a status other than 200 raises)."""
        self.requests_sent += 1
        # This attempt may use what is left of the call's deadline, never more.
        left = min(self._conn.call_timeout, self._remaining())
        unanswered = _UNANSWERED.get()
        if unanswered is not None:
            unanswered.started = False
        try:
            with mapped_transport_errors(method, self._redact):
                response, content = await self._send(body, left)
        except BaseException as exc:  # a timeout, a dropped connection, the deadline
            if unanswered is not None and unanswered.started and method != IDENTITY_METHOD:
                unanswered.in_doubt = True
                if isinstance(exc, TransportError):
                    exc.in_doubt = True
            if isinstance(exc, TransportError) and not exc.in_doubt \
                    and await self._speaks_tls_over_http(exc):
                raise SchemeMismatch(
                    f"{method}: the server at {self._url_host_port()} speaks TLS (HTTPS), "
                    "but the URL says http://") from exc
            raise
        if response.status_code != 200:
            raise http_status_error(method, response, self._redact)
        return content

    async def _send(self, body: bytes, left: float) -> tuple[httpx.Response, Body]:
        """One POST and its reply's body, read whole. A 200's body is gathered into one
        buffer as it arrives: httpx's own read keeps every piece received until it joins
        them, so a 47 MB ``getServices`` reply was held twice over at that moment -- the
        snapshot's peak (``docs/scaling.md``, round 8)."""
        request = self._http.build_request(
            "POST", self._url, content=body, headers={"Content-Type": "application/json"},
            timeout=httpx.Timeout(left, connect=min(left, 5.0)),
            extensions={"trace": self._trace})
        response = await self._http.send(request, stream=True)
        try:
            if response.status_code != 200:
                return response, await response.aread()
            content = bytearray()
            async for piece in response.aiter_bytes():
                content += piece
            return response, content
        finally:
            await response.aclose()
            heap.release(response)  # no cycle left to keep its body alive (shell.heap)

    def _url_host_port(self) -> str:
        url = httpx.URL(self._url)
        return f"{url.host}:{url.port or 80}"

    async def _speaks_tls_over_http(self, exc: TransportError) -> bool:
        """For a plain ``http://`` URL whose exchange broke off (a read error or a reply
        that is no HTTP): whether the server completes a TLS handshake instead -- then
        the URL's scheme is wrong, and no re-send can help. Asked once per session."""
        url = httpx.URL(self._url)
        if url.scheme != "http" or self._scheme_checked:
            return False
        if not isinstance(exc.__cause__, httpx.ReadError | httpx.RemoteProtocolError
                          | httpx.WriteError):
            return False
        self._scheme_checked = True
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # only "does it speak TLS?": nothing is sent
        try:
            async with asyncio.timeout(min(3.0, max(0.5, self._remaining()))):
                _, writer = await asyncio.open_connection(
                    url.host, url.port or 80, ssl=context,
                    server_hostname=url.host if not url.host[:1].isdigit() else None)
        except (OSError, TimeoutError, ssl.SSLError):
            return False
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
        return True

    async def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's ``trace`` hook: counts TCP connections actually opened."""
        if event == CONNECT_EVENT:
            self.connections_opened += 1
        elif event in SEND_EVENTS:
            unanswered = _UNANSWERED.get()
            if unanswered is not None:
                unanswered.started = True

    # -- identity -----------------------------------------------------------------------

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

    async def _with_transient_retries(self, attempt: Callable[[], Awaitable[R]]) -> R:
        """Re-run ``attempt`` after a transient ``TransportError``, boundedly in count and
        within the current call's deadline (no back-off that would outlive it)."""
        delay = TRANSIENT_BACKOFF_SECONDS
        for number in range(1, MAX_TRANSIENT_ATTEMPTS + 1):
            try:
                return await attempt()
            except TransportError as exc:
                last = number == MAX_TRANSIENT_ATTEMPTS
                out_of_time = exc.transient and not last and self._remaining() <= delay
                if not exc.transient or last or out_of_time:
                    if number == 1 and not out_of_time:
                        raise
                    plural = "s" if number > 1 else ""
                    why = (f"; the {self._conn.call_timeout:g}s call deadline leaves no "
                           "time for another" if out_of_time else "")
                    raise exc.again(
                        f"{exc.message} (after {number} attempt{plural}{why})") from exc
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover
