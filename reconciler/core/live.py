"""The live snapshot: what the control plane and every cluster said, fixed for one run.

Owns the immutable models the observer (``shell.observing``) fills and the planner
(``core.planning``) reads. Field names follow the seeds where the wire has them; wire
parsing itself happens in the shell, which hands over only these validated values.

Unknown is not absent: a service the control plane could not read is a ``ReadFailure``,
never a missing key; a cluster that did not answer is an ``Observation`` of kind
``silent`` with its reason, never an omitted row.

Pure: no I/O imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field

from reconciler.core.lean import LeanModel as LeanModel  # re-exported: its home was here
from reconciler.core.names import Capability
from reconciler.core.routing import GatewayRoute
from reconciler.core.values import LeanValue
from reconciler.core.verification import CheckResult


class _Model(LeanModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class EgressRule(_Model):
    host: str
    port: int


# The control plane's side of a snapshot -- ``LiveService`` and the rollout plan, status
# and releases it holds -- are lean values (``core.values``): a 10,000-service snapshot
# holds 60,000 of them, each built by the shell from its strict wire model and never
# validated again (``docs/scaling.md``, round 8).


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageRelease(LeanValue):
    """A registry manifest the control plane observed (seed 003 ``IImageRelease``)."""

    id: str
    registry_host: str
    repository: str
    digest: str  # registryRootDigest
    media_type: str
    tags: tuple[str, ...] = ()
    first_observed_at: int = 0
    accepted_at: int | None = None
    last_promoted_at: int | None = None
    promotion_count: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutPlan(LeanValue):
    """The service's current immutable deployment plan (seed 003)."""

    rollout_id: str
    rollout_generation: int
    release_id: str
    requested_digest: str
    mode: str  # promotion | automatic | rollback
    rollback_of_rollout_id: str | None = None
    target_cluster_ids: tuple[str, ...] = ()
    required_replica_count: int = 0
    created_at: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutStatus(LeanValue):
    """The control plane's aggregate of the clusters' reports (seed 003)."""

    rollout_id: str
    rollout_generation: int
    expected_digest: str
    status: str  # pending|deploying|verifying|succeeded|failed|mismatched|rolling-back|rolled-back
    mismatch_reason: str | None = None
    required: int = 0
    observed: int = 0
    healthy: int = 0
    verified: int = 0
    failed: int = 0
    #: when the control plane last changed this status (seed 003 ``updatedAt``, ms): for a
    #: succeeded rollout, when it succeeded -- where a promotion's soak is counted from
    updated_at: int | None = None


IN_PROGRESS_STATUSES = frozenset({"pending", "deploying", "verifying", "rolling-back"})
FAILED_STATUSES = frozenset({"failed", "mismatched"})


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveService(LeanValue):
    """One service as the control plane holds it, with its observed releases."""

    service_id: str
    name: str
    immutable_required: bool = False
    deployment: RolloutPlan | None = None
    rollout_status: RolloutStatus | None = None
    egress: tuple[EgressRule, ...] | None = None
    egress_revision: int = 0
    releases: tuple[ImageRelease, ...] = ()

    @property
    def rollout_generation(self) -> int:
        return self.deployment.rollout_generation if self.deployment else 0

    @property
    def current_digest(self) -> str | None:
        return self.deployment.requested_digest if self.deployment else None

    def release_by_digest(self, digest: str) -> ImageRelease | None:
        return next((r for r in self.releases if r.digest == digest), None)


class ReadFailure(_Model):
    """A control-plane read that did not produce an answer, and why."""

    service_id: str
    reason: str
    code: str | None = None  # e.g. SERVICE_NOT_FOUND


class LiveGrant(_Model):
    user_id: str
    service_id: str
    capabilities: tuple[Capability, ...]


class ObservationKind(StrEnum):
    ANSWERED = "answered"
    NO_RECORD = "no_record"  # the cluster answered 404: no runtime record
    SILENT = "silent"  # unreachable, timed out, auth failed, malformed reply


class ReplicaCounts(_Model):
    required: int = 0
    observed: int = 0
    healthy: int = 0
    verified: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterRuntime(LeanValue):
    """A cluster's own runtime record for one app (CONTRACT §2), sanitized."""

    # A lean value (``core.values``): one per distinct status body in a snapshot, built
    # by the shell's parser from its strict wire model, never validated again.

    state: str | None = None
    image: str | None = None
    runtime_state: str | None = None
    replicas: int | None = None
    last_error: str | None = None
    resolved_digest: str | None = None
    rollout_id: str | None = None
    rollout_generation: int | None = None
    replica_counts: ReplicaCounts | None = None
    egress: tuple[EgressRule, ...] | None = None
    egress_dropped: tuple[EgressRule, ...] = ()
    #: [ext] the gateway routes in effect on this cluster's ingress that the app owns
    #: (docs/extensions.md §5); None: the cluster did not say (proves no route). Left
    #: out of the wire when None, so plans without routes read as they always did.
    routes: Annotated[tuple[GatewayRoute, ...] | None,
                      Field(exclude_if=lambda v: v is None)] = None


