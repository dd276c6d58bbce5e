"""The one judge: what a snapshot proves about a service on each expected cluster.

Owns ``judge``, the single pure function that every claim of success asks: the plan's
verdict ("no changes" / GO / drift), the convergence gate after an apply,
``plan --detailed-exitcode``, and watch's output and metrics. A second opinion anywhere
else is a bug, so the rules live here and nowhere else:

- a cluster proves a service converged only by answering with the pinned digest as its
  ``resolvedDigest`` (never a tag), ``runtimeState`` RUNNING, at least one required replica
  and every required replica observed, healthy and verified, none failed, and the declared
  egress in effect (a destination the cluster's operator dropped is *not* in effect),
  and every gateway route the repo declares for the app in effect on its ingress with its
  priority and target (issue 21; a cluster still serving the old route is named);
- the control plane's rollout for the service must be to the pinned digest and say
  ``succeeded``: a rollout still pending or deploying has not finished, a failed or
  mismatched one has not converged, and one with no status has proven nothing;
- a cluster that is silent, or answers without the facts above, leaves the service
  **unproven**, never converged: missing evidence is not evidence of convergence;
- a cluster that is not converged *and says why* (a ``lastError``, an operator's dropped
  egress) has **stated** its failure (``ClusterProof.stated``): what apply will meet,
  known before it sends anything (a plan's risks, ``core.planning``); a rollout the
  control plane reports failed or mismatched is **terminal** (``ServiceProof.terminal``):
  waiting cannot prove it, so the convergence gate stops polling it.

Also owns ``expected_clusters`` (settings ∪ DNS ∪ rollout targets, CONTRACT §3).

Must not: do I/O, look at the clock, or render; reasons are plain sentences built from
sanitized strings, codes are the ``Why`` enum.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import ConfigDict

from reconciler.core.live import (
    FAILED_STATUSES,
    IN_PROGRESS_STATUSES,
    EgressRule,
    LeanModel,
    LiveService,
    Observation,
    ObservationKind,
    ReadFailure,
)
from reconciler.core.routing import GatewayRoute, same_config
from reconciler.core.sanitize import safe


class _Model(LeanModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Proof(StrEnum):
    """What the evidence proves. Only ``converged`` is ever a pass."""

    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"  # the evidence shows something else is running
    UNPROVEN = "unproven"  # the evidence is missing or incomplete


class Why(StrEnum):
    """Why a cluster (or the rollout) is not proven converged. Documented in docs/codes.md."""

    SILENT = "silent"
    NO_RECORD = "no_runtime_record"
    NO_DIGEST = "no_resolved_digest"
    OTHER_DIGEST = "runs_other_digest"
    NOT_RUNNING = "not_running"
    NO_REPLICA_COUNTS = "no_replica_counts"
    REPLICAS_SHORT = "replicas_not_ready"
    NO_EGRESS = "no_egress_report"
    EGRESS_DROPPED = "egress_dropped"
    EGRESS_DIFFERS = "egress_not_in_effect"
    NO_ROUTES = "no_route_view"
    ROUTE_NOT_IN_EFFECT = "route_not_in_effect"
    # the control plane's rollout, for the service as a whole
    SERVICE_UNREADABLE = "service_unreadable"
    NOT_ROLLED_OUT = "rollout_not_to_pinned_digest"
    ROLLOUT_STATUS_UNKNOWN = "rollout_status_unknown"
    ROLLOUT_IN_PROGRESS = "rollout_in_progress"
    ROLLOUT_FAILED = "rollout_failed"


#: A finished rollout: ``rolled-back`` is how a rollback's rollout succeeds (seed 003) --
#: for a rollout whose mode is ``rollback`` only.
SUCCEEDED_STATUSES = frozenset({"succeeded", "rolled-back"})

#: Whys that are a gap in evidence (unproven) rather than evidence of something else.
UNPROVEN_WHYS = frozenset({Why.SILENT, Why.NO_DIGEST, Why.NO_REPLICA_COUNTS, Why.NO_EGRESS,
                           Why.SERVICE_UNREADABLE, Why.ROLLOUT_STATUS_UNKNOWN, Why.NO_ROUTES})


class Target(_Model):
    """What must be proven for one service: the pinned digest and the egress that must be
    in effect (``None``: no egress is declared anywhere, so none is checked)."""

    service: str
    app_id: str
    digest: str
    egress: tuple[EgressRule, ...] | None = None
    #: Issue 21: the gateway routes of this app every expected cluster must report in
    #: effect, each with its priority and target (None: the repo declares none: not
    #: checked).
    routes: tuple[GatewayRoute, ...] | None = None


class ClusterProof(_Model):
    cluster: str
    proof: Proof
    why: Why | None = None  # None when converged
    detail: str = ""  # one sentence, sanitized
    running: str | None = None  # the digest the cluster proved it runs, if any
    last_error: str | None = None

    @property
    def stated(self) -> str | None:
        """What the cluster itself says keeps it from converging, or None: its
        ``lastError`` while it does not run what it was asked to, or the destinations its
        operator dropped. Silence and missing facts state nothing (they are unproven, an
        evidence gap); a cluster still catching up states nothing either."""
        if self.proof is not Proof.NOT_CONVERGED:
            return None
        if self.last_error:
            return self.last_error
        if self.why is Why.EGRESS_DROPPED:
            return self.detail
        return None


class ServiceProof(_Model):
    """The judgement of one service: the rollout, and every expected cluster."""

    service: str
    app_id: str
    digest: str
    proof: Proof
    rollout_why: Why | None = None  # the control plane's side, when it is the problem
    rollout_detail: str = ""
    clusters: tuple[ClusterProof, ...] = ()

    @property
    def converged(self) -> bool:
        return self.proof is Proof.CONVERGED

    @property
    def terminal(self) -> bool:
        """The control plane reports the rollout to this digest failed or mismatched (seed
        003): no later poll of it can prove convergence, so the gate stops polling it."""
        return self.rollout_why is Why.ROLLOUT_FAILED

    def stated(self) -> tuple[ClusterProof, ...]:
        """The clusters that say why they do not converge (``ClusterProof.stated``)."""
        return tuple(c for c in self.clusters if c.stated is not None)

    def pending(self) -> tuple[ClusterProof, ...]:
        return tuple(c for c in self.clusters if c.proof is not Proof.CONVERGED)

    def reasons(self) -> list[str]:
        """Every reason it is not converged, the rollout first; empty when converged."""
        out = [self.rollout_detail] if self.rollout_why is not None else []
        out.extend(f"{c.cluster}: {c.detail}" for c in self.pending())
        return out


def expected_clusters(*sources: Iterable[str]) -> tuple[str, ...]:
    """The sorted union of every source of expected cluster ids."""
    union: set[str] = set()
    for source in sources:
        union.update(source)
    return tuple(sorted(union))


def egress_key(rules: Iterable[EgressRule]) -> frozenset[tuple[str, int]]:
    return frozenset((r.host, r.port) for r in rules)


def _pairs(pairs: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{safe(h)}:{p}" for h, p in sorted(pairs))


#: What one cluster's answer proves, without the cluster's name: (why, detail, running,
#: last_error); ``why`` None means converged.
_Assessment = tuple["Why | None", str, "str | None", "str | None"]


def judge_cluster(observation: Observation, digest: str,
                  egress: tuple[EgressRule, ...] | None,
                  routes: tuple[GatewayRoute, ...] | None = None) -> ClusterProof:
    """One cluster's answer about one app, against the pinned digest, egress and routes."""
    return _proof(observation.cluster_id, _assess(observation, digest, egress, routes))


