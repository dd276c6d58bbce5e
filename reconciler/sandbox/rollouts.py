"""Rollout rules shared by the sandbox's control plane and clusters (seed 003).

Owns the shape of an ``IImmutableImageDeploymentPlan`` the sandbox issues, the aggregation
of per-reporter ``IImageRolloutReporterStatus`` reports into an ``IImageRolloutStatus``,
and a faithful port of seed 003's ``validateImageRolloutStatus``: the aggregate may say
``succeeded`` (or ``rolled-back``) only when that check passes.

Pure: values in, values out; no I/O.
"""

from __future__ import annotations

import hashlib
from typing import Any

NODES_PER_CLUSTER = 1
REPLICAS_PER_NODE = 2

#: Mismatch reasons that mean "the cluster runs something else", not "replicas died".
_MISMATCH_REASONS = frozenset({
    "pulled-digest-mismatch", "service-image-digest-mismatch", "task-image-digest-mismatch",
    "container-repodigest-mismatch", "runtime-attestation-missing", "stale-rollout-report",
})

JsonDict = dict[str, Any]


def seeded_digest(name: str, tag: str) -> str:
    """The default seed's digest for a release: ``sha256("<name>:<tag>")``."""
    return "sha256:" + hashlib.sha256(f"{name}:{tag}".encode()).hexdigest()


def node_names(cluster_id: str) -> list[str]:
    return [f"{cluster_id}-node-{i + 1}" for i in range(NODES_PER_CLUSTER)]


def reporter_id(cluster_id: str) -> str:
    return f"coreflow-{cluster_id}"


def new_plan(
    *, release: JsonDict, rollout_id: str, generation: int, created_at: int, mode: str,
    clusters: list[str], rollback_of: str | None = None,
) -> JsonDict:
    """An ``IImmutableImageDeploymentPlan`` targeting every cluster of the sandbox."""
    data = release["data"]
    nodes = [n for c in clusters for n in node_names(c)]
    plan: JsonDict = {
        "policy": "immutable-digest",
        "rolloutId": rollout_id,
        "rolloutGeneration": generation,
        "releaseId": release["id"],
        "registryHost": data["registryHost"],
        "repository": data["repository"],
        "requestedDigest": data["registryRootDigest"],
        "digestPinnedImageReference": data["digestPinnedImageReference"],
        "manifestMediaType": data["manifestMediaType"],
        "createdAt": created_at,
        "mode": mode,
        "targetScope": {
            "targetClusterIds": list(clusters),
            "targetNodeNames": nodes,
            "replicasPerNode": REPLICAS_PER_NODE,
            "requiredReplicaCount": len(nodes) * REPLICAS_PER_NODE,
        },
    }
    if rollback_of is not None:
        plan["rollbackOfRolloutId"] = rollback_of
    return plan


_COUNT_KEYS = ("required", "observed", "healthy", "verified", "failed")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53


