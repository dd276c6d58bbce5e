"""Promotion between environments, as blockers with a time.

Owns the rules that make a promotion into an environment NO-GO, and say *when* it can go:

- ``not_proven_upstream``: the previous environment does not prove the digest **now**.
  Proof is the one judge's (``core.evidence.judge``) on the previous environment's own
  snapshot, against the digest being promoted: its control plane's current rollout is to
  that digest and succeeded, and every expected cluster there proves it. A control plane
  that says ``succeeded`` while a cluster runs the old digest proves nothing; the message
  names the cluster.
- ``not_soaked``: proven, but not *continuously* for the environment's ``soak``
  (``soak_clock``). The clock starts at the latest of: when the previous environment's
  rollout to that digest succeeded (the rollout status's ``updatedAt``; the release's
  ``lastPromotedAt`` when the control plane sends none), only while that rollout is still
  the current one (a rollback, or a newer rollout, even of the same digest, starts it
  again); and each expected cluster's own [ext] ``runtime.healthySince`` -- since when it
  has run the digest with every replica healthy, without a gap (an outage, unhealthy
  replicas, a redeploy restart it). Continuity is the clusters' statement: a cluster
  that proves the digest but does not state it leaves the soak unknown, and the promotion
  waits, naming that cluster and field. A control-plane time that is not a positive
  number, is after ``now``, or is before the rollout was created (the release's first
  observation when the rollout gives no creation time) is unknown too, never "soaked";
  so is a cluster's ``healthySince`` that is not positive or is after ``now``.
  Issue 34: the soak counts *verified* time. The previous environment proves the digest
  only when its clusters also pass the checks its ``Verification`` documents hold the
  service to (the one judge, ``core.verification``): while one cluster fails a check, or
  a check cannot be read, the digest is not proven there and the clock does not run (the
  promotion waits, ``not_proven_upstream``, naming the cluster, the check and the
  value). A check is measured when asked; a failure that healed between two asks is seen
  only through the query's own window (``max_over_time(...[<soak>])``: the metrics
  history is the evidence of continuity, docs/verification.md).
- ``window_closed`` (``core.windows``) and ``frozen`` (``Freeze`` documents), which an
  emergency override (``--override-window REASON``) lifts, said in the plan's notes.

Which changes are promotions: ``promote`` and ``create`` (a release arriving in this
environment). A ``rollback`` goes back to a release this environment accepted before and
is never held here: it is how an incident ends.

Also owns ``Gate``: the same assessment for one service and a candidate digest, which
``reconcile status`` and ``reconcile promote`` show without making a plan.

Pure: no I/O, no clock (``now_ms`` is given).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from reconciler.core import windows
from reconciler.core.codes import BlockerCode
from reconciler.core.evidence import Proof, ServiceProof, Target, judge
from reconciler.core.kinds.release import PromoteChange, RollbackChange
from reconciler.core.live import EgressRule, LiveService, Observation, ReadFailure
from reconciler.core.pipeline import (
    LAST_INSTANT_MS,
    Environment,
    Freeze,
    eligible_shown,
    show_duration,
)
from reconciler.core.plans import Action, Blocker, Plan
from reconciler.core.sanitize import safe

#: Changes that bring a release into the environment (held by soak, windows, freezes).
PROMOTING = frozenset({Action.PROMOTE, Action.CREATE})


@dataclass(frozen=True)
class UpstreamService:
    """What the previous environment holds for one service (matched by name): the
    judge's inputs except the digest, which is the one being promoted."""

    app_id: str
    egress: tuple[EgressRule, ...] | None
    live: LiveService | ReadFailure | None
    expected: tuple[str, ...]
    observations: tuple[Observation, ...]
    pinned: str | None = None  # the digest the previous environment's repo pins
    tag: str | None = None
    version: str | None = None
    #: Issue 34: the checks the previous environment holds the service to (its
    #: ``Verification`` documents); their results ride on ``observations``.
    checks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Upstream:
    """The previous environment as read for this plan. ``error``: it could not be read
    at all (every promotion is then not proven upstream, with that reason)."""

    name: str
    services: Mapping[str, UpstreamService] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Gate:
    """One service's candidate digest against the environment's rules at ``now``."""

    service: str
    digest: str
    proof: ServiceProof | None  # the judge on the previous environment, for this digest
    #: ms: since when the previous environment has proven it without a gap (``soak_clock``)
    since: int | None
    eligible_at: int | None  # ms: when soak, windows and freezes all allow it (None: unknown)
    blockers: tuple[Blocker, ...]
    #: whose word ``since`` is, for the sentences that quote it (``SoakClock.source``)
    source: str | None = None

    @property
    def ready(self) -> bool:
        return not self.blockers


