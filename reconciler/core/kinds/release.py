"""The release kind: ``promote`` and ``rollback`` of a service to its pinned digest.

Owns the two change models, the diff (which release the repo pins against what the
control plane lists and runs: promotion or rollback, and every reason not to), the
preconditions (the rollout generation and id, compared and swapped), the idempotency
key (the target release against those), the release's part of the judge's proof (a
cluster runs the pinned digest, RUNNING, every required replica ready), its part of the
staleness rule, its summary and its part of a review's modification.

Must not send anything (``shell.applying`` does) or judge the rollout as a whole
(``core.evidence``). Pure: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import ClassVar, Literal

from reconciler.core import greenfield
from reconciler.core import preflight as pf
from reconciler.core.codes import BlockerCode, ReasonCode
from reconciler.core.desired import ReleaseEvidencePolicy, Service
from reconciler.core.findings import Blocker
from reconciler.core.kinds.base import (
    Action,
    ChangeBase,
    Diff,
    Kind,
    Preconditions,
    ReleaseRef,
    idempotency_key,
    short,
)
from reconciler.core.live import (
    IN_PROGRESS_STATUSES,
    ImageRelease,
    LiveService,
    LiveSnapshot,
    Observation,
)
from reconciler.core.sanitize import safe
from reconciler.core.targets import Target
from reconciler.core.whys import Assessment, Why


class PromoteChange(ChangeBase):
    """Roll the service out to a release newer than (or never) accepted before."""

    action: Literal[Action.PROMOTE]
    release_before: ReleaseRef | None = None
    release_after: ReleaseRef


class RollbackChange(ChangeBase):
    """Roll the service back to a release accepted before."""

    action: Literal[Action.ROLLBACK]
    release_before: ReleaseRef | None = None
    release_after: ReleaseRef


ReleaseChange = PromoteChange | RollbackChange


def release_ref(release: ImageRelease | None, digest: str | None) -> ReleaseRef:
    if release is None:
        return ReleaseRef(digest=digest)
    return ReleaseRef(
        release_id=release.id,
        digest=release.digest,
        tags=release.tags,
        reference=f"{release.registry_host}/{release.repository}@{release.digest}",
    )


def diff(svc: Service, live: LiveService, policy: ReleaseEvidencePolicy) -> Diff:
    """The release change ``svc`` needs against ``live`` (none when the pinned digest is
    the current rollout: whether it converged is the judge's word), and every reason the
    pin cannot be planned or must not be stacked on the current rollout."""
    found = Diff()
    pinned = svc.release.digest
    target = live.release_by_digest(pinned)
    name = svc.name
    if target is None:
        found.blockers.append(Blocker(
            code=BlockerCode.RELEASE_NOT_OBSERVED, service=name,
            message=f"{name}: the pinned digest {pinned} is not a release the control plane "
            f"observed for {svc.release.registry_host}/{svc.release.repository}"))
        return found
    if (target.registry_host, target.repository) != (svc.release.registry_host,
                                                     svc.release.repository):
        found.blockers.append(Blocker(
            code=BlockerCode.RELEASE_REPOSITORY_MISMATCH, service=name,
            message=f"{name}: release {short(pinned)} lives in "
            f"{safe(target.registry_host)}/{safe(target.repository)}, not "
            f"{svc.release.registry_host}/{svc.release.repository}"))
    if svc.release.tag is not None and svc.release.tag not in target.tags:
        holder = next((r for r in live.releases if svc.release.tag in r.tags), None)
        where = f"tag {svc.release.tag} is on {holder.digest}" if holder else \
            f"tag {svc.release.tag} was never observed"
        found.blockers.append(Blocker(
            code=BlockerCode.TAG_DIGEST_MISMATCH, service=name,
            message=f"{name}: pinned tag and digest disagree: {where}, "
            f"but the pin is {pinned}"))
    if svc.release.media_type is not None and svc.release.media_type != target.media_type:
        found.blockers.append(Blocker(
            code=BlockerCode.MEDIA_TYPE_MISMATCH, service=name,
            message=f"{name}: pinned media type {svc.release.media_type} but the release "
            f"was observed as {safe(target.media_type)}"))
    current_digest = live.current_digest
    status = live.rollout_status
    if current_digest == pinned:
        return found  # whether it converged is the judge's word (``core.evidence``)
    current = live.release_by_digest(current_digest) if current_digest else None
    if current is None and current_digest is not None and target.accepted_at is not None:
        # Unlisted current release: an accepted pin may be older or newer than what
        # runs. Guessing "promote" would hide a rollback from the review.
        found.blockers.append(Blocker(
            code=BlockerCode.CURRENT_RELEASE_UNLISTED, service=name,
            message=f"{name}: the current rollout's digest {current_digest} is not among "
            f"the releases the control plane lists, so pinning {short(pinned)} (accepted "
            "before) cannot be told apart as promotion or rollback"))
        return found
    newer = current is None or target.first_observed_at > current.first_observed_at
    is_rollback = target.accepted_at is not None and not newer and live.deployment is not None
    action = Action.ROLLBACK if is_rollback else Action.PROMOTE
    if status is not None and status.status in IN_PROGRESS_STATUSES:
        found.blockers.append(Blocker(
            code=BlockerCode.ROLLOUT_IN_PROGRESS, service=name,
            message=f"{name}: rollout {safe(status.rollout_id)} (generation "
            f"{status.rollout_generation}) is still {safe(status.status)}; a {action.value} "
            f"must not be stacked on an unfinished rollout"))
    if live.deployment is not None and status is None:
        found.blockers.append(Blocker(
            code=BlockerCode.ROLLOUT_STATUS_UNKNOWN, service=name,
            message=f"{name}: rollout {safe(live.deployment.rollout_id)} has no status; "
            f"whether it finished is unknown"))
    pre = Preconditions(
        rollout_generation=live.rollout_generation,
        rollout_id=live.deployment.rollout_id if live.deployment else None,
    )
    key = idempotency_key(action, svc.service_id, target.id, pre)
    before, after = release_ref(current, current_digest), release_ref(target, pinned)
    if is_rollback:
        found.changes.append(RollbackChange(
            action=Action.ROLLBACK, service=name, service_id=svc.service_id,
            app_id=svc.app_id, reason=ReasonCode.PREVIOUSLY_ACCEPTED,
            summary=(f"roll {name} back to {', '.join(target.tags) or short(pinned)} "
                     f"({short(pinned)}), accepted before"),
            preconditions=pre, idempotency_key=key, release_before=before,
            release_after=after))
        return found
    found.changes.append(PromoteChange(
        action=Action.PROMOTE, service=name, service_id=svc.service_id, app_id=svc.app_id,
        reason=ReasonCode.NEVER_ACCEPTED if target.accepted_at is None
        else ReasonCode.NEWER_THAN_CURRENT,
        summary=f"promote {name} to {', '.join(target.tags) or short(pinned)} "
        f"({short(pinned)})",
        preconditions=pre, idempotency_key=key, release_before=before, release_after=after))
    if policy is ReleaseEvidencePolicy.EVERY_PROMOTION:
        _promotion_evidence(svc, found)
    return found


def _promotion_evidence(svc: Service, found: Diff) -> None:
    """``policy.releaseEvidence: every-promotion``: the promotion's release evidence
    must be complete and bound to the pinned digest. Checked here, never sent: the
    control plane's preflight accepts greenfield requests only (anything else is
    WOULD_REPLACE_EXISTING_STATE)."""
    local = greenfield.evidence_blockers(svc.release, require=True)
    for blocker in local:
        found.blockers.append(Blocker(
            code=BlockerCode.RELEASE_EVIDENCE_REQUIRED, service=svc.name,
            upstream_code=blocker.code,
            message=f"{svc.name}: {blocker.code}: {blocker.message} (policy "
            "releaseEvidence: every-promotion; checked locally)"))
    found.preflights.append(pf.ServicePreflight(
        service=svc.name, service_id=svc.service_id, purpose="promotion",
        status=pf.Status.LOCAL_ONLY, local_blockers=local, blocked=bool(local),
        problem="checked locally against the pinned digest: the control plane's "
        "preflight accepts greenfield requests only"))


def assess(observation: Observation, digest: str) -> Assessment | None:
    """The release's part of the judge's proof of one answered cluster: it proves it runs
    ``digest`` (``resolvedDigest``, never a tag), RUNNING, with at least one required
    replica and every one observed, healthy and verified, none failed. None: proven so
    far (the judge asks the other kinds' parts next)."""
    runtime = observation.runtime
    assert runtime is not None
    last_error = safe(runtime.last_error) if runtime.last_error else None
    running = runtime.resolved_digest
    if running is None:
        return (Why.NO_DIGEST, "sent no resolvedDigest: it has not proven what it runs",
                None, last_error)
    if running != digest:
        return Why.OTHER_DIGEST, f"runs {safe(running)}, not {digest}", running, last_error
    if runtime.runtime_state != "RUNNING":
        return (Why.NOT_RUNNING, f"runtimeState is {safe(runtime.runtime_state)}", running,
                last_error)
    counts = runtime.replica_counts
    if counts is None:
        return Why.NO_REPLICA_COUNTS, "sent no replica counts", running, last_error
    if not (counts.required >= 1 and counts.required == counts.observed == counts.healthy
            == counts.verified and counts.failed == 0):
        return (Why.REPLICAS_SHORT,
                f"replicas required={counts.required} observed={counts.observed} "
                f"healthy={counts.healthy} verified={counts.verified} "
                f"failed={counts.failed}", running, last_error)
    return None


class _Release(Kind[ReleaseChange]):
    target = "release"
    models: ClassVar[tuple[type[ChangeBase], ...]] = (PromoteChange, RollbackChange)
    order = 2
    verbs: ClassVar[dict[Action, str]] = {Action.PROMOTE: "promote", Action.ROLLBACK: "rollback"}
    whys: ClassVar[Mapping[Why, str]] = {
        Why.NO_DIGEST:
            "The cluster sent no resolvedDigest (unproven).",
        Why.OTHER_DIGEST:
            "The cluster runs another digest (not converged).",
        Why.NOT_RUNNING:
            "runtimeState is not RUNNING (not converged).",
        Why.NO_REPLICA_COUNTS:
            "The cluster sent no replica counts (unproven).",
        Why.REPLICAS_SHORT:
            "Not every required replica is observed, healthy and verified, or one failed "
            "(not converged).",
    }
    unproven = frozenset({Why.NO_DIGEST, Why.NO_REPLICA_COUNTS})
    proves = 0  # what runs, and how: first
    codes: ClassVar[Mapping[StrEnum, str]] = {
        BlockerCode.RELEASE_NOT_OBSERVED:
            "The pinned digest is not a release the control plane observed.",
        BlockerCode.RELEASE_REPOSITORY_MISMATCH:
            "The pinned release lives in another repository.",
        BlockerCode.TAG_DIGEST_MISMATCH:
            "The pinned tag and digest disagree.",
        BlockerCode.MEDIA_TYPE_MISMATCH:
            "The pinned media type is not the release's.",
        BlockerCode.CURRENT_RELEASE_UNLISTED:
            "The current rollout's digest is not among the listed releases, so pinning a "
            "previously accepted release cannot be told apart as promotion or rollback.",
        BlockerCode.ROLLOUT_IN_PROGRESS:
            "A release change must not be stacked on an unfinished rollout.",
        BlockerCode.ROLLOUT_STATUS_UNKNOWN:
            "The current rollout has no status: whether it finished is unknown.",
        BlockerCode.RELEASE_EVIDENCE_REQUIRED:
            "`policy.releaseEvidence: every-promotion`: a promotion's release evidence is "
            "incomplete or not bound to the pinned digest (checked locally; the upstream "
            "preflight accepts greenfield requests only). The upstream code is kept "
            "(`upstream_code`).",
        ReasonCode.NEVER_ACCEPTED:
            "Promote: the pinned release was never accepted.",
        ReasonCode.NEWER_THAN_CURRENT:
            "Promote: the pinned release was observed after the current one.",
        ReasonCode.PREVIOUSLY_ACCEPTED:
            "Rollback: the pinned release was accepted before and is older than the current "
            "one.",
    }

    def shows(self, change: ReleaseChange, svc: LiveService) -> bool:
        return svc.current_digest == change.release_after.digest

    def moved(self, change: ReleaseChange, svc: LiveService, live: LiveSnapshot) -> str:
        pre = change.preconditions
        moved: list[str] = []
        if pre.rollout_generation != svc.rollout_generation:
            moved.append(f"rollout generation {pre.rollout_generation} → "
                         f"{svc.rollout_generation}")
        now_id = svc.deployment.rollout_id if svc.deployment else None
        if pre.rollout_id != now_id:
            moved.append(f"rollout id {pre.rollout_id} → {now_id}")
        return "; ".join(moved)

    def modification(self, base: ReleaseChange, head: ReleaseChange) -> dict[str, object]:
        return {"release_base": _at(base.release_after), "release_head": _at(head.release_after)}

    def assess(self, observation: Observation, target: Target, running: str | None,
               last_error: str | None) -> Assessment | None:
        return assess(observation, target.digest)


def _at(ref: ReleaseRef) -> dict[str, object]:
    return {"digest": ref.digest, "tags": ref.tags}


KIND = _Release()
