"""The one judge: what a snapshot proves about a service on each expected cluster.

Owns ``judge``, the single pure function that every claim of success asks: the plan's
verdict ("no changes" / GO / drift), the convergence gate after an apply,
``plan --detailed-exitcode``, and watch's output and metrics. A second opinion anywhere
else is a bug, so the rules live here and nowhere else:

- a cluster proves a service converged only by answering with the pinned digest as its
  ``resolvedDigest`` (never a tag), ``runtimeState`` RUNNING, at least one required replica
  and every required replica observed, healthy and verified, none failed, and the declared
  egress in effect (a destination the cluster's operator dropped is *not* in effect);
- the control plane's rollout for the service must be to the pinned digest and say
  ``succeeded``: a rollout still pending or deploying has not finished, a failed or
  mismatched one has not converged, and one with no status has proven nothing;
- a cluster that is silent, or answers without the facts above, leaves the service
  **unproven**, never converged: missing evidence is not evidence of convergence;
- issue 34: a service held to checks (``Target.checks``, from ``kind: Verification``)
  is proven on a cluster only when the cluster proves the digest *and* every check passed
  there for that digest and rollout generation (``core.verification.judge_checks``); a
  check that could not be read (missing, unknown, bound to another digest or generation)
  leaves the cluster **unproven** (``check_unknown``), exactly like a silent cluster --
  never a pass; a failing check is the cluster's **stated** failure (``check_failed``),
  naming the check and the value;
- a cluster that is not converged *and says why* (a ``lastError``, an operator's dropped
  egress, a failing check) has **stated** its failure (``ClusterProof.stated``): what
  apply will meet, known before it sends anything (a plan's risks, ``core.planning``); a rollout the
  control plane reports failed or mismatched is **terminal** (``ServiceProof.terminal``):
  waiting cannot prove it, so the convergence gate stops polling it.

Each change kind owns its part of a cluster's proof (``Kind.assess``, asked in turn
through ``core.kinds.PROVERS``: the release's, the digest, runtime state and replicas;
the egress's, the egress in effect; the route's, the gateway routes in effect with their
priority and target and no deleted one still served) and the fields of ``Target`` it
fills (``Kind.expect``, through ``core.planning.target_of``); the judge owns the rest
(silence, the runtime record, the rollout). Its vocabulary (``Why``) is ``core.whys``',
re-exported here; which reasons are unproven, the kinds say (``core.kinds.UNPROVEN_WHYS``).

Also owns ``expected_clusters`` (settings ∪ DNS ∪ rollout targets, CONTRACT §3).

Must not: do I/O, look at the clock, or render; reasons are plain sentences built from
sanitized strings, codes are the ``Why`` enum.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from pydantic import ConfigDict

from reconciler.core.kinds import PROVERS, UNPROVEN_WHYS
from reconciler.core.kinds.egress import egress_key
from reconciler.core.live import (
    FAILED_STATUSES,
    IN_PROGRESS_STATUSES,
    LeanModel,
    LiveService,
    Observation,
    ObservationKind,
    ReadFailure,
)
from reconciler.core.sanitize import safe
from reconciler.core.targets import Target
from reconciler.core.values import LeanValue, lean_config
from reconciler.core.verification import Outcome, judge_checks
from reconciler.core.whys import Assessment, Why

__all__ = [
    "SUCCEEDED_STATUSES", "UNPROVEN_WHYS", "ClusterProof", "Proof", "ServiceProof", "Target",
    "Why", "egress_key", "expected_clusters", "judge", "judge_cluster",
]


class _Model(LeanModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Proof(StrEnum):
    """What the evidence proves. Only ``converged`` is ever a pass."""

    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"  # the evidence shows something else is running
    UNPROVEN = "unproven"  # the evidence is missing or incomplete


#: A finished rollout: ``rolled-back`` is how a rollback's rollout succeeds (seed 003) --
#: for a rollout whose mode is ``rollback`` only.
SUCCEEDED_STATUSES = frozenset({"succeeded", "rolled-back"})

@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterProof(LeanValue):
    # A lean value (``core.values``): a 10,000 × 10 plan holds one per (service, cluster).
    # Read back from a saved plan as the models are (unknown fields refused), not strictly.
    __pydantic_config__: ClassVar[ConfigDict] = lean_config(strict=False)

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
        if self.why in (Why.EGRESS_DROPPED, Why.CHECK_FAILED):
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


_Assessment = Assessment


def judge_cluster(observation: Observation, target: Target, *,
                  generation: int | None = None) -> ClusterProof:
    """One cluster's answer about one app, against what ``target`` requires (and, for
    its checks, the control plane's rollout ``generation`` when known)."""
    return _proof(observation.cluster_id,
                  _checked(observation, target, _assess(observation, target), generation))


def _checked(observation: Observation, target: Target, assessment: _Assessment,
             generation: int | None) -> _Assessment:
    """Issue 34: an assessment that proves the release, held to the target's checks on
    this cluster. Judged per cluster (results differ where runtimes are shared); only
    a cluster otherwise proven is asked -- what it runs comes first."""
    if not target.checks or assessment[0] is not None:
        return assessment
    verdict = judge_checks(target.checks, observation.checks, digest=target.digest,
                           generation=generation)
    if verdict.outcome is Outcome.PASS:
        return assessment
    why = Why.CHECK_FAILED if verdict.outcome is Outcome.FAIL else Why.CHECK_UNKNOWN
    return why, verdict.detail, assessment[2], assessment[3]