class Endpoint(_Model):
    """One resolved gateway address and the cluster that named itself there."""

    address: str
    cluster_id: str | None = None  # None: the health route did not name it
    error: str | None = None
    #: [ext] the batch status route its health reply advertised (None: read app by app)
    batch_status: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation(LeanValue):
    """What one cluster said about one app, or why it said nothing."""

    # A lean value (``core.values``): a 10,000 × 10 snapshot holds 100,000 of them.

    cluster_id: str  # the expected cluster id, or the address when unnamed
    address: str | None = None  # None: no endpoint answered as this cluster
    kind: ObservationKind
    runtime: ClusterRuntime | None = None
    reason: str | None = None
    #: When the cluster said it (ms since the epoch). None: not asked (a row known silent
    #: without I/O). A ``304`` confirming an earlier answer counts as saying it again: the
    #: reused observation keeps its own time and the snapshot's ``MeshView.confirmed``
    #: says when the cluster confirmed it (``core.freshness`` takes the later of the two).
    #: Read by ``core.freshness``; not part of the plan's wire format, which carries the
    #: snapshot's time (``Plan.created_at``) and stays the same for the same evidence.
    observed_at: Annotated[int | None, Field(exclude=True)] = None
    #: [ext] ``runtime.healthySince`` (docs/extensions.md §6): since when (ms since the
    #: epoch) the cluster says it has run ``resolvedDigest`` with every replica healthy,
    #: without a gap -- where a promotion's soak is counted from (``core.promotion``).
    #: None: the cluster did not say. Kept here, not on the shared ``ClusterRuntime``:
    #: it differs from cluster to cluster where the rest of a status is the same. Not part
    #: of the plan's wire format (plans that involve no soak read as they always did).
    healthy_since: Annotated[int | None, Field(exclude=True)] = None
    #: Issue 34: the results of the checks the service is held to, taken through this
    #: cluster (``shell.verifying``), each bound to the digest and rollout generation it
    #: was taken for; the judge reads them (``core.verification.judge_checks``). Left out
    #: of the wire when empty, so plans of fleets without checks read as they always did.
    checks: Annotated[tuple[CheckResult, ...], Field(exclude_if=lambda v: not v)] = ()


class Confirmation(_Model):
    """A cluster that answered ``304`` to the ETag of its last complete listing at ``at``
    (ms since the epoch): every observation of ``cluster_id`` at ``address`` in the same
    snapshot is that listing's, reused, and counts as said again at ``at``. Recorded
    once per cluster rather than by re-stamping 10,000 reused observations."""

    cluster_id: str
    address: str
    at: int


class MeshView(_Model):
    """The mesh as resolved once for this run."""

    gateway: str
    resolved: tuple[Endpoint, ...] = ()
    resolve_error: str | None = None
    settings_clusters: tuple[str, ...] = ()
    expected_clusters: tuple[str, ...] = ()
    duplicate_claims: tuple[str, ...] = Field(
        default=(), description="Cluster ids claimed by more than one address.")
    unnamed_addresses: tuple[str, ...] = ()
    notes: tuple[str, ...] = Field(
        default=(), description="What the reader should know about how the mesh was read "
        "that changes no evidence (e.g. a cluster read app by app because its advertised "
        "batch route answered 404); one line per cluster, said once.")
    #: The clusters that confirmed their earlier answers in this pass (see
    #: ``Confirmation``); like ``Observation.observed_at``, not part of any wire format.
    confirmed: tuple[Confirmation, ...] = Field(default=(), exclude=True)


class LiveSnapshot(_Model):
    """Everything read in one pass. ``taken_at`` is milliseconds since the epoch."""

    taken_at: int
    control_plane_url: str
    services: dict[str, LiveService | ReadFailure]  # by serviceId
    grants: tuple[LiveGrant, ...] | None = None  # None: the grants could not be read
    grants_error: str | None = None
    #: Issue 21: the gateway routes this client owns and, apart, other clients' routes
    #: (``client_id`` set); None: not read (no Route document, no route pruning) or
    #: unreadable (``routes_error`` says why).
    routes: tuple[GatewayRoute, ...] | None = None
    routes_error: str | None = None
    mesh: MeshView
    observations: dict[str, tuple[Observation, ...]] = Field(
        default_factory=dict, description="appId -> one observation per expected cluster.")
    app_ids: dict[str, str] = Field(
        default_factory=dict, description="appId -> the id of the service that uses it, for "
        "every service getServices listed (managed or not): a new service must not take "
        "one that is in use.")
