"""Control-plane replies -> ``core.live`` models: the only reader of their wire shapes.

Owns the field names of ``IService``, ``IImageRelease``, ``imageDeployment``,
``imageRolloutStatus``, the grants and the egress lists (CONTRACT §1.2), the page of the
[ext] ``getServicesReleases``, the [ext] ``etag`` / ``notModified`` of the fleet reads,
and the response shape of each typed method -- all as narrow, strict wire models
(``core.wireshape``) that the client decodes the reply's bytes into
(``Session.read_as``): a field no model names is skipped by the parser, never built, so
a 10,000-service ``getServices`` reply is not held whole. Every string kept is
sanitized (``core.sanitize.safe``) on the way into ``core.live``; a malformed reply is a
``ProtocolError`` naming the service and the field, never a partial model.

Leniency where one bad entry must not sink the rest: a service (or a release) that
does not fit its model is kept as its raw value, and ``parse_service`` then makes that
one service a ``ProtocolError`` (the fleet read turns it into a ``ReadFailure``).
The gateway routes of ``getGatewayClientRoutes`` and of a cluster's status (issue 21)
are read by ``parse_client_route``.

Pure: parses values handed to it; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import msgspec
from pydantic import Field, JsonValue, PrivateAttr, ValidationError

from reconciler.core.desired import DEFAULT_ROUTE_PATH, DEFAULT_ROUTE_PORTS, DEFAULT_ROUTE_TRANSPORT
from reconciler.core.live import (
    EgressRule,
    ImageRelease,
    LiveGrant,
    LiveService,
    RolloutPlan,
    RolloutStatus,
)
from reconciler.core.names import Capability
from reconciler.core.routing import GatewayRoute, RouteOwnership
from reconciler.core.sanitize import safe
from reconciler.core.wireshape import Body, WireModel, decode, decode_value, problem
from reconciler.shell.controlplane.errors import ProtocolError

W = TypeVar("W", bound=WireModel)

#: The longest ``etag`` kept and sent back as ``ifNoneMatch``.
MAX_ETAG = 512


# -- the wire shapes ------------------------------------------------------------------------


class EgressWire(WireModel):
    host: str
    port: int


class ScopeWire(WireModel):
    target_cluster_ids: tuple[str, ...] = ()
    required_replica_count: int = 0


class PlanWire(WireModel):
    """``imageDeployment`` (seed 003)."""

    rollout_id: str
    rollout_generation: int
    release_id: str
    requested_digest: str
    mode: str
    rollback_of_rollout_id: str | None = None
    #: Raw when it is not a scope: an empty value ({}, [], null, "") reads as "no scope
    #: given", as it always has; anything else is malformed (``_plan`` says so).
    target_scope: Annotated[ScopeWire | JsonValue, Field(union_mode="left_to_right")] = None
    created_at: int = 0


class RolloutStatusWire(WireModel):
    """``imageRolloutStatus`` (seed 003)."""

    rollout_id: str
    rollout_generation: int
    expected_digest: str
    status: str
    mismatch_reason: str | None = None
    required_replica_count: int = 0
    observed_replica_count: int = 0
    healthy_replica_count: int = 0
    verified_replica_count: int = 0
    failed_replica_count: int = 0
    updated_at: int | None = None  # when the rollout reached its status (soak, issue 19)


class ServiceDataWire(WireModel):
    name: str
    app_id: JsonValue = None  # read only by ``fleet.add_app_ids``, which checks it
    immutable_image_required: JsonValue = False  # truthy: required (as always read)
    image_deployment: PlanWire | None = None
    image_rollout_status: RolloutStatusWire | None = None
    egress: tuple[EgressWire, ...] | None = None
    egress_revision: int = 0


class ServiceWire(WireModel):
    """``IService``, as far as a plan reads it."""

    id: str
    data: ServiceDataWire


class ReleaseDataWire(WireModel):
    registry_host: str
    repository: str
    registry_root_digest: str
    manifest_media_type: str
    observed_tags: tuple[str, ...] = ()
    first_observed_at: int = 0
    accepted_at: int | None = None
    last_promoted_at: int | None = None
    promotion_count: int = 0


class ReleaseWire(WireModel):
    """``IImageRelease``, as far as a plan reads it."""

    id: str
    data: ReleaseDataWire


class GrantWire(WireModel):
    user_id: str
    service_id: str
    capabilities: tuple[str, ...]


#: A service or release that does not fit its model stays raw (see the module docstring).
RawObject = dict[str, JsonValue]
LenientService = Annotated[ServiceWire | RawObject, Field(union_mode="left_to_right")]
LenientRelease = Annotated[ReleaseWire | RawObject, Field(union_mode="left_to_right")]


class ServicesReply(WireModel):
    """``getServices`` (with the [ext] ``etag`` / ``notModified``)."""

    services: list[LenientService] | None = None
    etag: JsonValue = None
    not_modified: JsonValue = None
    #: Set by ``services_answer``: each service's JSON text, framed but not built (then
    #: ``services`` is empty); read through ``ServiceList``.
    _framed: list[msgspec.Raw] | None = PrivateAttr(default=None)


#: How many services one decoding reads at most (``ServiceList.chunks``).
SERVICES_CHUNK = 500


#: A key the reply did not send (a JSON value is never empty).
_ABSENT = msgspec.Raw(b"")
_NULL = b"null"


class _FastServices(msgspec.Struct, gc=False, rename="camel"):
    """``getServices``'s response as ``msgspec`` reads its frame: each service left as its
    JSON text, checked to be JSON but never built (``services_answer``)."""

    services: list[msgspec.Raw] | None = None
    etag: msgspec.Raw = _ABSENT
    not_modified: msgspec.Raw = _ABSENT
    # The models read a snake-case key as the field too (``populate_by_name``): a reply
    # with one is left to them.
    snake_not_modified: msgspec.Raw = msgspec.field(default=_ABSENT, name="not_modified")


class _FastServicesEnvelope(msgspec.Struct, gc=False):
    response: _FastServices | None = None
    error: msgspec.Raw = _ABSENT
    retry: msgspec.Raw = _ABSENT


_FAST_SERVICES = msgspec.json.Decoder(_FastServicesEnvelope)


def services_answer(content: Body) -> ServicesReply | None:
    """A plain ``getServices`` answer with its services framed, not built: they are
    decoded later, ``SERVICES_CHUNK`` at a time, by ``ServicesReply`` itself
    (``ServiceList.chunks``); None when the reply is anything else, for the envelope's
    reader to decide.

    Decoded whole by the models, the 47 MB reply of 10,000 services made pydantic-core
    build its whole parse tree first: peak RSS rose by about 175 MB, and the allocator
    kept it. Here ``msgspec`` reads the frame only -- the envelope, the list, each
    service's extent -- and the services are decoded from their own bytes by the same
    model, so to the same values (a service that does not fit stays raw, as before).
    Decoded while they are folded (``shell.controlplane.fleet``), one chunk's wire models
    are alive at a time, not 10,000 services' (``docs/scaling.md``, round 8). Only plain
    answers go this way: ASCII bytes (no invalid UTF-8 can hide in a service it skips),
    no ``error`` or ``retry``, a ``services`` list of objects, no snake-case key;
    anything else goes to the models whole, which decide and word the outcome exactly
    as before."""
    if not content.isascii():
        return None
    try:
        frame = _FAST_SERVICES.decode(content)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    response = frame.response
    if bytes(frame.error) not in (b"", _NULL) or bytes(frame.retry) not in (b"", _NULL) \
            or response is None or response.services is None \
            or len(response.snake_not_modified):
        return None
    raws = response.services
    # A JSON text that starts with a brace is an object, which a service always fits
    # (raw where it does not fit ``ServiceWire``): no chunk decoded later can be refused.
    if not all(bytes(memoryview(raw)[:1]) == b"{" for raw in raws):
        return None
    head = [b'"services":[]']
    if len(response.etag):
        head.append(b'"etag":' + bytes(response.etag))
    if len(response.not_modified):
        head.append(b'"notModified":' + bytes(response.not_modified))
    try:
        reply = decode(ServicesReply, b"{" + b",".join(head) + b"}")
    except ValidationError:
        return None
    reply._framed = raws
    return reply


class ServiceList:
    """``getServices``'s services in the order listed, built a chunk at a time while
    they are read (``chunks``) -- or already built, when the reply was decoded whole.
    Read once: the reply's bytes are let go as the chunks are built."""

    __slots__ = ("_built", "_framed")

    def __init__(self, reply: ServicesReply) -> None:
        self._framed = reply._framed
        self._built = reply.services or []

    def chunks(self) -> Iterator[list[ServiceWire | RawObject]]:
        """Every service, ``SERVICES_CHUNK`` at a time (all at once when built); a
        second reading finds none."""
        raws, built = self._framed, self._built
        self._framed, self._built = None, []
        if raws is None:
            if built:
                yield built
            return
        for start in range(0, len(raws), SERVICES_CHUNK):
            chunk = b",".join(bytes(raw) for raw in raws[start:start + SERVICES_CHUNK])
            try:
                part = decode(ServicesReply, b'{"services":[' + chunk + b"]}").services
            except ValidationError as exc:  # framed as objects: not expected, still said
                raise ProtocolError(f"getServices: {problem(exc)}") from exc
            assert part is not None  # a list was sent
            yield part

    def __iter__(self) -> Iterator[ServiceWire | RawObject]:
        for chunk in self.chunks():
            yield from chunk