def _proof(cluster: str, assessment: _Assessment) -> ClusterProof:
    why, detail, running, last_error = assessment
    if why is None:
        return ClusterProof(cluster=cluster, proof=Proof.CONVERGED, running=running,
                            last_error=last_error)
    proof = Proof.UNPROVEN if why in UNPROVEN_WHYS else Proof.NOT_CONVERGED
    return ClusterProof(cluster=cluster, proof=proof, why=why, detail=detail,
                        running=running, last_error=last_error)


def _assess(observation: Observation, digest: str,
            egress: tuple[EgressRule, ...] | None,
            routes: tuple[GatewayRoute, ...] | None = None) -> _Assessment:
    """``judge_cluster``'s rules. An answer's assessment depends on its runtime alone
    (for one digest and egress), never on which cluster sent it."""

    def verdict(why: Why, detail: str, running: str | None = None,
                last_error: str | None = None) -> _Assessment:
        return why, detail, running, last_error

    if observation.kind is ObservationKind.SILENT:
        return verdict(Why.SILENT, f"gave no evidence ({safe(observation.reason)})")
    runtime = observation.runtime
    if observation.kind is ObservationKind.NO_RECORD or runtime is None:
        return verdict(Why.NO_RECORD, "has no runtime record for this app")
    last_error = safe(runtime.last_error) if runtime.last_error else None
    running = runtime.resolved_digest
    if running is None:
        return verdict(Why.NO_DIGEST, "sent no resolvedDigest: it has not proven what it runs",
                       None, last_error)
    if running != digest:
        return verdict(Why.OTHER_DIGEST, f"runs {safe(running)}, not {digest}", running,
                       last_error)
    if runtime.runtime_state != "RUNNING":
        return verdict(Why.NOT_RUNNING, f"runtimeState is {safe(runtime.runtime_state)}",
                       running, last_error)
    counts = runtime.replica_counts
    if counts is None:
        return verdict(Why.NO_REPLICA_COUNTS, "sent no replica counts", running, last_error)
    if not (counts.required >= 1 and counts.required == counts.observed == counts.healthy
            == counts.verified and counts.failed == 0):
        return verdict(Why.REPLICAS_SHORT,
                       f"replicas required={counts.required} observed={counts.observed} "
                       f"healthy={counts.healthy} verified={counts.verified} "
                       f"failed={counts.failed}", running, last_error)
    if egress is not None:
        if runtime.egress is None:
            return verdict(Why.NO_EGRESS, "sent no effective egress", running, last_error)
        declared = egress_key(egress)
        dropped = declared & egress_key(runtime.egress_dropped)
        in_effect = egress_key(runtime.egress)
        if dropped:
            # The operator's allow-list refused it: the destination is not in effect, and
            # no amount of waiting will change that. Reported, never counted as converged.
            return verdict(Why.EGRESS_DROPPED,
                           f"its operator allow-list dropped egress to {_pairs(dropped)}",
                           running, last_error)
        if in_effect != declared:
            bits = []
            if declared - in_effect:
                bits.append("missing " + _pairs(declared - in_effect))
            if in_effect - declared:
                bits.append("still allows " + _pairs(in_effect - declared))
            return verdict(Why.EGRESS_DIFFERS, "egress " + "; ".join(bits), running,
                           last_error)
    if routes is not None:
        found = _routes_missing(runtime.routes, routes)
        if found is not None:
            return verdict(found[0], found[1], running, last_error)
    return None, "", running, last_error