#: Proofs interned by what they say: a 10,000 × 10 plan's 100,000 cluster proofs are a
#: few dozen distinct values (cluster × digest × reason), and a frozen value may be
#: shared -- built once, walked once by a renderer. Bounded like ``safe``'s memo.
_PROOFS: dict[tuple[str, _Assessment], ClusterProof] = {}
_PROOFS_MAX = 50_000


def _proof(cluster: str, assessment: _Assessment) -> ClusterProof:
    key = (cluster, assessment)
    made = _PROOFS.get(key)
    if made is None:
        if len(_PROOFS) >= _PROOFS_MAX:
            _PROOFS.clear()
        made = _PROOFS[key] = _new_proof(cluster, assessment)
    return made


def _new_proof(cluster: str, assessment: _Assessment) -> ClusterProof:
    why, detail, running, last_error = assessment
    if why is None:
        return ClusterProof(cluster=cluster, proof=Proof.CONVERGED, running=running,
                            last_error=last_error)
    proof = Proof.UNPROVEN if why in UNPROVEN_WHYS else Proof.NOT_CONVERGED
    return ClusterProof(cluster=cluster, proof=proof, why=why, detail=detail,
                        running=running, last_error=last_error)


def _assess(observation: Observation, target: Target) -> _Assessment:
    """``judge_cluster``'s rules. An answer's assessment depends on its runtime alone
    (for one target), never on which cluster sent it."""

    def verdict(why: Why, detail: str, running: str | None = None,
                last_error: str | None = None) -> _Assessment:
        return why, detail, running, last_error

    if observation.kind is ObservationKind.SILENT:
        return verdict(Why.SILENT, f"gave no evidence ({safe(observation.reason)})")
    runtime = observation.runtime
    if observation.kind is ObservationKind.NO_RECORD or runtime is None:
        return verdict(Why.NO_RECORD, "has no runtime record for this app")
    # Each kind's part of the proof, in turn (``core.kinds.PROVERS``): the release (what
    # runs, and how), then the egress in effect, then the gateway routes.
    last_error = safe(runtime.last_error) if runtime.last_error else None
    running = runtime.resolved_digest
    for kind in PROVERS:
        found = kind.assess(observation, target, running, last_error)
        if found is not None:
            return found
    return None, "", running, last_error


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
          expected: Iterable[str], observations: Iterable[Observation], *,
          pending_only: bool = False) -> ServiceProof:
    """The judgement of one service: converged only when the control plane's rollout is to
    the pinned digest and succeeded, and every ``expected`` cluster proves it. A cluster
    with no observation is silent. Not converged wins over unproven when both occur.

    ``pending_only``: the same judgement, but the returned ``clusters`` hold only the
    clusters not converged (what ``pending()`` returns; ``stated()`` and ``reasons()``
    read no others), for a caller that keeps nothing else -- the planner's second look
    at a service, against what the control plane intends now, would otherwise build a
    proof per converged cluster only to drop it (``docs/scaling.md`` round 4)."""
    by_cluster = {o.cluster_id: o for o in observations}
    # Clusters running the same app usually send one and the same (shared) runtime:
    # judged once per runtime, named per cluster.
    assessed: dict[int, _Assessment] = {}
    # Issue 34: check results count for the control plane's current rollout only.
    generation = live.deployment.rollout_generation \
        if isinstance(live, LiveService) and live.deployment is not None else None

    # One pass over the expected clusters, the common case (an answer whose runtime
    # another cluster already sent) inline: a 10,000 × 10 plan asks this 200,000 times.
    checks = target.checks
    clusters: list[ClusterProof] = []
    names = sorted(set(expected))
    for cluster in names:
        observation = by_cluster.get(cluster)
        runtime = observation.runtime if observation is not None else None
        if observation is None or observation.kind is not ObservationKind.ANSWERED \
                or runtime is None:
            clusters.append(judge_cluster(observation or Observation(
                cluster_id=cluster, kind=ObservationKind.SILENT, reason="never probed"),
                target, generation=generation))
            continue
        assessment = assessed.get(id(runtime))
        if assessment is None:
            assessment = assessed[id(runtime)] = _assess(observation, target)
        if checks:  # check results are the cluster's own, never shared with its runtime
            assessment = _checked(observation, target, assessment, generation)
        if pending_only and assessment[0] is None:
            continue  # converged: proven, and not kept
        clusters.append(_proof(cluster, assessment))
    rollout = _judge_rollout(live, target.digest)
    proofs = {c.proof for c in clusters}
    if rollout is not None:
        proofs.add(Proof.UNPROVEN if rollout[0] in UNPROVEN_WHYS else Proof.NOT_CONVERGED)
    if not names:
        proofs.add(Proof.UNPROVEN)  # no expected cluster at all proves nothing
    proof = Proof.NOT_CONVERGED if Proof.NOT_CONVERGED in proofs else \
        Proof.UNPROVEN if Proof.UNPROVEN in proofs else Proof.CONVERGED
    return ServiceProof(
        service=target.service, app_id=target.app_id, digest=target.digest, proof=proof,
        rollout_why=rollout[0] if rollout else None, rollout_detail=rollout[1] if rollout else "",
        clusters=tuple(clusters))