class ServiceReply(WireModel):
    """``getServiceById``: the whole ``IService`` (callers keep and show it)."""

    service: RawObject


class AllServicesReply(WireModel):
    """``getServices`` whole, every ``IService`` as sent (``get_services``)."""

    services: list[RawObject]


class ReleasesReply(WireModel):
    """``getServiceImageReleases``."""

    releases: list[LenientRelease]


class ReleasesPageReply(WireModel):
    """One page of [ext] ``getServicesReleases``."""

    releases: dict[str, list[LenientRelease]]
    next_cursor: Annotated[str, Field(min_length=1)] | None = None
    etag: JsonValue = None


class GrantsReply(WireModel):
    """``getServiceDeploymentGrants`` (with the [ext] ``etag``)."""

    grants: list[RawObject]
    etag: JsonValue = None


class WrittenReply(WireModel):
    """A keyed write's ``{service, idempotentReplay?}``."""

    service: RawObject
    idempotent_replay: JsonValue = None


class CapabilitiesReply(WireModel):
    """[ext] ``getCapabilities``."""

    methods: list[str]


# -- what the client hands on ---------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """A keyed write's reply: the service as it is now, and whether the control plane
    says it replayed an earlier call with the same key and changed nothing now
    (``idempotentReplay`` [ext]; an upstream without the extension never says so)."""

    service: RawObject
    replayed: bool


def written(reply: WrittenReply) -> Written:
    return Written(service=reply.service, replayed=reply.idempotent_replay is True)


def etag_of(value: JsonValue, method: str) -> str | None:
    """[ext] ``etag``: the control plane's one state revision this reply was read at
    (None: it sent none -- the real upstream -- so nothing can be reused later)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ETAG \
            or not value.isprintable():
        raise ProtocolError(f"{method}: response.etag is not a short string")
    return value