def _routes_missing(in_effect: tuple[GatewayRoute, ...] | None,
                    routes: tuple[GatewayRoute, ...]) -> tuple[Why, str] | None:
    """A route not in effect as declared (what the cluster still serves instead), or
    None when every declared route is in effect with its priority and target."""
    if in_effect is None:
        return Why.NO_ROUTES, "sent no gateway routes: which route serves is unproven"
    serving = {r.key: r for r in in_effect}
    for want in routes:
        have = serving.get(want.key)
        if have is None:
            return Why.ROUTE_NOT_IN_EFFECT, (f"does not serve route {want.name!r} (priority "
                                             f"{want.priority} -> {want.target})")
        if not same_config(have, want):
            return Why.ROUTE_NOT_IN_EFFECT, (
                f"still serves the old route {safe(have.name)!r}: {safe(have.summary())}, "
                f"not {want.summary()}")
    return None


def _judge_rollout(live: LiveService | ReadFailure | None, digest: str) -> tuple[Why, str] | None:
    if not isinstance(live, LiveService):
        why = safe(live.reason) if live is not None else "no answer"
        return Why.SERVICE_UNREADABLE, f"the control plane's state is unknown ({why})"
    if live.current_digest != digest:
        now = live.current_digest or "no rollout"
        return Why.NOT_ROLLED_OUT, f"the control plane's current rollout is {now}, not {digest}"
    status = live.rollout_status
    rollout_id = live.deployment.rollout_id if live.deployment else "?"
    if status is None or status.rollout_id != rollout_id:
        return Why.ROLLOUT_STATUS_UNKNOWN, f"rollout {safe(rollout_id)} has no status"
    if status.status in IN_PROGRESS_STATUSES:
        return Why.ROLLOUT_IN_PROGRESS, f"rollout {safe(rollout_id)} is still " \
            f"{safe(status.status)}"
    if status.status in FAILED_STATUSES:
        why = f" ({safe(status.mismatch_reason)})" if status.mismatch_reason else ""
        return Why.ROLLOUT_FAILED, f"rollout {safe(rollout_id)} is {safe(status.status)}{why}"
    if status.expected_digest != digest:
        return Why.ROLLOUT_STATUS_UNKNOWN, f"rollout {safe(rollout_id)}'s status is about " \
            f"{safe(status.expected_digest)}, not {digest}"
    mode = live.deployment.mode if live.deployment else ""
    if status.status not in SUCCEEDED_STATUSES or (status.status == "rolled-back"
                                                   and mode != "rollback"):
        # `rolled-back` is how a *rollback* succeeds; a promotion that ended rolled-back
        # was reverted, whatever the clusters still report.
        return Why.ROLLOUT_STATUS_UNKNOWN, f"rollout {safe(rollout_id)} says " \
            f"{safe(status.status)}, not succeeded"
    return None


