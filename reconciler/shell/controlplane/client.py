"""The typed control-plane methods (CONTRACT §1.2), on top of one ``session.Session``.

Owns one Python method per TypedRequest method the reconciler uses -- its request
fields, the shape check of its response, and which may be re-sent: reads and keyed
writes go through ``Session.read`` (transient failures re-sent, a keyed write always
with the *same* idempotency key); ``call`` is the bare envelope for anything else. Also
owns ``capabilities()``, the [ext] ``getCapabilities`` answer, asked once per client
(again after ``forget_capabilities()``, which the fleet read calls before a full read).

Callers: ``fleet`` and ``observing`` (reads), ``greenfield`` (the preflight and the
creation), the engine (apply's writes, ``pin``'s release reads), all as
``async with ControlPlaneClient(conn, token=...) as cp:``. Must not parse services
itself (``wire`` does) nor decide anything about them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final, Unpack

from reconciler.core.routing import GatewayRoute
from reconciler.core.sanitize import safe
from reconciler.shell.controlplane import envelope
from reconciler.shell.controlplane.errors import ProtocolError, UnknownMethod
from reconciler.shell.controlplane.session import Session, SessionOptions
from reconciler.shell.controlplane.wire import (
    AllServicesReply,
    CapabilitiesReply,
    Grants,
    GrantsReply,
    RawObject,
    ReleasesPage,
    ReleasesPageReply,
    ReleasesReply,
    ReleaseWire,
    ServiceList,
    ServiceReply,
    Services,
    ServicesReply,
    Written,
    WrittenReply,
    etag_of,
    not_modified,
    parse_client_routes,
    releases_page,
    services_answer,
    written,
)
from reconciler.shell.endpoints import Connection

#: [ext] the batch release read (listed by ``getCapabilities`` where it is offered).
SERVICES_RELEASES: Final = "getServicesReleases"

# ``getServices``'s plain answers are framed first and their services built in chunks later
# (``wire.services_answer``, ``ServiceList``: the same values, a fraction of the peak
# memory of the reply decoded whole).
envelope.fast_answer(ServicesReply, services_answer)


class ControlPlaneClient(Session):
    """Async TypedRequest client; one per run, used as an async context manager: a
    ``Session`` (its options, its counters) that also knows the control plane's methods."""

    def __init__(self, conn: Connection, **options: Unpack[SessionOptions]) -> None:
        super().__init__(conn, **options)
        self._capabilities: frozenset[str] | None = None
        self._capabilities_lock = asyncio.Lock()

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
                    reply = await self.read_as("getCapabilities", {}, CapabilitiesReply)
                except UnknownMethod:
                    self._capabilities = frozenset()
                else:
                    self._capabilities = frozenset(safe(m, 120) for m in reply.methods)
            return self._capabilities

    def forget_capabilities(self) -> None:
        """Ask ``getCapabilities`` again at the next ``capabilities()``: a control plane
        whose state revision moved may have been restarted or upgraded with other
        extensions (the fleet read calls this before every full read)."""
        self._capabilities = None

    # -- reads --------------------------------------------------------------------------

    async def get_services(self) -> list[RawObject]:
        """``getServices`` whole: every ``IService`` as the control plane sent it (the
        fleet read uses ``read_services``, which keeps only what a plan reads)."""
        return (await self.read_as("getServices", {}, AllServicesReply)).services

    async def read_services(self, *, if_none_match: str | None = None) -> Services:
        """``getServices``, conditionally when ``if_none_match`` is the [ext] etag of an
        earlier read: then ``services`` is None when nothing changed since."""
        method = "getServices"
        reply = await self.read_as(method, _conditional({}, if_none_match), ServicesReply)
        if not_modified(reply, method, if_none_match):
            return Services(services=None, etag=if_none_match)
        if reply.services is None:
            raise ProtocolError(f"{method}: response.services is not a list of objects")
        return Services(services=ServiceList(reply), etag=etag_of(reply.etag, method))

    async def get_service(self, service_id: str) -> RawObject:
        reply = await self.read_as("getServiceById", {"serviceId": service_id}, ServiceReply)
        return reply.service

    async def get_releases(self, service_id: str) -> list[ReleaseWire | RawObject]:
        reply = await self.read_as("getServiceImageReleases", {"serviceId": service_id},
                                   ReleasesReply)
        return reply.releases

    async def get_services_releases(
        self, service_ids: Sequence[str] | None, *, cursor: str | None = None,
        limit: int | None = None,
    ) -> ReleasesPage:
        """[ext] ``getServicesReleases``: one page of the releases of many services (all of
        them when ``service_ids`` is None). Offered when ``capabilities()`` lists it."""
        request: dict[str, Any] = {}
        if service_ids is not None:
            request["serviceIds"] = list(service_ids)
        if cursor is not None:
            request["cursor"] = cursor
        if limit is not None:
            request["limit"] = limit
        reply = await self.read_as(SERVICES_RELEASES, request, ReleasesPageReply)
        return releases_page(reply, SERVICES_RELEASES)

    async def get_grants(self) -> list[RawObject]:
        return (await self.read_grants()).grants

    async def read_grants(self) -> Grants:
        """``getServiceDeploymentGrants`` with the [ext] etag it was read at."""
        method = "getServiceDeploymentGrants"
        reply = await self.read_as(method, {}, GrantsReply)
        return Grants(grants=reply.grants, etag=etag_of(reply.etag, method))

    async def get_gateway_client_routes(
            self) -> tuple[tuple[GatewayRoute, ...], tuple[GatewayRoute, ...]]:
        """``getGatewayClientRoutes`` (seed 11.2): the routes this client owns, and [ext]
        the routes other clients own (read-only, for the routing analysis)."""
        method = "getGatewayClientRoutes"
        return parse_client_routes(await self.read(method, {}), method)

    async def sync_gateway_client_route(self, ownership: dict[str, Any],
                                        route: dict[str, Any] | None) -> bool:
        """``syncGatewayClientRoute`` (seed 11.2): create or replace the route at
        ``ownership``, or delete it (``route`` None). Idempotent by content, so safe to
        re-send; returns whether the control plane says it changed anything."""
        method = "syncGatewayClientRoute"
        request: dict[str, Any] = {"ownership": ownership}
        if route is None:
            request["delete"] = True
        else:
            request["route"] = route
        response = await self.read(method, request)
        changed = response.get("changed")
        if not isinstance(changed, bool):
            raise ProtocolError(f"{method}: response.changed is not a boolean")
        return changed

    # -- keyed writes -------------------------------------------------------------------

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
        return written(await self.read_as("promoteServiceImageRelease", request, WrittenReply))

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
        return written(await self.read_as("rollbackServiceImageRelease", request, WrittenReply))

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
        return written(await self.read_as("setServiceEgress", request, WrittenReply))

    async def configure_grant(
        self, user_id: str, service_id: str, capabilities: list[str]
    ) -> dict[str, Any]:
        """``configureServiceDeploymentMachineUser``: idempotent, so safe to re-send."""
        request = {"userId": user_id, "serviceId": service_id,
                   "capabilities": list(capabilities)}
        return await self.read("configureServiceDeploymentMachineUser", request)


def _conditional(request: dict[str, Any], if_none_match: str | None) -> dict[str, Any]:
    """``request`` with [ext] ``ifNoneMatch`` when there is an etag to send."""
    return request if if_none_match is None else {**request, "ifNoneMatch": if_none_match}