def not_modified(reply: ServicesReply, method: str, sent: str | None) -> bool:
    """Whether the reply is [ext] ``{notModified: true, etag}`` for the ``ifNoneMatch``
    sent. One that was not asked for, or names another etag, is malformed: reusing an
    earlier read on its word would be trusting an answer to another question."""
    if reply.not_modified is not True:
        return False
    if sent is None or etag_of(reply.etag, method) != sent:
        raise ProtocolError(f"{method}: notModified for a revision that was not asked about")
    return True


@dataclass(frozen=True)
class Services:
    """``getServices``: every ``IService`` (None: not modified since the etag sent)."""

    services: ServiceList | None
    etag: str | None


@dataclass(frozen=True)
class Grants:
    """``getServiceDeploymentGrants``: every grant, and the revision it was read at."""

    grants: list[RawObject]
    etag: str | None


@dataclass(frozen=True)
class ReleasesPage:
    """One page of [ext] ``getServicesReleases``: each carried service's
    ``IImageRelease[]``, and the cursor of the next page (None: the listing is complete)."""

    releases: dict[str, list[ReleaseWire | RawObject]]
    next_cursor: str | None
    etag: str | None = None


def releases_page(reply: ReleasesPageReply, method: str) -> ReleasesPage:
    return ReleasesPage(releases=reply.releases, next_cursor=reply.next_cursor,
                        etag=etag_of(reply.etag, method))