def validate_image_rollout_status(status: JsonDict) -> list[str]:
    """Seed 003 ``validateImageRolloutStatus``, line for line."""
    errors: list[str] = []
    counts = [status[f"{k}ReplicaCount"] for k in _COUNT_KEYS]
    if any(not _is_count(c) for c in counts):
        errors.append("rollout replica counts must be non-negative safe integers")
    reporters: list[JsonDict] = status["reporters"]
    ids = [r["reporterId"] for r in reporters]
    sessions = [r["reporterSessionId"] for r in reporters]
    nodes = [n for r in reporters for n in r["reporterNodeNames"]]
    if len(set(ids)) != len(ids) or len(set(sessions)) != len(sessions):
        errors.append("rollout status must contain one latest report per reporter and session")
    for r in reporters:
        if any(not _is_count(r[f"{k}ReplicaCount"]) for k in _COUNT_KEYS):
            errors.append("reporter replica counts must be non-negative safe integers")
        if (r["rolloutId"] != status["rolloutId"]
                or r["rolloutGeneration"] != status["rolloutGeneration"]):
            errors.append("reporter rollout identity does not match aggregate rollout identity")
        if (r["observedReplicaCount"] > r["requiredReplicaCount"]
                or r["healthyReplicaCount"] > r["observedReplicaCount"]
                or r["verifiedReplicaCount"] > r["observedReplicaCount"]):
            errors.append("reporter replica counts are contradictory")
    if status["status"] in ("succeeded", "rolled-back"):
        required = status["requiredReplicaCount"]
        if (required < 1 or status["observedReplicaCount"] != required
                or status["healthyReplicaCount"] != required
                or status["verifiedReplicaCount"] != required
                or status["failedReplicaCount"] != 0):
            errors.append("successful rollout status requires every replica to be observed, "
                          "healthy and verified")
        if status.get("mismatchReason") or len(reporters) < 1:
            errors.append("successful rollout status requires reporters without mismatch reasons")
        if len(set(nodes)) != len(nodes):
            errors.append("successful rollout status must not count a node in multiple reporters")
        if any(r["requiredReplicaCount"] < 1
               or r["observedReplicaCount"] != r["requiredReplicaCount"]
               or r["healthyReplicaCount"] != r["requiredReplicaCount"]
               or r["verifiedReplicaCount"] != r["requiredReplicaCount"]
               or r["failedReplicaCount"] != 0
               or bool(r.get("mismatchReason")) for r in reporters):
            errors.append("successful rollout requires every reporter replica to be healthy "
                          "and verified")
        totals = {k: sum(r[f"{k}ReplicaCount"] for r in reporters) for k in _COUNT_KEYS}
        if any(totals[k] != status[f"{k}ReplicaCount"] for k in _COUNT_KEYS):
            errors.append("successful rollout aggregate must exactly match successful "
                          "reporter evidence")
    return errors


def aggregate(plan: JsonDict, reports: list[JsonDict]) -> JsonDict:
    """The ``IImageRolloutStatus`` of ``plan`` from the latest report of each reporter."""
    targets = set(plan["targetScope"]["targetClusterIds"])
    current = sorted(
        (r for r in reports
         if r["rolloutId"] == plan["rolloutId"]
         and r["rolloutGeneration"] == plan["rolloutGeneration"]
         and r["clusterId"] in targets),
        key=lambda r: str(r["reporterId"]))
    totals = {k: sum(int(r[f"{k}ReplicaCount"]) for r in current) for k in _COUNT_KEYS}
    rollback = plan["mode"] == "rollback"
    mismatch = next((r["mismatchReason"] for r in current if r.get("mismatchReason")), None)
    status: JsonDict = {
        "rolloutId": plan["rolloutId"],
        "rolloutGeneration": plan["rolloutGeneration"],
        "expectedDigest": plan["requestedDigest"],
        "status": "pending",
        "requiredReplicaCount": plan["targetScope"]["requiredReplicaCount"],
        "observedReplicaCount": totals["observed"],
        "healthyReplicaCount": totals["healthy"],
        "verifiedReplicaCount": totals["verified"],
        "failedReplicaCount": totals["failed"],
        "updatedAt": max([int(r["reportedAt"]) for r in current] + [int(plan["createdAt"])]),
        "reporters": current,
    }
    if mismatch is not None:
        status["mismatchReason"] = mismatch
        status["status"] = "mismatched" if mismatch in _MISMATCH_REASONS else "failed"
    elif totals["failed"] > 0:
        status["mismatchReason"] = "replica-failed"
        status["status"] = "failed"
    elif not current:
        status["status"] = "rolling-back" if rollback else "pending"
    elif {r["clusterId"] for r in current} == targets and all(
            r["verifiedReplicaCount"] == r["requiredReplicaCount"] for r in current):
        status["status"] = "rolled-back" if rollback else "succeeded"
        if validate_image_rollout_status(status):
            # The evidence does not add up (e.g. a reporter's counts disagree with the
            # plan's scope): never claim success on it.
            status["status"] = "verifying"
    else:
        status["status"] = "rolling-back" if rollback else "deploying"
    return status
