"""Control-plane replies -> ``core.live`` models: the only reader of their wire shapes.

Owns the field names of ``IService``, ``IImageRelease``, ``imageDeployment``,
``imageRolloutStatus``, the grants and the egress lists (CONTRACT §1.2), the page of the
[ext] ``getServicesReleases``, the [ext] ``etag`` / ``notModified`` of the fleet reads,
the gateway routes of ``getGatewayClientRoutes`` and of a cluster's status (issue 21),
and the shape checks of a typed method's response
(``list_field``, ``dict_field``). Every string is sanitized (``core.sanitize.safe``) on
the way in; a malformed reply is a ``ProtocolError`` naming the service and the field,
never a partial model.

Pure: parses values handed to it; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

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
from reconciler.shell.controlplane.errors import ProtocolError

#: What a malformed value raises inside this module (mapped to ``ProtocolError``).
_MALFORMED = (ValueError, TypeError, KeyError, ValidationError)


def list_field(response: Mapping[str, Any], name: str, method: str) -> list[dict[str, Any]]:
    """``response[name]`` as a list of objects, else ``ProtocolError``."""
    value = response.get(name)
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ProtocolError(f"{method}: response.{name} is not a list of objects")
    return value


def dict_field(response: Mapping[str, Any], name: str, method: str) -> dict[str, Any]:
    """``response[name]`` as an object, else ``ProtocolError``."""
    value = response.get(name)
    if not isinstance(value, dict):
        raise ProtocolError(f"{method}: response.{name} is not an object")
    return value


@dataclass(frozen=True)
class Written:
    """A keyed write's reply: the service as it is now, and whether the control plane
    says it replayed an earlier call with the same key and changed nothing now
    (``idempotentReplay`` [ext]; an upstream without the extension never says so)."""

    service: dict[str, Any]
    replayed: bool


def write_result(response: Any, method: str) -> Written:
    """A keyed write's ``{service, idempotentReplay?}`` as ``Written``."""
    return Written(service=dict_field(response, "service", method),
                   replayed=isinstance(response, dict)
                   and response.get("idempotentReplay") is True)


#: The longest ``etag`` kept and sent back as ``ifNoneMatch``.
MAX_ETAG = 512


def etag_of(response: Mapping[str, Any], method: str) -> str | None:
    """[ext] ``etag``: the control plane's one state revision this reply was read at
    (None: it sent none -- the real upstream -- so nothing can be reused later)."""
    etag = response.get("etag")
    if etag is None:
        return None
    if not isinstance(etag, str) or not etag or len(etag) > MAX_ETAG or not etag.isprintable():
        raise ProtocolError(f"{method}: response.etag is not a short string")
    return etag


def not_modified(response: Mapping[str, Any], method: str, sent: str | None) -> bool:
    """Whether the reply is [ext] ``{notModified: true, etag}`` for the ``ifNoneMatch``
    sent. One that was not asked for, or names another etag, is malformed: reusing an
    earlier read on its word would be trusting an answer to another question."""
    if response.get("notModified") is not True:
        return False
    if sent is None or etag_of(response, method) != sent:
        raise ProtocolError(f"{method}: notModified for a revision that was not asked about")
    return True


@dataclass(frozen=True)
class Services:
    """``getServices``: every ``IService`` (None: not modified since the etag sent)."""

    services: list[dict[str, Any]] | None
    etag: str | None


@dataclass(frozen=True)
class Grants:
    """``getServiceDeploymentGrants``: every grant, and the revision it was read at."""

    grants: list[dict[str, Any]]
    etag: str | None


@dataclass(frozen=True)
class ReleasesPage:
    """One page of [ext] ``getServicesReleases``: each carried service's raw
    ``IImageRelease[]``, and the cursor of the next page (None: the listing is complete)."""

    releases: dict[str, list[dict[str, Any]]]
    next_cursor: str | None
    etag: str | None = None