def service_id_of(raw: ServiceWire | Mapping[str, Any]) -> object:
    """The ``id`` a listed service gives itself (whatever it is, for a raw one)."""
    return raw.id if isinstance(raw, ServiceWire) else raw.get("id")


# -- into core.live ---------------------------------------------------------------------------


def parse_service(raw: ServiceWire | Mapping[str, Any],
                  releases: Sequence[ReleaseWire | Mapping[str, Any]]) -> LiveService:
    """An ``IService`` and its ``IImageRelease[]`` as a validated ``LiveService``.

    Raises ``ProtocolError`` naming the service and the field when the reply is malformed.
    """
    return service_fields(raw).with_releases(releases)


@dataclass(frozen=True, slots=True)
class ServiceFields:
    """An ``IService`` read into ``LiveService``'s fields, all but its releases: what the
    fleet read keeps of a listed service until its releases are in (``with_releases``)."""

    label: str  # how a message names the service
    fields: dict[str, Any]

    def with_releases(self, releases: Sequence[ReleaseWire | Mapping[str, Any]]
                      ) -> LiveService:
        """The ``LiveService``, with ``releases``; ``ProtocolError`` naming the service
        and the field when one is malformed."""
        try:
            read = tuple(_release(r if isinstance(r, ReleaseWire)
                                  else _decode(ReleaseWire, r, "release")) for r in releases)
        except _Malformed as exc:
            raise ProtocolError(f"service {self.label}: malformed reply: {exc}") from exc
        return LiveService(**self.fields, releases=read)


def service_fields(raw: ServiceWire | Mapping[str, Any]) -> ServiceFields:
    """``parse_service`` but for the releases: raises ``ProtocolError`` naming the
    service and the field when the service itself is malformed."""
    service_id = service_id_of(raw)
    label = safe(service_id, 80) if isinstance(service_id, str) else "<no id>"
    try:
        wire = raw if isinstance(raw, ServiceWire) else _decode(ServiceWire, raw, "")
        data = wire.data
        plan, status = data.image_deployment, data.image_rollout_status
        return ServiceFields(label, {
            "service_id": _text(wire.id),
            "name": _text(data.name),
            "immutable_required": bool(data.immutable_image_required),
            "deployment": None if plan is None else _plan(plan),
            "rollout_status": None if status is None else _status(status),
            "egress": None if data.egress is None else egress_rules(data.egress),
            "egress_revision": data.egress_revision,
        })
    except _Malformed as exc:
        raise ProtocolError(f"service {label}: malformed reply: {exc}") from exc