@dataclass(frozen=True)
class SoakClock:
    """Since when an environment has proven a digest without a gap, and on whose word.

    ``since`` (ms) is None when it cannot be known; ``source`` then says why and what
    would make it known (which cluster, which field), else whose time it is
    (``by every cluster's healthySince (sn2 the latest)``)."""

    since: int | None
    source: str


def _at(ms: int) -> str:
    # clamped: a control plane's time far in the future is said, never an OverflowError
    at = eligible_shown(ms)
    return f"{datetime.fromtimestamp(at / 1000, UTC):%Y-%m-%d %H:%M:%S}Z"


def short(digest: str) -> str:
    return digest[:19] + "…" if len(digest) > 20 else digest


def _stamp(ms: int) -> str:
    return f"{datetime.fromtimestamp(ms / 1000, UTC):%Y-%m-%dT%H:%M:%S}Z"


def _control_plane_since(live: LiveService | ReadFailure | None, digest: str, now_ms: int,
                         ) -> tuple[int | None, str]:
    """The control plane's time of the current rollout's success, validated, and the field
    it came from -- or None and why it is not a time to count from."""
    if not isinstance(live, LiveService) or live.current_digest != digest:
        return None, f"the control plane's current rollout is not to {short(digest)}"
    status = live.rollout_status
    rollout = live.deployment
    value: int | None
    if status is not None and rollout is not None and status.rollout_id == rollout.rollout_id \
            and status.updated_at is not None:
        value, field_name = status.updated_at, "the rollout status's updatedAt"
    else:
        release = live.release_by_digest(digest)
        value = release.last_promoted_at if release is not None else None
        field_name = "the release's lastPromotedAt"
    if value is None:
        return None, ("the control plane gives no time its rollout succeeded (updatedAt, "
                      "lastPromotedAt)")
    release = live.release_by_digest(digest)
    created = rollout.created_at if rollout is not None and rollout.created_at > 0 else (
        release.first_observed_at if release is not None else 0)
    if value <= 0:
        return None, f"{field_name} is {value}, not a time"
    if value > now_ms:
        return None, f"{field_name} ({_stamp(value)}) is in the future"
    if created > 0 and value < created:
        return None, (f"{field_name} ({_stamp(value)}) is before the rollout was created "
                      f"({_stamp(created)})")
    return value, field_name


def soak_clock(live: LiveService | ReadFailure | None, digest: str,
               expected: Sequence[str], observations: Sequence[Observation],
               now_ms: int) -> SoakClock:
    """Since when ``digest`` has been proven without a gap: the latest of the control
    plane's rollout success and every expected cluster's ``healthySince`` (see the
    module). Only meaningful once the judge proves ``digest`` on every expected cluster."""
    cp_since, cp_field = _control_plane_since(live, digest, now_ms)
    if cp_since is None:
        return SoakClock(None, f"{cp_field}: the soak cannot be measured")
    by_cluster = {o.cluster_id: o for o in observations}
    stated: list[tuple[int, str]] = []
    for cluster in expected:
        observation = by_cluster.get(cluster)
        said = observation.healthy_since if observation is not None else None
        if said is None:
            return SoakClock(None, (
                f"cluster {safe(cluster, 100)} does not state runtime.healthySince (since "
                "when it has run the digest with every replica healthy, without a gap): "
                "the soak cannot be measured until it does"))
        if said <= 0 or said > now_ms:
            shown = str(said) if said <= 0 else f"{_stamp(said)}, in the future"
            return SoakClock(None, (
                f"cluster {safe(cluster, 100)} states runtime.healthySince {shown}: not a "
                "time to count from; the soak cannot be measured until it states one"))
        stated.append((said, cluster))
    latest = max(stated, default=None)
    if latest is None or latest[0] <= cp_since:
        clusters = " (every cluster healthy since before)" if stated else ""
        return SoakClock(cp_since, f"by the control plane's rollout success "
                         f"({cp_field}){clusters}")
    return SoakClock(latest[0], f"by every cluster's healthySince "
                     f"({safe(latest[1], 100)} the latest)")


