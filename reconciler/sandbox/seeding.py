"""What a sandbox holds before anyone talks to it: services, releases, grants, users.

Owns the default seed (``docs/sandbox-defaults.md``: it makes ``examples/desired-state``
differ from live in every interesting way while no rollout is in flight), the seed file
format accepted by ``reconcile sandbox seed FILE``, the simulated registry push, and the
machine users with their token files.

Seed document (YAML or JSON)::

    registryHost: registry.sandbox.test        # optional, this default
    mediaType: application/vnd.oci.image.index.v1+json
    services:
      - id: svc-checkout
        name: checkout
        repository: shop/checkout              # optional: shop/<name>
        egress: [{host: api.stripe.com, port: 443}]
        egressRevision: 1                      # optional: 1 when egress is given, else 0
        releases:                              # oldest first
          - {tag: v2.3.0, accepted: true}      # digest optional: sha256("<name>:<tag>")
          - {tag: v2.4.0}
        current: v2.3.0                        # tag of the release rolled out now
        generation: 3
    grants:
      - {userId: deploy-bot, serviceId: svc-checkout, capabilities: [deployment:preflight]}

Must not talk HTTP; runs inside one ``store`` transaction.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from pathlib import Path
from typing import Any

from reconciler.sandbox import rollouts, store

REGISTRY_HOST = "registry.sandbox.test"
MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
DAY_MS = 86_400_000

ADMIN_USER = "reconcile-admin"
DEPLOY_BOT = "deploy-bot"
#: user id -> (role, token file name in the state dir)
USERS: dict[str, tuple[str, str]] = {
    ADMIN_USER: ("admin", "token"),
    DEPLOY_BOT: ("api", "token-deploy-bot"),
}

_ALL = ["deployment:preflight", "deployment:promote-route", "deployment:rollback-route"]

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
    ],
}


class SeedError(ValueError):
    """The seed document is not what this module accepts."""


def _release(service_id: str, name: str, repository: str, registry_host: str,
             media_type: str, tag: str, digest: str, release_id: str, at: int) -> dict[str, Any]:
    return {
        "id": release_id,
        "data": {
            "serviceId": service_id,
            "imageId": f"img-{name}",
            "registryHost": registry_host,
            "repository": repository,
            "registryRootDigest": digest,
            "digestPinnedImageReference": f"{registry_host}/{repository}@{digest}",
            "manifestMediaType": media_type,
            "observedTags": [tag],
            "firstObservedAt": at,
            "lastObservedAt": at,
            "observationCount": 1,
        },
    }


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
    for table in ("services", "releases", "reports", "grants", "idempotency"):
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
            release = _release(service_id, name, repository, registry_host, media_type, tag,
                               digest, str(rel.get("id", f"rel-{name}-{tag}")), at)
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
    for grant in seed.get("grants", []):
        caps = [str(c) for c in grant.get("capabilities", [])]
        store.set_grant(conn, str(grant["userId"]), str(grant["serviceId"]), caps)
    store.set_meta(conn, "seed", json.dumps(seed, sort_keys=True))
    store.bump_version(conn)


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


def push(conn: sqlite3.Connection, service_name: str, tag: str) -> dict[str, Any]:
    """The simulated registry observes a new manifest under ``tag``: a new release."""
    service = next((s for s in store.all_services(conn)
                    if s["data"]["name"] == service_name or s["id"] == service_name), None)
    if service is None:
        raise SeedError(f"no service named {service_name!r}")
    counter = int(store.get_meta(conn, "push-counter", "0") or 0) + 1
    store.set_meta(conn, "push-counter", str(counter))
    name = service["data"]["name"]
    digest = rollouts.seeded_digest(name, f"{tag}+push{counter}")
    existing = store.load_releases(conn, service["id"])
    template = existing[-1]["data"] if existing else {
        "registryHost": REGISTRY_HOST, "repository": f"shop/{name}",
        "manifestMediaType": MEDIA_TYPE}
    release = _release(service["id"], name, template["repository"], template["registryHost"],
                       template["manifestMediaType"], tag, digest,
                       f"rel-{name}-{tag}-{counter}", store.now_ms())
    # A tag moves to the newest manifest pushed under it (registry semantics).
    for old in existing:
        if tag in old["data"]["observedTags"]:
            old["data"]["observedTags"] = [t for t in old["data"]["observedTags"] if t != tag]
            store.save_release(conn, old)
    store.save_release(conn, release)
    store.bump_version(conn)
    return release