def parse_grants(raw: Sequence[Mapping[str, Any]]) -> tuple[LiveGrant, ...]:
    """``getServiceDeploymentGrants`` entries as ``LiveGrant``s (unknown capability: error)."""
    try:
        out = []
        for index, entry in enumerate(raw):
            grant = _decode(GrantWire, entry, f"grants[{index}]")
            try:
                capabilities = tuple(Capability(safe(c, 1000)) for c in grant.capabilities)
            except ValueError as exc:
                raise _Malformed(safe(str(exc), 200)) from exc
            out.append(LiveGrant(user_id=_text(grant.user_id),
                                 service_id=_text(grant.service_id),
                                 capabilities=capabilities))
        return tuple(out)
    except _Malformed as exc:
        raise ProtocolError(f"grants: malformed reply: {exc}") from exc


def parse_egress(raw: Any) -> tuple[EgressRule, ...]:
    """``[{host, port}]`` -> ``EgressRule``s (``ValueError`` naming the field otherwise)."""
    if not isinstance(raw, list | tuple):
        raise _Malformed("egress is not a list")
    return egress_rules(tuple(_decode(EgressWire, e, "egress[]") for e in raw))


def egress_rules(raw: Sequence[EgressWire]) -> tuple[EgressRule, ...]:
    """Wire egress entries as sanitized ``EgressRule``s; used for control-plane and
    cluster replies."""
    return tuple(EgressRule(host=_text(e.host), port=e.port) for e in raw)


class _Malformed(ValueError):
    """A value that does not fit its wire model; the message names the field."""


def _decode(model: type[W], raw: object, prefix: str) -> W:
    if not isinstance(raw, Mapping):
        raise _Malformed(f"{prefix or 'the reply'} is not an object")
    try:
        return decode_value(model, dict(raw))
    except ValidationError as exc:
        raise _Malformed(problem(exc, prefix, model=model)) from exc


def _plan(raw: PlanWire) -> RolloutPlan:
    given = raw.target_scope
    scope = given if isinstance(given, ScopeWire) else (
        _decode(ScopeWire, given, "imageDeployment.targetScope") if given else ScopeWire())
    return RolloutPlan(
        rollout_id=_text(raw.rollout_id),
        rollout_generation=raw.rollout_generation,
        release_id=_text(raw.release_id),
        requested_digest=_text(raw.requested_digest),
        mode=_text(raw.mode),
        rollback_of_rollout_id=None if raw.rollback_of_rollout_id is None
        else _text(raw.rollback_of_rollout_id),
        target_cluster_ids=tuple(_text(c) for c in scope.target_cluster_ids),
        required_replica_count=scope.required_replica_count,
        created_at=raw.created_at,
    )


def _status(raw: RolloutStatusWire) -> RolloutStatus:
    return RolloutStatus(
        rollout_id=_text(raw.rollout_id),
        rollout_generation=raw.rollout_generation,
        expected_digest=_text(raw.expected_digest),
        status=_text(raw.status),
        mismatch_reason=None if raw.mismatch_reason is None else _text(raw.mismatch_reason),
        required=raw.required_replica_count,
        observed=raw.observed_replica_count,
        healthy=raw.healthy_replica_count,
        verified=raw.verified_replica_count,
        failed=raw.failed_replica_count,
        updated_at=raw.updated_at,
    )


def _release(raw: ReleaseWire) -> ImageRelease:
    data = raw.data
    return ImageRelease(
        id=_text(raw.id),
        registry_host=_text(data.registry_host),
        repository=_text(data.repository),
        digest=_text(data.registry_root_digest),
        media_type=_text(data.manifest_media_type),
        tags=tuple(_text(t) for t in data.observed_tags),
        first_observed_at=data.first_observed_at,
        accepted_at=data.accepted_at,
        last_promoted_at=data.last_promoted_at,
        promotion_count=data.promotion_count,
    )


def _text(value: str) -> str:
    return safe(value, 1000)


# -- gateway routes (seed 11.2-11.4; docs/extensions.md §5) ------------------------------


class RouteOwnershipWire(WireModel):
    """Seed 11.2 ``IGatewayClientOwnership``."""

    app_id: str
    hostname: str | None = None
    route_ref: str | None = None


