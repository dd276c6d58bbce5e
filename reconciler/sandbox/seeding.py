"""What a sandbox holds before anyone talks to it: services, releases, grants, users, and
what the simulated registry holds.

Owns the default seed (``docs/sandbox-defaults.md``: it makes ``examples/desired-state``
differ from live in every interesting way while no rollout is in flight, and publishes
``shop/ledger`` for a greenfield service the control plane does not have yet), the seed file
format accepted by ``reconcile sandbox seed FILE``, and the machine users with their token
files. Pushes are ``registry``'s.

Seed document (YAML or JSON)::

    registryHost: registry.sandbox.test        # optional, this default
    mediaType: application/vnd.oci.image.index.v1+json
    services:
      - id: svc-checkout
        name: checkout
        appId: checkout                        # optional: the name
        namespace: checkout                    # optional: the name
        repository: shop/checkout              # optional: shop/<name>
        egress: [{host: api.stripe.com, port: 443}]
        egressRevision: 1                      # optional: 1 when egress is given, else 0
        releases:                              # oldest first
          - {tag: v2.3.0, accepted: true}      # digest optional: sha256("<name>:<tag>")
          - {tag: v2.4.0}
        current: v2.3.0                        # tag of the release rolled out now
        generation: 3
    registry:                                  # indexes no service has observed yet
      - repository: shop/ledger
        tag: v1.0.0                            # digest optional: sha256("<name>:<tag>")
        name: ledger                           # optional: the repository's last segment
        platforms: [linux/amd64, linux/arm64]  # optional, this default
        missingManifests: []                   # optional: platforms whose manifest is absent
        evidence: complete                     # complete | none | [kind, ...]
        evidenceSubject: sha256:...            # optional: evidence bound to another digest
    dirtyNamespaces: [legacy-ledger]           # namespaces with leftover resources
    grants:
      - {userId: deploy-bot, serviceId: svc-checkout, capabilities: [deployment:preflight]}
    routes:                                    # gateway routes, as another client's
      - clientId: edge-team
        ownership: {appId: status-page, hostname: shop.sandbox.test, routeRef: status}
        route: {name: shop-status, match: {domains: [shop.sandbox.test], path: /status/},
                action: {type: forward, target: {appId: status-page, port: 8080}},
                priority: 500}

Every seeded release is in the registry too (its ``platforms``, ``missingManifests``,
``evidence`` and ``evidenceSubject`` keys as above, with the same defaults).

Must not talk HTTP; runs inside one ``store`` transaction.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from pathlib import Path
from typing import Any

from reconciler.sandbox import gateway, registry, rollouts, store

REGISTRY_HOST = registry.REGISTRY_HOST
MEDIA_TYPE = registry.INDEX_MEDIA_TYPE
DAY_MS = 86_400_000
DIRTY_NAMESPACES = "dirty-namespaces"

ADMIN_USER = "reconcile-admin"
DEPLOY_BOT = "deploy-bot"
#: user id -> (role, token file name in the state dir)
USERS: dict[str, tuple[str, str]] = {
    ADMIN_USER: ("admin", "token"),
    DEPLOY_BOT: ("api", "token-deploy-bot"),
}

_ALL = ["deployment:preflight", "deployment:promote-route", "deployment:rollback-route"]
#: The greenfield service the default seed prepares but does not create.
LEDGER_ID = "svc-ledger"

DEFAULT_SEED: dict[str, Any] = {
    "registryHost": REGISTRY_HOST,
    "mediaType": MEDIA_TYPE,
    "services": [
        {"id": "svc-checkout", "name": "checkout",
         "egress": [{"host": "api.stripe.com", "port": 443}], "egressRevision": 1,
         "releases": [{"tag": "v2.3.0", "accepted": True}, {"tag": "v2.4.0"}],
         "current": "v2.3.0", "generation": 3},
        {"id": "svc-catalog", "name": "catalog",
         "egress": [{"host": "cdn.example.org", "port": 443}], "egressRevision": 2,
         "releases": [{"tag": "v5.0.1", "accepted": True}, {"tag": "v5.1.0", "accepted": True}],
         "current": "v5.1.0", "generation": 5},
        {"id": "svc-search", "name": "search",
         "egress": [{"host": "api.openai.com", "port": 443},
                    {"host": "es.example.net", "port": 9200}], "egressRevision": 1,
         "releases": [{"tag": "v1.9.2", "accepted": True}],
         "current": "v1.9.2", "generation": 2},
        {"id": "svc-notifications", "name": "notifications",
         "egress": [{"host": "smtp.mailgun.org", "port": 587}], "egressRevision": 1,
         "releases": [{"tag": "v0.8.0", "accepted": True}],
         "current": "v0.8.0", "generation": 1},
    ],
    "grants": [
        {"userId": DEPLOY_BOT, "serviceId": "svc-checkout", "capabilities": _ALL},
        {"userId": DEPLOY_BOT, "serviceId": "svc-catalog", "capabilities": _ALL},
        {"userId": DEPLOY_BOT, "serviceId": "svc-search",
         "capabilities": ["deployment:preflight", "deployment:promote-route"]},
        {"userId": DEPLOY_BOT, "serviceId": "svc-notifications",
         "capabilities": ["deployment:promote-route", "deployment:rollback-route"]},
        {"userId": "release-train", "serviceId": "svc-notifications",
         "capabilities": ["deployment:preflight"]},
        {"userId": DEPLOY_BOT, "serviceId": LEDGER_ID,
         "capabilities": ["deployment:create-greenfield", "deployment:preflight"]},
    ],
    "registry": [{"repository": "shop/ledger", "tag": "v1.0.0", "evidence": "complete"}],
    "dirtyNamespaces": ["legacy-ledger"],
    # Another client's route on the hostname the example repo routes: reconcile must list
    # it in its routing analysis and never write or prune it.
    "routes": [{
        "clientId": "edge-team",
        "ownership": {"appId": "status-page", "hostname": "shop.sandbox.test",
                      "routeRef": "status"},
        "route": {"name": "shop-status",
                  "match": {"domains": ["shop.sandbox.test"], "ports": [443],
                            "path": "/status/"},
                  "action": {"type": "forward",
                             "target": {"appId": "status-page", "port": 8080}},
                  "priority": 500},
    }],
}


class SeedError(ValueError):
    """The seed document is not what this module accepts."""


def apply_seed(conn: sqlite3.Connection, seed: dict[str, Any], *, now: int | None = None) -> None:
    """Replace services, releases, reports, grants and idempotency keys with ``seed``.

    Runs inside the caller's transaction. Rollouts of seeded services count as converged
    and reported by every cluster (the clusters adopt them on their first start).
    """
    now = store.now_ms() if now is None else now
    cluster_ids = store.clusters(conn)
    registry_host = str(seed.get("registryHost", REGISTRY_HOST))
    media_type = str(seed.get("mediaType", MEDIA_TYPE))
    services = seed.get("services", [])
    if not isinstance(services, list):
        raise SeedError("services must be a list")
    for table in ("services", "releases", "reports", "grants", "idempotency",
                  "registry_indexes", "registry_tags", "greenfield_operations",
                  "gateway_routes"):
        conn.execute(f"DELETE FROM {table}")
    for entry in services:
        try:
            service_id, name = str(entry["id"]), str(entry["name"])
        except (KeyError, TypeError) as exc:
            raise SeedError(f"every service needs id and name: {entry!r}") from exc
        repository = str(entry.get("repository", f"shop/{name}"))
        releases = entry.get("releases", [])
        age = len(releases) + 1
        by_tag: dict[str, dict[str, Any]] = {}
        for index, rel in enumerate(releases):
            tag = str(rel["tag"])
            digest = str(rel.get("digest") or rollouts.seeded_digest(name, tag))
            at = now - (age - index) * DAY_MS
            release = registry.release_record(
                service_id=service_id, name=name, repository=repository,
                registry_host=registry_host, media_type=media_type, tag=tag, digest=digest,
                release_id=str(rel.get("id", f"rel-{name}-{tag}")), at=at)
            _publish(name, repository, registry_host, tag, digest, rel, at, conn)
            if rel.get("accepted"):
                release["data"].update(acceptedAt=at + 3_600_000, lastPromotedAt=at + 3_600_000,
                                       promotionCount=1)
            store.save_release(conn, release)
            by_tag[tag] = release
        data: dict[str, Any] = {
            "name": name,
            "imageId": f"img-{name}",
            "imageVersion": "",
            "immutableImageRequired": True,
            "egressRevision": int(entry.get("egressRevision", 1 if "egress" in entry else 0)),
        }
        for key in ("appId", "namespace"):
            if key in entry:
                data[key] = str(entry[key])
        if "egress" in entry:
            data["egress"] = [{"host": str(d["host"]), "port": int(d.get("port", 443))}
                              for d in entry["egress"]]
        current = entry.get("current")
        if current is not None:
            if current not in by_tag:
                raise SeedError(f"{service_id}: current {current!r} is not one of its releases")
            release = by_tag[current]
            generation = int(entry.get("generation", 1))
            plan = rollouts.new_plan(
                release=release, rollout_id=f"rollout-{name}-{generation}",
                generation=generation, created_at=release["data"].get("acceptedAt", now),
                mode="promotion", clusters=cluster_ids)
            data["imageDeployment"] = plan
            data["imageVersion"] = current
            for cluster_id in cluster_ids:
                store.save_report(conn, service_id, full_report(plan, cluster_id, "seed", now))
        store.save_service(conn, {"id": service_id, "data": data})
    for entry in seed.get("registry", []):
        try:
            repository, tag = str(entry["repository"]), str(entry["tag"])
        except (KeyError, TypeError) as exc:
            raise SeedError(f"every registry entry needs repository and tag: {entry!r}") from exc
        name = str(entry.get("name") or repository.rsplit("/", 1)[-1])
        digest = str(entry.get("digest") or rollouts.seeded_digest(name, tag))
        _publish(name, repository, registry_host, tag, digest, entry, now, conn)
    dirty = seed.get("dirtyNamespaces", [])
    if not isinstance(dirty, list):
        raise SeedError("dirtyNamespaces must be a list of namespaces")
    store.set_meta(conn, DIRTY_NAMESPACES, json.dumps(sorted(str(n) for n in dirty)))
    for grant in seed.get("grants", []):
        caps = [str(c) for c in grant.get("capabilities", [])]
        store.set_grant(conn, str(grant["userId"]), str(grant["serviceId"]), caps)
    for entry in seed.get("routes", []):
        try:
            gateway.seed_route(conn, str(entry["clientId"]), entry["ownership"], entry["route"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SeedError(f"every route needs clientId, ownership and route: {exc}") from exc
    store.set_meta(conn, "seed", json.dumps(seed, sort_keys=True))
    store.bump_version(conn)


def _publish(name: str, repository: str, registry_host: str, tag: str, digest: str,
             entry: dict[str, Any], at: int, conn: sqlite3.Connection) -> None:
    try:
        publication = registry.publication_from_seed(entry)
    except registry.RegistryError as exc:
        raise SeedError(f"{repository}:{tag}: {exc}") from exc
    registry.publish(conn, registry.index_record(
        name=name, repository=repository, registry_host=registry_host, digest=digest, key=tag,
        publication=publication, at=at), tag)


def dirty_namespaces(conn: sqlite3.Connection) -> frozenset[str]:
    """Namespaces the seed says still hold resources (never proven blank)."""
    return frozenset(json.loads(store.get_meta(conn, DIRTY_NAMESPACES, "[]") or "[]"))


def full_report(plan: dict[str, Any], cluster_id: str, session: str, at: int) -> dict[str, Any]:
    """A reporter status for ``cluster_id`` running ``plan`` fully converged."""
    required = rollouts.NODES_PER_CLUSTER * rollouts.REPLICAS_PER_NODE
    return {
        "reporterId": rollouts.reporter_id(cluster_id),
        "reporterSessionId": f"{cluster_id}-{session}",
        "clusterId": cluster_id,
        "reporterNodeNames": rollouts.node_names(cluster_id),
        "rolloutId": plan["rolloutId"],
        "rolloutGeneration": plan["rolloutGeneration"],
        "reportSequence": 0,
        "reportedAt": at,
        "requiredReplicaCount": required,
        "observedReplicaCount": required,
        "healthyReplicaCount": required,
        "verifiedReplicaCount": required,
        "failedReplicaCount": 0,
    }


def create_users(conn: sqlite3.Connection, state_dir: Path) -> None:
    """Machine users with fresh tokens; each token goes to its file (0600), hashed in the DB."""
    for user_id, (role, file_name) in USERS.items():
        token = "sbx_" + secrets.token_hex(24)
        conn.execute("INSERT INTO users (user_id, name, type, role) VALUES (?, ?, 'machine', ?) "
                     "ON CONFLICT (user_id) DO UPDATE SET role = excluded.role",
                     (user_id, user_id, role))
        conn.execute("DELETE FROM tokens WHERE user_id = ?", (user_id,))
        conn.execute("INSERT INTO tokens (token_hash, user_id) VALUES (?, ?)",
                     (store.sha256_hex(token), user_id))
        path = state_dir / file_name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(token + "\n", encoding="utf-8")
        tmp.chmod(0o600)
        tmp.replace(path)