def _upstream_proof(upstream: Upstream, service: str, digest: str,
                    ) -> tuple[ServiceProof | None, Blocker | None]:
    def blocked(message: str, cluster: str | None = None) -> Blocker:
        return Blocker(code=BlockerCode.NOT_PROVEN_UPSTREAM, service=service, cluster=cluster,
                       message=f"{service}: {upstream.name} does not prove {short(digest)}: "
                       f"{message}")

    if upstream.error is not None:
        return None, blocked(f"{upstream.name} could not be read ({safe(upstream.error)})")
    facts = upstream.services.get(service)
    if facts is None:
        return None, blocked(f"{upstream.name} declares no service {service!r}")
    proof = judge(Target(service=service, app_id=facts.app_id, digest=digest,
                         egress=facts.egress, checks=facts.checks), facts.live,
                  facts.expected, facts.observations)
    if proof.proof is Proof.CONVERGED:
        return proof, None
    pending = proof.pending()
    reasons = proof.reasons()
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3
                                       else "")
    if isinstance(facts.live, LiveService) and facts.live.current_digest not in (None, digest):
        shown = (f"its current rollout is {short(facts.live.current_digest or '')} "
                 f"(rolled back or moved on); " + shown)
    return proof, blocked(shown, pending[0].cluster if pending else None)


def gate(service: str, digest: str, environment: Environment, upstream: Upstream | None,
         freezes: Sequence[tuple[Freeze, str]], now_ms: int, *,
         with_holds: bool = True) -> Gate:
    """Soak (with the upstream proof), windows and freezes (``with_holds``) for promoting
    ``service`` to ``digest`` into ``environment`` at ``now_ms``; ``eligible_at`` is the
    first instant all of them allow it, as far as the rules can know."""
    blockers: list[Blocker] = []
    proof: ServiceProof | None = None
    since: int | None = None
    source: str | None = None
    eligible: int | None = now_ms
    if upstream is not None:
        proof, unproven = _upstream_proof(upstream, service, digest)
        if unproven is not None:
            blockers.append(unproven)
            eligible = None
        else:
            facts = upstream.services[service]
            clock = soak_clock(facts.live, digest, facts.expected, facts.observations, now_ms)
            since, source = clock.since, clock.source
            soak_ms = environment.soak_seconds * 1000
            if soak_ms and since is None:
                blockers.append(Blocker(
                    code=BlockerCode.NOT_SOAKED, service=service,
                    message=f"{service}: {short(digest)} on {upstream.name}: {clock.source} "
                    f"(soak {environment.soak})"))
                eligible = None
            elif soak_ms and since is not None and now_ms - since < soak_ms:
                ready = since + soak_ms
                blockers.append(Blocker(
                    code=BlockerCode.NOT_SOAKED, service=service,
                    message=f"{service}: {short(digest)} proven on {upstream.name} "
                    f"{show_duration((now_ms - since) / 1000)} of {environment.soak} "
                    f"(since {_stamp(since)} {clock.source}); eligible {_at(ready)}"))
                eligible = ready
    if with_holds:
        blockers.extend(b.model_copy(update={"service": service, "services": (service,)})
                        for b in environment_holds(environment, freezes, now_ms))
        eligible = _eligible_after_holds(environment, freezes, eligible)
    return Gate(service=service, digest=digest, proof=proof, since=since,
                eligible_at=eligible, blockers=tuple(blockers), source=source)