def judge(target: Target, live: LiveService | ReadFailure | None,
          expected: Iterable[str], observations: Iterable[Observation]) -> ServiceProof:
    """The judgement of one service: converged only when the control plane's rollout is to
    the pinned digest and succeeded, and every ``expected`` cluster proves it. A cluster
    with no observation is silent. Not converged wins over unproven when both occur."""
    by_cluster = {o.cluster_id: o for o in observations}
    # Clusters running the same app usually send one and the same (shared) runtime:
    # judged once per runtime, named per cluster.
    assessed: dict[int, _Assessment] = {}

    def one(cluster: str) -> ClusterProof:
        observation = by_cluster.get(cluster) or Observation(
            cluster_id=cluster, kind=ObservationKind.SILENT, reason="never probed")
        runtime = observation.runtime
        if observation.kind is not ObservationKind.ANSWERED or runtime is None:
            return judge_cluster(observation, target.digest, target.egress, target.routes)
        assessment = assessed.get(id(runtime))
        if assessment is None:
            assessment = assessed[id(runtime)] = _assess(observation, target.digest,
                                                         target.egress, target.routes)
        return _proof(cluster, assessment)

    clusters = tuple(one(cluster) for cluster in sorted(set(expected)))
    rollout = _judge_rollout(live, target.digest)
    proofs = {c.proof for c in clusters}
    if rollout is not None:
        proofs.add(Proof.UNPROVEN if rollout[0] in UNPROVEN_WHYS else Proof.NOT_CONVERGED)
    if not clusters:
        proofs.add(Proof.UNPROVEN)  # no expected cluster at all proves nothing
    proof = Proof.NOT_CONVERGED if Proof.NOT_CONVERGED in proofs else \
        Proof.UNPROVEN if Proof.UNPROVEN in proofs else Proof.CONVERGED
    return ServiceProof(
        service=target.service, app_id=target.app_id, digest=target.digest, proof=proof,
        rollout_why=rollout[0] if rollout else None, rollout_detail=rollout[1] if rollout else "",
        clusters=clusters)