def releases_page(response: Mapping[str, Any], method: str) -> ReleasesPage:
    """``{releases: {serviceId: IImageRelease[]}, nextCursor}``, else ``ProtocolError``."""
    releases = response.get("releases")
    if not isinstance(releases, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(r, dict) for r in v)
            for k, v in releases.items()):
        raise ProtocolError(f"{method}: response.releases is not a map of release lists")
    cursor = response.get("nextCursor")
    if cursor is not None and (not isinstance(cursor, str) or not cursor):
        raise ProtocolError(f"{method}: response.nextCursor is not a string")
    return ReleasesPage(releases=releases, next_cursor=cursor, etag=etag_of(response, method))


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
    except _MALFORMED as exc:
        raise ProtocolError(
            f"service {label}: malformed reply: {safe(_first_line(exc), 200)}") from exc


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
    except _MALFORMED as exc:
        raise ProtocolError(f"grants: malformed reply: {safe(_first_line(exc), 200)}") from exc


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


# -- gateway routes (seed 11.2-11.4; docs/extensions.md §5) ------------------------------


def parse_client_route(raw: Any, *, ours: bool) -> GatewayRoute:
    """One ``IGatewayClientRoute`` (``{ownership, route, clientId?}``) as a
    ``core.routing.GatewayRoute`` with every field the gateway defaults filled in, so a
    route a writer stored with its defaults left out reads the same as one written out.
    ``ours``: listed among the caller's own routes (``client_id`` None). Raises
    ``ProtocolError`` naming the field."""
    try:
        item = _obj(raw, "route entry")
        ownership = _obj(item.get("ownership"), "ownership")
        route = _obj(item.get("route"), "route")
        match = _obj(route.get("match", {}), "route.match")
        action = _obj(route.get("action"), "route.action")
        target = _obj(action.get("target"), "route.action.target")
        remote = _obj(route.get("remoteIngress", {"enabled": False}), "route.remoteIngress")
        kind = route.get("managedRouteKind")
        client = item.get("clientId")
        return GatewayRoute(
            ownership=RouteOwnership(
                app_id=_text(ownership.get("appId"), "ownership.appId"),
                hostname=_opt(ownership.get("hostname"), "ownership.hostname"),
                route_ref=_opt(ownership.get("routeRef"), "ownership.routeRef")),
            name=_text(route.get("name"), "route.name"),
            domains=tuple(sorted(_text(d, "route.match.domains[]")
                                 for d in _seq(match.get("domains", []), "route.match.domains"))),
            ports=tuple(sorted(_int(p, "route.match.ports[]") for p in _seq(
                match.get("ports", list(DEFAULT_ROUTE_PORTS)), "route.match.ports"))),
            path=_text(match.get("path", DEFAULT_ROUTE_PATH), "route.match.path"),
            transport=_text(match.get("transport", DEFAULT_ROUTE_TRANSPORT),
                            "route.match.transport"),
            priority=_int(route.get("priority", 0), "route.priority"),
            target_app_id=_text(target.get("appId"), "route.action.target.appId"),
            target_port=_int(target.get("port"), "route.action.target.port"),
            managed_route_kind=_opt(kind, "route.managedRouteKind"),
            remote_ingress=bool(remote.get("enabled", False)),
            edge_filter=tuple(sorted(_text(e, "route.remoteIngress.edgeFilter[]") for e in _seq(
                remote.get("edgeFilter", []), "route.remoteIngress.edgeFilter"))),
            client_id=None if ours else (_text(client, "clientId") if client is not None
                                         else "another client"),
        )
    except _MALFORMED as exc:
        raise ProtocolError(f"gateway route: {_first_line(exc)}") from None


def parse_client_routes(response: Mapping[str, Any], method: str
                        ) -> tuple[tuple[GatewayRoute, ...], tuple[GatewayRoute, ...]]:
    """``getGatewayClientRoutes``' reply: (our routes, [ext] other clients' routes --
    empty when the control plane does not list them)."""
    own = tuple(parse_client_route(r, ours=True) for r in list_field(response, "routes", method))
    others: tuple[GatewayRoute, ...] = ()
    if response.get("otherClientRoutes") is not None:
        others = tuple(parse_client_route(r, ours=False)
                       for r in list_field(response, "otherClientRoutes", method))
    return own, others


def _opt(value: Any, field: str) -> str | None:
    return None if value is None else _text(value, field)
