"""Builders for planning tests: the reference repo and the sandbox's default seed as models.

Kept in Python (not YAML) so planning tests touch no loader and no file: the core is pure.
"""

from __future__ import annotations

import hashlib
from typing import Any

from reconciler.core.desired import DesiredState, Grant, Service, Settings
from reconciler.core.live import (
    ClusterRuntime,
    EgressRule,
    Endpoint,
    ImageRelease,
    LiveGrant,
    LiveService,
    LiveSnapshot,
    MeshView,
    Observation,
    ObservationKind,
    ReplicaCounts,
    RolloutPlan,
    RolloutStatus,
)
from reconciler.core.names import Capability as C

CLUSTERS = ("sn1", "sn2", "sn3")
ADDRESSES = {"sn1": "127.0.0.2", "sn2": "127.0.0.3", "sn3": "127.0.0.4"}
MEDIA = "application/vnd.oci.image.index.v1+json"


def digest(name: str, tag: str) -> str:
    return "sha256:" + hashlib.sha256(f"{name}:{tag}".encode()).hexdigest()


SETTINGS: dict[str, Any] = {
    "apiVersion": "reconcile/v1", "kind": "Settings",
    "controlPlane": {"url": "https://127.0.0.1:18443", "tokenEnv": "RECONCILE_TOKEN"},
    "mesh": {"gateway": "gateway.sandbox.test", "port": 18444,
             "resolve": list(ADDRESSES.values()), "clusters": list(CLUSTERS),
             "signer": {"walletAddress": "rReconcileDeployBot", "appId": "reconcile",
                        "keyFileEnv": "RECONCILE_SIGNER_KEY"}},
}


def service_doc(name: str, tag: str, egress: list[dict[str, Any]] | None = None,
                **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "reconcile/v1", "kind": "Service", "name": name,
        "serviceId": f"svc-{name}", "appId": name,
        "release": {"registryHost": "registry.sandbox.test", "repository": f"shop/{name}",
                    "digest": digest(name, tag), "tag": tag},
    }
    if egress is not None:
        doc["egress"] = egress
    doc.update(extra)
    return doc


def reference_desired(prune: bool = False) -> DesiredState:
    """The reference repo (examples/desired-state) as models."""
    settings = dict(SETTINGS)
    if prune:
        settings = {**SETTINGS, "policy": {"prune": True}}
    services = [
        service_doc("checkout", "v2.4.0", [{"host": "api.stripe.com"},
                                          {"host": "hooks.slack.com", "port": 443}]),
        service_doc("catalog", "v5.0.1"),
        service_doc("search", "v1.9.2", []),
        service_doc("notifications", "v0.8.0", [{"host": "smtp.mailgun.org", "port": 587}]),
    ]
    full = ["deployment:preflight", "deployment:promote-route", "deployment:rollback-route"]
    grants = [
        {"apiVersion": "reconcile/v1", "kind": "Grant", "userId": "deploy-bot", "services": [
            {"service": "checkout", "capabilities": full},
            {"service": "catalog", "capabilities": full},
            {"service": "search", "capabilities": ["deployment:preflight"]},
            {"service": "notifications",
             "capabilities": ["deployment:promote-route", "deployment:rollback-route"]}]},
        {"apiVersion": "reconcile/v1", "kind": "Grant", "userId": "release-train", "services": [
            {"service": "notifications", "capabilities": ["deployment:preflight"]}]},
    ]
    return DesiredState(
        settings=Settings.model_validate(settings),
        services=tuple(Service.model_validate(s) for s in services),
        grants=tuple(Grant.model_validate(g) for g in grants),
    )


def release(name: str, tag: str, observed: int, accepted: int | None) -> ImageRelease:
    return ImageRelease(
        id=f"rel-{name}-{tag}", registry_host="registry.sandbox.test",
        repository=f"shop/{name}", digest=digest(name, tag), media_type=MEDIA, tags=(tag,),
        first_observed_at=observed, accepted_at=accepted,
        promotion_count=1 if accepted else 0)


def live_service(name: str, tags: list[tuple[str, int, int | None]], current: str,
                 generation: int, egress: list[tuple[str, int]] | None, revision: int,
                 status: str = "succeeded", mode: str = "promotion") -> LiveService:
    cur = digest(name, current)
    rollout_id = f"ro-{name}-{generation}"
    return LiveService(
        service_id=f"svc-{name}", name=name, immutable_required=True,
        deployment=RolloutPlan(rollout_id=rollout_id, rollout_generation=generation,
                               release_id=f"rel-{name}-{current}", requested_digest=cur,
                               mode=mode, target_cluster_ids=CLUSTERS,
                               required_replica_count=6),
        rollout_status=RolloutStatus(rollout_id=rollout_id, rollout_generation=generation,
                                     expected_digest=cur, status=status, required=6,
                                     observed=6, healthy=6, verified=6),
        egress=tuple(EgressRule(host=h, port=p) for h, p in egress) if egress is not None
        else None,
        egress_revision=revision,
        releases=tuple(release(name, t, o, a) for t, o, a in tags),
    )