class RouteMatchWire(WireModel):
    """[ext] the match fields; an omitted one is the gateway's default."""

    domains: tuple[str, ...] = ()
    ports: tuple[int, ...] = DEFAULT_ROUTE_PORTS
    path: str = DEFAULT_ROUTE_PATH
    transport: str = DEFAULT_ROUTE_TRANSPORT


class RouteTargetWire(WireModel):
    app_id: str
    port: int


class RouteActionWire(WireModel):
    target: RouteTargetWire


class RemoteIngressWire(WireModel):
    enabled: bool = False
    edge_filter: tuple[str, ...] = ()


class RouteConfigWire(WireModel):
    """Seed 11.2 ``IGatewayRouteConfig``, as far as it is read."""

    name: str
    match: RouteMatchWire = RouteMatchWire()
    action: RouteActionWire
    priority: int = 0
    managed_route_kind: str | None = None
    remote_ingress: RemoteIngressWire = RemoteIngressWire()


class ClientRouteWire(WireModel):
    """Seed 11.2 ``IGatewayClientRoute``: ``{ownership, route, clientId?}``."""

    ownership: RouteOwnershipWire
    route: RouteConfigWire
    client_id: str | None = None


class ClientRoutesWire(WireModel):
    """``getGatewayClientRoutes``' reply: ours, and [ext] other clients' when listed."""

    routes: tuple[ClientRouteWire, ...]
    other_client_routes: tuple[ClientRouteWire, ...] | None = None


def parse_client_route(raw: Any, *, ours: bool) -> GatewayRoute:
    """One ``IGatewayClientRoute`` as a ``core.routing.GatewayRoute`` with every field
    the gateway defaults filled in, so a route a writer stored with its defaults left out
    reads the same as one written out. ``ours``: listed among the caller's own routes
    (``client_id`` None). Raises ``ProtocolError`` naming the field."""
    try:
        wire = raw if isinstance(raw, ClientRouteWire) else _decode(
            ClientRouteWire, raw, "route entry")
    except _Malformed as exc:
        raise ProtocolError(f"gateway route: {exc}") from None
    return _route(wire, ours=ours)


def _route(wire: ClientRouteWire, *, ours: bool) -> GatewayRoute:
    route, owner = wire.route, wire.ownership
    return GatewayRoute(
        ownership=RouteOwnership(
            app_id=_text(owner.app_id),
            hostname=None if owner.hostname is None else _text(owner.hostname),
            route_ref=None if owner.route_ref is None else _text(owner.route_ref)),
        name=_text(route.name),
        domains=tuple(sorted(_text(d) for d in route.match.domains)),
        ports=tuple(sorted(route.match.ports)),
        path=_text(route.match.path),
        transport=_text(route.match.transport),
        priority=route.priority,
        target_app_id=_text(route.action.target.app_id),
        target_port=route.action.target.port,
        managed_route_kind=None if route.managed_route_kind is None
        else _text(route.managed_route_kind),
        remote_ingress=route.remote_ingress.enabled,
        edge_filter=tuple(sorted(_text(e) for e in route.remote_ingress.edge_filter)),
        client_id=None if ours else (_text(wire.client_id) if wire.client_id is not None
                                     else "another client"),
    )


def parse_client_routes(response: Mapping[str, Any], method: str
                        ) -> tuple[tuple[GatewayRoute, ...], tuple[GatewayRoute, ...]]:
    """``getGatewayClientRoutes``' reply: (our routes, [ext] other clients' routes --
    empty when the control plane does not list them)."""
    try:
        wire = _decode(ClientRoutesWire, response, "response")
    except _Malformed as exc:
        raise ProtocolError(f"{method}: {exc}") from None
    own = tuple(_route(r, ours=True) for r in wire.routes)
    others = tuple(_route(r, ours=False) for r in wire.other_client_routes or ())
    return own, others
