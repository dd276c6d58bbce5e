"""One request to one cluster address, bounded, with its failure mapped to a reason.

Owns the per-address connections (one keep-alive pool per address: a single pool shared
by every address, full of idle connections to the others, would close one and open
another for almost every request), TLS SNI and ``Host`` pinned to the gateway name, the
bound on requests in flight (``conn.concurrency``), the time bound of each exchange
(httpx's timeouts *and* an ``asyncio.timeout`` around the whole exchange, so a server
trickling one byte at a time is cut off), and the per-pass failure streak: an address
that failed ``max_failures`` requests in a row is not dialled again in that pass (a
black-holed cluster costs one timeout, not one per app).

The httpx boundary: every transport failure becomes ``Silent`` (the original chained),
whose ``reason`` is what the silent observation says. Must not write to a cluster beyond
what its caller sends (auth handshakes and GETs) and must not print.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import Mapping
from typing import Any, Final

import httpx

from reconciler.shell import heap
from reconciler.shell.controlplane import CONNECT_EVENT, describe_transport_error
from reconciler.shell.endpoints import Connection, ssl_context

#: An address that fails this many requests in a row is not dialled again this pass.
DEFAULT_MAX_FAILURES: Final = 3


class Silent(Exception):
    """A per-cluster failure: becomes a silent observation with ``reason``."""

    def __init__(self, reason: str, *, transport: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transport = transport


class Dialer:
    """Requests to the mesh's addresses; one per prober (its pools outlive a pass).

    ``transport`` replaces the network (tests). ``requests_sent`` and
    ``connections_opened`` count what went over the wire.
    """

    def __init__(self, conn: Connection, *, transport: httpx.AsyncBaseTransport | None = None,
                 max_failures: int = DEFAULT_MAX_FAILURES) -> None:
        self._conn = conn
        self._max_failures = max_failures
        limit = conn.concurrency
        # The gateway name alone, never ``:port``. The virtual host is the gateway's
        # public name; the mesh port is only where each cluster's ingress is dialled
        # directly (behind the round robin it is usually 443). RFC 9110 would put a
        # non-default port in Host, but ingresses route by the name, and a strict one
        # answers 421 to a ``name:port`` it does not serve. SNI carries the name too.
        host_header = conn.gateway
        self._ssl = ssl_context(conn.mesh_ca) if transport is None else None
        self._transport = transport
        self._client_options: dict[str, Any] = {
            "trust_env": False,
            "follow_redirects": False,
            "timeout": httpx.Timeout(conn.probe_timeout),
            "limits": httpx.Limits(max_connections=limit, max_keepalive_connections=limit,
                                   keepalive_expiry=30.0),
            "headers": {"Host": host_header, "Accept": "application/json"},
        }
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._semaphore = asyncio.Semaphore(limit)
        self._failures: dict[str, tuple[int, str]] = {}
        self.requests_sent = 0
        self.connections_opened = 0

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    def new_pass(self) -> None:
        """Forget the failure streaks: a new pass dials every address again."""
        self._failures.clear()

    def _client(self, address: str) -> httpx.AsyncClient:
        client = self._clients.get(address)
        if client is None:
            client = httpx.AsyncClient(
                verify=self._ssl if self._ssl is not None else True,
                transport=self._transport, **self._client_options)
            self._clients[address] = client
        return client

    async def request(
        self,
        address: str,
        method: str,
        path: str,
        *,
        bearer: str | None = None,
        payload: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """One exchange with one address, bounded in time; transport failures -> Silent."""
        sent: dict[str, str] = dict(headers or {})
        if bearer is not None:
            sent["Authorization"] = f"Bearer {bearer}"
        content = None
        if payload is not None:
            sent["Content-Type"] = "application/json"
            content = json.dumps(payload, separators=(",", ":")).encode()
        timeout = self._conn.probe_timeout
        async with self._semaphore:
            # Checked after the wait for a slot: the requests queued behind the ones that
            # failed must see the failures, or a dark address costs one timeout per app.
            failures, last = self._failures.get(address, (0, ""))
            if failures >= self._max_failures:
                raise Silent(f"not attempted: {address} failed {failures} requests in a row "
                             f"(last: {last})", transport=True)
            self.requests_sent += 1
            try:
                async with asyncio.timeout(timeout):
                    response = await self._client(address).request(
                        method, origin(address, self._conn.mesh_port) + path,
                        content=content, headers=sent,
                        extensions={"sni_hostname": self._conn.gateway, "trace": self._trace})
            except (TimeoutError, httpx.TimeoutException) as exc:
                failure: Silent = Silent(f"timed out after {timeout:g}s", transport=True)
                cause: BaseException = exc
            except httpx.TransportError as exc:
                failure, cause = Silent(describe_transport_error(exc), transport=True), exc
            else:
                self._failures.pop(address, None)
                # Read whole (not streamed): no cycle left to keep it alive (shell.heap).
                return heap.release(response)
        count, _ = self._failures.get(address, (0, ""))
        self._failures[address] = (count + 1, failure.reason)
        raise failure from cause

    async def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event == CONNECT_EVENT:
            self.connections_opened += 1


def now_ms() -> int:
    """The wall clock in ms since the epoch: when a reply (an observation) arrived."""
    return int(time.time() * 1000)


def origin(address: str, port: int) -> str:
    """``https://address:port``, an IPv6 address in brackets."""
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"https://{host}:{port}"