def _eligible_after_holds(environment: Environment, freezes: Sequence[tuple[Freeze, str]],
                          start: int | None) -> int | None:
    """The first instant at or after ``start`` when no freeze and no window holds."""
    at = start
    for _ in range(64):
        if at is None:
            return None
        moved = False
        for freeze, _path in freezes:
            if freeze.covers(environment.name) and freeze.holds_at(at):
                end = freeze.until_ms
                if end is None or end >= LAST_INSTANT_MS:
                    return None  # until it is lifted: no time can be said
                at, moved = end, True
        blocked = windows.closed(environment.windows, datetime.fromtimestamp(at / 1000, UTC))
        if blocked is not None:
            at = None if blocked.eligible is None else int(blocked.eligible.timestamp() * 1000)
            moved = True
        if not moved:
            return at
    return at


def environment_holds(environment: Environment, freezes: Sequence[tuple[Freeze, str]],
                      now_ms: int) -> tuple[Blocker, ...]:
    """What holds every promotion into ``environment`` at ``now_ms``: open freezes and
    closed windows (service-less blockers; ``promotion_blockers`` names the services)."""
    out: list[Blocker] = []
    for freeze, path in freezes:
        if freeze.covers(environment.name) and freeze.holds_at(now_ms):
            out.append(Blocker(code=BlockerCode.FROZEN,
                               message=f'{environment.name} is frozen: "{safe(freeze.reason)}" '
                               f"{freeze.shown_until} ({safe(path)}; `reconcile "
                               "unfreeze` ends it)"))
    blocked = windows.closed(environment.windows, datetime.fromtimestamp(now_ms / 1000, UTC))
    if blocked is not None:
        out.append(Blocker(code=BlockerCode.WINDOW_CLOSED,
                           message=f"{environment.name}: {windows.describe(blocked)}"))
    return tuple(out)


#: The blockers an emergency override (``--override-window REASON``) lifts.
OVERRIDABLE = frozenset({BlockerCode.WINDOW_CLOSED, BlockerCode.FROZEN})


def promotion_blockers(plan: Plan, environment: Environment, upstream: Upstream | None,
                       freezes: Sequence[tuple[Freeze, str]], now_ms: int,
                       override: str | None = None) -> tuple[tuple[Blocker, ...], tuple[str, ...]]:
    """The blockers the environment's rules add to ``plan``'s promotions, and the notes
    (an override, and what it lifted). Freezes and windows are said once, naming every
    promotion they hold; soak and proof once per service."""
    promoting = [c for c in plan.changes if isinstance(c, PromoteChange | RollbackChange)
                 and c.action in PROMOTING and c.release_after.digest]
    if not promoting:
        return (), ()
    per_service: list[Blocker] = []
    for change in promoting:
        assert change.release_after is not None and change.release_after.digest is not None
        found = gate(change.service, change.release_after.digest, environment, upstream,
                     (), now_ms, with_holds=False)
        per_service.extend(found.blockers)
    names = tuple(sorted({c.service for c in promoting}))
    holds = [b.model_copy(update={"services": names})
             for b in environment_holds(environment, freezes, now_ms)]
    notes: list[str] = []
    if override and holds:
        lifted = "; ".join(f"{b.code.value}: {b.message}" for b in holds)
        notes.append(f"override-window: {safe(override)} (lifted: {lifted})")
        holds = []
    elif override:
        notes.append(f"override-window: {safe(override)} (nothing to lift)")
    return tuple(per_service) + tuple(holds), tuple(notes)


def next_eligible(plan: Plan, environment: Environment, upstream: Upstream | None,
                  freezes: Sequence[tuple[Freeze, str]], now_ms: int,
                  override: str | None = None) -> int | None:
    """The earliest time after ``now_ms`` at which a promotion of ``plan`` held now
    becomes eligible (ms), as far as the rules can know; None when none is held with a
    time. The watcher reads the live side again then (a soak ends, a deny window closes)
    instead of waiting for its next resync."""
    found: list[int] = []
    for change in plan.changes:
        if not isinstance(change, PromoteChange | RollbackChange) \
                or change.action not in PROMOTING or not change.release_after.digest:
            continue
        held = gate(change.service, change.release_after.digest, environment, upstream,
                    () if override else freezes, now_ms, with_holds=not override)
        if held.blockers and held.eligible_at is not None and held.eligible_at > now_ms:
            found.append(held.eligible_at)
    return min(found) if found else None
