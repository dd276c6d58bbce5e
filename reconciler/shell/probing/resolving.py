"""Resolve the gateway once per pass and let each address name its cluster.

Owns the DNS question (the system resolver, or the static addresses of ``--resolve`` /
settings), its time bound, and the health route asked at every address
(CONTRACT §2 step 1), which also says whether the address offers the [ext] batch
status route. An empty or failed DNS answer is a ``resolve_error`` -- a total
evidence gap, never "one cluster". What the answers mean for attribution (duplicates,
unnamed addresses) is ``core.attribution``'s.

Must not raise for a per-address problem (an address whose health failed is an
``Endpoint`` with the error) and must not print.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from reconciler.core import attribution
from reconciler.core.live import Endpoint, MeshView
from reconciler.core.sanitize import safe
from reconciler.shell.endpoints import Connection
from reconciler.shell.probing.dialing import Dialer, Silent
from reconciler.shell.probing.parsing import Malformed, parse_health

HEALTH_PATH: Final = "/api/v3/cluster/health"

#: Resolver seam: ``(host, port) -> addresses``.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """The gateway's IPv4 addresses (A records) from the system resolver, in answer order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def resolve(conn: Connection, dialer: Dialer, resolver: Resolver) -> MeshView:
    """The mesh for one pass: the gateway's addresses, each named by its health route."""
    if conn.static_addresses is not None:
        addresses: Sequence[str] = conn.static_addresses
    else:
        try:
            async with asyncio.timeout(conn.probe_timeout):
                addresses = await resolver(conn.gateway, conn.mesh_port)
        except TimeoutError:
            return attribution.unresolved(conn.gateway, conn.settings_clusters,
                                          f"DNS: timed out after {conn.probe_timeout:g}s")
        except OSError as exc:
            return attribution.unresolved(conn.gateway, conn.settings_clusters,
                                          f"DNS: {safe(exc, 160)}")
    addresses = list(dict.fromkeys(addresses))
    if not addresses:
        return attribution.unresolved(conn.gateway, conn.settings_clusters,
                                      f"DNS: {conn.gateway} answered no address")
    endpoints = await asyncio.gather(*(health(dialer, a) for a in addresses))
    return attribution.mesh_view(conn.gateway, conn.settings_clusters, endpoints)


async def health(dialer: Dialer, address: str) -> Endpoint:
    """Ask one address which cluster it is; its failure is the endpoint's ``error``."""
    try:
        response = await dialer.request(address, "GET", HEALTH_PATH)
    except Silent as exc:
        return Endpoint(address=address, error=f"health: {exc.reason}")
    if response.status_code != 200:
        return Endpoint(address=address, error=f"health: HTTP {response.status_code}")
    try:
        named = parse_health(response.content)
    except Malformed as exc:
        return Endpoint(address=address, error=f"health: {exc.reason}")
    return Endpoint(address=address, cluster_id=named.cluster_id, batch_status=named.batch_path)
