"""The cluster prober: ask every cluster behind the gateway, one at a time, what it runs.

Owns the mesh side of CONTRACT.md §2 (seed 000, rebuilt): resolve the gateway **once per
run** (the system resolver, or static addresses from ``--resolve``/settings); dial each
address with TLS SNI and ``Host`` pinned to the gateway and verified against the mesh CA;
name each address via its health route; authenticate per address (challenge/verify with
the Ed25519 signer, token cached per address, a *reused* token that gets 401 re-minted
once, a *fresh* one that gets 401 an error); read each app's status; and turn every
outcome into an ``Observation`` -- answered, no record (404), or silent with a reason.

Evidence rules it enforces (CONTRACT §3): an expected cluster no address named is silent;
a cluster named by two addresses is silent (the answers cannot be attributed); an
address whose health route failed is reported by address, silent; an empty DNS answer
is a ``resolve_error``, never "one cluster". Every server string goes through
``core.sanitize.safe`` before it is stored.

Bounds: at most ``conn.concurrency`` requests in flight; each request has httpx's
connect/read timeouts *and* an ``asyncio.timeout`` around the whole exchange (a server
trickling one byte at a time is cut off); each pass has a total deadline after which
whatever has not answered is silent; an address that fails ``max_failures`` requests in
a row is not dialled again in that pass (a black-holed cluster costs one timeout, not
one per app). Connections are kept alive and reused per address.

It must not raise for a per-cluster problem (those are observations), must not print,
and must not write anything to a cluster: it issues auth handshakes and GETs only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import httpx
from cryptography.hazmat.primitives import serialization
from pydantic import ValidationError

from reconciler.core.live import (
    ClusterRuntime,
    Endpoint,
    MeshView,
    Observation,
    ObservationKind,
    ReplicaCounts,
)
from reconciler.core.sanitize import safe
from reconciler.shell.controlplane import CONNECT_EVENT, describe_transport_error, parse_egress
from reconciler.shell.endpoints import Connection, ssl_context
from reconciler.shell.keys import load_signer_key
from reconciler.shell.progress import NullProgress, Progress

HEALTH_PATH: Final = "/api/v3/cluster/health"
CHALLENGE_PATH: Final = "/host/api/v3/baas/auth/challenge"
VERIFY_PATH: Final = "/host/api/v3/baas/auth/verify"
STATUS_PATH: Final = "/host/api/v3/baas/deployment/apps/{app_id}/status"

#: An address that fails this many requests in a row is not dialled again this pass.
DEFAULT_MAX_FAILURES: Final = 3

#: Resolver seam: ``(host, port) -> addresses``.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """The gateway's IPv4 addresses (A records) from the system resolver, in answer order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _Silent(Exception):
    """A per-cluster failure: becomes a silent observation with ``reason``."""

    def __init__(self, reason: str, *, transport: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transport = transport


class Prober:
    """Probes every cluster of the mesh; one per run (the DNS answer is fixed for it).

    ``transport`` and ``resolver`` are seams for tests. ``deadline`` bounds one
    ``observe_apps`` pass (default ``max(60, 10 × probe_timeout)`` seconds).
    ``requests_sent`` and ``connections_opened`` count what went over the wire.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        signer_key: bytes | Path,
        transport: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
        deadline: float | None = None,
        max_failures: int = DEFAULT_MAX_FAILURES,
    ) -> None:
        self._conn = conn
        self._key = load_signer_key(signer_key)
        self._public_hex = self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
        self._resolver = resolver or system_resolver
        self.deadline = deadline if deadline is not None else max(60.0, 10 * conn.probe_timeout)
        self._max_failures = max_failures
        # The gateway name alone, never ``:port``. The virtual host is the gateway's
        # public name; the mesh port is only where each cluster's ingress is dialled
        # directly (behind the round robin it is usually 443). RFC 9110 would put a
        # non-default port in Host, but ingresses route by the name, and a strict one
        # answers 421 to a ``name:port`` it does not serve. SNI carries the name too.
        host_header = conn.gateway
        limit = conn.concurrency
        # One connection pool per address (created on first use): a single pool shared
        # by every address, full of idle connections to the others, would close one and
        # open another for almost every request. The semaphore bounds what is in flight.
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
        self._mesh: MeshView | None = None
        self._mesh_lock = asyncio.Lock()
        self._tokens: dict[str, str] = {}
        self._mint_locks: dict[str, asyncio.Lock] = {}
        # Per pass: addresses whose handshake failed, and consecutive transport failures.
        self._auth_failed: dict[str, str] = {}
        self._failures: dict[str, tuple[int, str]] = {}
        self.requests_sent = 0
        self.connections_opened = 0

    def __repr__(self) -> str:
        return f"Prober(gateway={self._conn.gateway!r}, port={self._conn.mesh_port})"

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    def _client(self, address: str) -> httpx.AsyncClient:
        client = self._clients.get(address)
        if client is None:
            client = httpx.AsyncClient(
                verify=self._ssl if self._ssl is not None else True,
                transport=self._transport, **self._client_options)
            self._clients[address] = client
        return client

    async def __aenter__(self) -> Prober:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- the mesh -----------------------------------------------------------------------

    def forget_mesh(self) -> None:
        """Start a new pass: the next ``resolve`` asks DNS and every address's health
        again. (Within one pass -- one plan, one apply and its gate -- the mesh is asked
        once and the expected clusters only grow.)"""
        self._mesh = None

    async def resolve(self) -> MeshView:
        """Resolve the gateway and name each address; cached for the prober's life."""
        async with self._mesh_lock:
            if self._mesh is None:
                self._mesh = await self._resolve()
            return self._mesh

    async def _resolve(self) -> MeshView:
        conn = self._conn
        if conn.static_addresses is not None:
            addresses: Sequence[str] = conn.static_addresses
        else:
            try:
                async with asyncio.timeout(conn.probe_timeout):
                    addresses = await self._resolver(conn.gateway, conn.mesh_port)
            except TimeoutError:
                return self._unresolved(f"DNS: timed out after {conn.probe_timeout:g}s")
            except OSError as exc:
                return self._unresolved(f"DNS: {safe(exc, 160)}")
        addresses = list(dict.fromkeys(addresses))
        if not addresses:
            return self._unresolved(f"DNS: {conn.gateway} answered no address")
        endpoints = await asyncio.gather(*(self._health(a) for a in addresses))
        named = [e.cluster_id for e in endpoints if e.cluster_id is not None]
        duplicates = sorted({c for c in named if named.count(c) > 1})
        return MeshView(
            gateway=conn.gateway,
            settings_clusters=conn.settings_clusters,
            resolved=tuple(endpoints),
            expected_clusters=tuple(dict.fromkeys([*conn.settings_clusters, *named])),
            duplicate_claims=tuple(duplicates),
            unnamed_addresses=tuple(e.address for e in endpoints if e.cluster_id is None),
        )

    def _unresolved(self, error: str) -> MeshView:
        """A total evidence gap: every expected cluster will be silent."""
        return MeshView(gateway=self._conn.gateway, settings_clusters=self._conn.settings_clusters,
                        resolve_error=error, expected_clusters=self._conn.settings_clusters)

    async def _health(self, address: str) -> Endpoint:
        try:
            response = await self._request(address, "GET", HEALTH_PATH)
        except _Silent as exc:
            return Endpoint(address=address, error=f"health: {exc.reason}")
        if response.status_code != 200:
            return Endpoint(address=address, error=f"health: HTTP {response.status_code}")
        body = _json(response)
        if not isinstance(body, dict):
            return Endpoint(address=address, error="health: malformed JSON")
        cluster_id = body.get("clusterId")
        if not isinstance(cluster_id, str) or not cluster_id.strip():
            return Endpoint(address=address, error="health: the reply names no clusterId")
        return Endpoint(address=address, cluster_id=safe(cluster_id.strip(), 100))

    # -- one pass -----------------------------------------------------------------------

    async def observe_apps(
        self,
        app_ids: Iterable[str],
        *,
        extra_expected: Iterable[str] = (),
        progress: Progress | None = None,
    ) -> dict[str, tuple[Observation, ...]]:
        """One observation per expected cluster (and per unnamed address) for every app.

        Expected clusters = settings ∪ named by DNS ∪ ``extra_expected``. Never raises for
        a cluster's failure; a cluster that has not answered when the pass deadline
        passes is silent with that reason.
        """
        started = time.monotonic()
        progress = progress or NullProgress()
        mesh = await self.resolve()
        apps = list(dict.fromkeys(app_ids))
        self._auth_failed.clear()
        self._failures.clear()

        rows = self.plan_rows(mesh, extra_expected)
        probe_rows = [(cluster, address) for cluster, address, reason in rows
                      if reason is None and address is not None]
        progress.add(len(apps) * len(probe_rows))

        results: dict[tuple[str, str], Observation] = {}

        async def probe(app_id: str, cluster: str, address: str) -> None:
            results[(app_id, cluster)] = await self._observe(app_id, cluster, address)
            progress.advance()

        tasks = [asyncio.create_task(probe(app, cluster, address))
                 for app in apps for cluster, address in probe_rows]
        remaining = max(0.0, self.deadline - (time.monotonic() - started))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=remaining)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

        late = f"the probe deadline of {self.deadline:g}s passed before this cluster answered"
        observations: dict[str, tuple[Observation, ...]] = {}
        for app in apps:
            row: list[Observation] = []
            for cluster, address, reason in rows:
                if reason is not None:
                    row.append(Observation(cluster_id=cluster, address=address,
                                           kind=ObservationKind.SILENT, reason=reason))
                else:
                    row.append(results.get((app, cluster)) or Observation(
                        cluster_id=cluster, address=address, kind=ObservationKind.SILENT,
                        reason=late))
            observations[app] = tuple(row)
        return observations

    @staticmethod
    def plan_rows(
        mesh: MeshView, extra_expected: Iterable[str] = ()
    ) -> list[tuple[str, str | None, str | None]]:
        """``(cluster or address, address, silent reason)`` per row; no reason = probe it.

        Pure: which clusters are expected and which can be attributed follows from the
        mesh view alone, so callers adding rollout targets later get the same rows.
        """
        expected = list(dict.fromkeys([*mesh.expected_clusters, *extra_expected]))
        claims: dict[str, list[str]] = {}
        for endpoint in mesh.resolved:
            if endpoint.cluster_id is not None:
                claims.setdefault(endpoint.cluster_id, []).append(endpoint.address)
        unnamed = [e for e in mesh.resolved if e.cluster_id is None]
        rows: list[tuple[str, str | None, str | None]] = []
        for cluster in expected:
            addresses = claims.get(cluster, [])
            if len(addresses) == 1:
                rows.append((cluster, addresses[0], None))
            elif len(addresses) > 1:
                rows.append((cluster, addresses[1],
                             f"address {addresses[1]} answered as {cluster} (claimed twice, "
                             f"also by {', '.join(a for a in addresses if a != addresses[1])});"
                             " its answers cannot be attributed"))
            elif mesh.resolve_error is not None:
                rows.append((cluster, None, f"not resolved by DNS ({mesh.resolve_error})"))
            elif unnamed:
                detail = "; ".join(f"{e.address}: {e.error}" for e in unnamed)
                rows.append((cluster, None,
                             f"no resolved address answered as this cluster ({detail})"))
            else:
                rows.append((cluster, None, "not resolved by DNS (no address answered as it)"))
        for endpoint in unnamed:
            rows.append((endpoint.address, endpoint.address,
                         f"{endpoint.error}; this address's answers cannot be attributed "
                         "to a cluster"))
        if not rows and mesh.resolve_error is not None:
            # No cluster is known at all: one row for the gateway itself, so that "every
            # row answered" can never be vacuously true (seed 000, #2887).
            rows.append((mesh.gateway, None,
                         f"not resolved by DNS ({mesh.resolve_error}); no cluster can be probed"))
        return rows

    async def _observe(self, app_id: str, cluster: str, address: str) -> Observation:
        try:
            kind, runtime = await self._status(app_id, address)
        except _Silent as exc:
            return Observation(cluster_id=cluster, address=address,
                               kind=ObservationKind.SILENT, reason=exc.reason)
        return Observation(cluster_id=cluster, address=address, kind=kind, runtime=runtime)

    async def _status(self, app_id: str, address: str) -> tuple[ObservationKind,
                                                                   ClusterRuntime | None]:
        path = STATUS_PATH.format(app_id=quote(app_id, safe=""))
        token, reused = await self._token(address)
        response = await self._request(address, "GET", path, bearer=token)
        if response.status_code == 401 and reused:
            # A cached bearer can outlive its session: re-mint once (seed 000).
            token = await self._remint(address, token)
            response = await self._request(address, "GET", path, bearer=token)
        if response.status_code == 401:
            raise _Silent("auth: status read HTTP 401 with a freshly minted token")
        if response.status_code == 404:
            return ObservationKind.NO_RECORD, None
        if response.status_code != 200:
            raise _Silent(f"status read HTTP {response.status_code}")
        body = _json(response)
        if not isinstance(body, dict):
            raise _Silent("malformed JSON")
        answered_for = body.get("appId")
        if answered_for is not None and answered_for != app_id:
            raise _Silent(f"answered for another app ({safe(answered_for, 80)})")
        try:
            return ObservationKind.ANSWERED, parse_runtime(body)
        except (TypeError, ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise _Silent(f"malformed status: {safe(first, 160)}") from None

    # -- per-address auth ---------------------------------------------------------------

    async def _token(self, address: str) -> tuple[str, bool]:
        """The address's bearer and whether it was reused from an earlier request."""
        cached = self._tokens.get(address)
        if cached is not None:
            return cached, True
        async with self._mint_locks.setdefault(address, asyncio.Lock()):
            cached = self._tokens.get(address)
            if cached is not None:
                return cached, False  # minted a moment ago by a concurrent request
            if address in self._auth_failed:
                raise _Silent(self._auth_failed[address])
            try:
                token = await self._mint(address)
            except _Silent as exc:
                reason = exc.reason if exc.reason.startswith("auth: ") else f"auth: {exc.reason}"
                self._auth_failed[address] = reason
                raise _Silent(reason) from None
            self._tokens[address] = token
            return token, False

    async def _remint(self, address: str, stale: str) -> str:
        async with self._mint_locks.setdefault(address, asyncio.Lock()):
            current = self._tokens.get(address)
            if current is not None and current != stale:
                return current  # another request re-minted already
            self._tokens.pop(address, None)
            try:
                token = await self._mint(address)
            except _Silent as exc:
                reason = exc.reason if exc.reason.startswith("auth: ") else f"auth: {exc.reason}"
                raise _Silent(reason) from None
            self._tokens[address] = token
            return token

    async def _mint(self, address: str) -> str:
        """The challenge/verify handshake against ONE address (CONTRACT §2 step 2)."""
        conn = self._conn
        response = await self._request(address, "POST", CHALLENGE_PATH, payload={
            "chain": "ed25519", "walletAddress": conn.wallet_address, "appId": conn.auth_app_id})
        challenge = _json(response)
        if response.status_code >= 400:
            raise _Silent(f"auth: challenge HTTP {response.status_code}")
        if not (isinstance(challenge, dict) and isinstance(challenge.get("challengeId"), str)
                and isinstance(challenge.get("message"), str)):
            raise _Silent("auth: malformed challenge reply")
        signature = self._key.sign(challenge["message"].encode("utf-8")).hex()
        response = await self._request(address, "POST", VERIFY_PATH, payload={
            "challengeId": challenge["challengeId"], "signature": signature,
            "publicKey": self._public_hex})
        verified = _json(response)
        if response.status_code >= 400:
            raise _Silent(f"auth: verify HTTP {response.status_code}")
        if not (isinstance(verified, dict) and isinstance(verified.get("token"), str)
                and verified["token"]):
            raise _Silent("auth: malformed verify reply")
        token: str = verified["token"]
        return token

    # -- the wire -----------------------------------------------------------------------

    async def _request(
        self,
        address: str,
        method: str,
        path: str,
        *,
        bearer: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """One exchange with one address, bounded in time; transport failures -> _Silent."""
        headers: dict[str, str] = {}
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
        content = None
        if payload is not None:
            headers["Content-Type"] = "application/json"
            content = json.dumps(payload, separators=(",", ":")).encode()
        timeout = self._conn.probe_timeout
        async with self._semaphore:
            # Checked after the wait for a slot: the requests queued behind the ones that
            # failed must see the failures, or a dark address costs one timeout per app.
            failures, last = self._failures.get(address, (0, ""))
            if failures >= self._max_failures:
                raise _Silent(f"not attempted: {address} failed {failures} requests in a row "
                              f"(last: {last})", transport=True)
            self.requests_sent += 1
            try:
                async with asyncio.timeout(timeout):
                    response = await self._client(address).request(
                        method, _origin(address, self._conn.mesh_port) + path,
                        content=content, headers=headers,
                        extensions={"sni_hostname": self._conn.gateway, "trace": self._trace})
            except (TimeoutError, httpx.TimeoutException):
                reason = f"timed out after {timeout:g}s"
            except httpx.TransportError as exc:
                reason = describe_transport_error(exc)
            else:
                self._failures.pop(address, None)
                return response
        count, _ = self._failures.get(address, (0, ""))
        self._failures[address] = (count + 1, reason)
        raise _Silent(reason, transport=True)

    async def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event == CONNECT_EVENT:
            self.connections_opened += 1


def _origin(address: str, port: int) -> str:
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"https://{host}:{port}"


def _json(response: httpx.Response) -> Any:
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def parse_runtime(body: Mapping[str, Any]) -> ClusterRuntime:
    """A cluster's status reply as a sanitized ``ClusterRuntime`` (CONTRACT §2 step 3).

    ``resolvedDigest`` is taken only as sent: a runtime without it has not proven what
    it runs, so it is never inferred from the image reference.
    """
    runtime = body.get("runtime")
    if runtime is None:
        runtime = {}
    if not isinstance(runtime, dict):
        raise TypeError("runtime is not an object")
    counts = runtime.get("replicaCounts")
    egress = runtime.get("egress")
    dropped = runtime.get("egressDropped")
    return ClusterRuntime(
        state=_opt_text(body.get("state"), "state"),
        image=_opt_text(runtime.get("image"), "runtime.image"),
        runtime_state=_opt_text(runtime.get("runtimeState"), "runtime.runtimeState"),
        replicas=_opt_int(runtime.get("replicas"), "runtime.replicas"),
        last_error=_opt_text(runtime.get("lastError"), "runtime.lastError"),
        resolved_digest=_opt_text(runtime.get("resolvedDigest"), "runtime.resolvedDigest"),
        rollout_id=_opt_text(runtime.get("rolloutId"), "runtime.rolloutId"),
        rollout_generation=_opt_int(runtime.get("rolloutGeneration"),
                                    "runtime.rolloutGeneration"),
        replica_counts=None if counts is None else _counts(counts),
        egress=None if egress is None else parse_egress(egress),
        egress_dropped=() if dropped is None else parse_egress(dropped),
    )


def _counts(raw: Any) -> ReplicaCounts:
    if not isinstance(raw, dict):
        raise TypeError("runtime.replicaCounts is not an object")
    values = {}
    for name in ("required", "observed", "healthy", "verified", "failed"):
        value = _opt_int(raw.get(name), f"runtime.replicaCounts.{name}")
        values[name] = 0 if value is None else value
    return ReplicaCounts(**values)


def _opt_text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field} is not a string")
    return safe(value)


def _opt_int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} is not an integer")
    return value