def runtime(name: str, tag: str, generation: int, **over: Any) -> ClusterRuntime:
    d = digest(name, tag)
    values: dict[str, Any] = dict(
        state="ACTIVE", image=f"registry.sandbox.test/shop/{name}@{d}", runtime_state="RUNNING",
        replicas=2, resolved_digest=d, rollout_id=f"ro-{name}-{generation}",
        rollout_generation=generation,
        replica_counts=ReplicaCounts(required=2, observed=2, healthy=2, verified=2, failed=0),
        egress=(), egress_dropped=())
    values.update(over)
    return ClusterRuntime(**values)


CURRENT = {"checkout": ("v2.3.0", 3), "catalog": ("v5.1.0", 5), "search": ("v1.9.2", 2),
           "notifications": ("v0.8.0", 1)}


def reference_live(**overrides: Any) -> LiveSnapshot:
    """The sandbox's default seed as a snapshot where every cluster answered."""
    services = {
        "svc-checkout": live_service("checkout", [("v2.3.0", 100, 110), ("v2.4.0", 200, None)],
                                     "v2.3.0", 3, [("api.stripe.com", 443)], 1),
        "svc-catalog": live_service("catalog", [("v5.0.1", 100, 110), ("v5.1.0", 200, 210)],
                                    "v5.1.0", 5, [("cdn.example.org", 443)], 2),
        "svc-search": live_service("search", [("v1.9.2", 100, 110)], "v1.9.2", 2,
                                   [("api.openai.com", 443), ("es.example.net", 9200)], 1),
        "svc-notifications": live_service("notifications", [("v0.8.0", 100, 110)], "v0.8.0", 1,
                                          [("smtp.mailgun.org", 587)], 1),
    }
    observations = {}
    for name, (tag, gen) in CURRENT.items():
        svc = services[f"svc-{name}"]
        eg = svc.egress or ()
        observations[name] = tuple(
            Observation(cluster_id=c, address=ADDRESSES[c], kind=ObservationKind.ANSWERED,
                        runtime=runtime(name, tag, gen, egress=eg))
            for c in CLUSTERS)
    full = (C.PREFLIGHT, C.PROMOTE_ROUTE, C.ROLLBACK_ROUTE)
    grants = (
        LiveGrant(user_id="deploy-bot", service_id="svc-checkout", capabilities=full),
        LiveGrant(user_id="deploy-bot", service_id="svc-catalog", capabilities=full),
        LiveGrant(user_id="deploy-bot", service_id="svc-search",
                  capabilities=(C.PREFLIGHT, C.PROMOTE_ROUTE)),
        LiveGrant(user_id="deploy-bot", service_id="svc-notifications",
                  capabilities=(C.PROMOTE_ROUTE, C.ROLLBACK_ROUTE)),
        LiveGrant(user_id="release-train", service_id="svc-notifications",
                  capabilities=(C.PREFLIGHT,)),
    )
    values: dict[str, Any] = dict(
        taken_at=1_790_000_000_000, control_plane_url="https://127.0.0.1:18443",
        services=services, grants=grants,
        mesh=MeshView(gateway="gateway.sandbox.test",
                      resolved=tuple(Endpoint(address=a, cluster_id=c)
                                     for c, a in ADDRESSES.items()),
                      settings_clusters=CLUSTERS, expected_clusters=CLUSTERS),
        observations=observations)
    values.update(overrides)
    return LiveSnapshot(**values)


def sn2_down_live() -> LiveSnapshot:
    """The reference snapshot with sn2 (127.0.0.3) refusing connections: its address
    names no cluster and every app's row for sn2 is silent."""
    live = reference_live()
    down = ADDRESSES["sn2"]
    resolved = tuple(Endpoint(address=a, cluster_id=None if c == "sn2" else c,
                              error="health: connection refused" if c == "sn2" else None)
                     for c, a in ADDRESSES.items())
    unnamed = Observation(cluster_id=down, address=down, kind=ObservationKind.SILENT,
                          reason="health: connection refused")
    silent = {app: (*(
        Observation(cluster_id=o.cluster_id, kind=ObservationKind.SILENT,
                    reason="no resolved address answered as this cluster")
        if o.cluster_id == "sn2" else o for o in rows), unnamed)
        for app, rows in live.observations.items()}
    return live.model_copy(update={
        "mesh": MeshView(gateway=live.mesh.gateway, resolved=resolved,
                         settings_clusters=CLUSTERS, expected_clusters=CLUSTERS,
                         unnamed_addresses=(down,)),
        "observations": silent})


def many_services(services: int) -> tuple[DesiredState, LiveSnapshot]:
    """The reference state plus ``services`` copies of checkout (svc0000, svc0001, ...),
    each with a pending promotion and the same evidence: a plan far over any size budget."""
    desired, live = reference_desired(), reference_live()
    template = desired.service_by_name("checkout")
    assert template is not None
    svc_live = live.services["svc-checkout"]
    extra: list[Service] = []
    extra_live: dict[str, LiveService] = {}
    extra_obs: dict[str, Observation] = {}
    for i in range(services):
        name = f"svc{i:04d}"
        extra.append(template.model_copy(update={
            "name": name, "service_id": f"svc-{name}", "app_id": name, "egress": None}))
        extra_live[f"svc-{name}"] = svc_live.model_copy(update={"service_id": f"svc-{name}",
                                                               "name": name})
        extra_obs[name] = live.observations["checkout"]
    desired = desired.model_copy(update={"services": (*desired.services, *extra)})
    live = live.model_copy(update={"services": {**live.services, **extra_live},
                                   "observations": {**live.observations, **extra_obs}})
    return desired, live
