"""Which notifications an outcome earns, and whether each is new. Pure.

Owns the notification kinds (``Kind``) and, in ONE table (``KINDS``), everything a kind
means to the sinks: its words, severity, GitHub commit-status and deployment-status
state, and its CDEvents type. A new kind (reverted, held, ...) is one ``Kind`` member,
one ``KINDS`` row, and one rule in ``candidates``; no sink changes.

``decide(memory, plan=..., report=...)`` is the whole decision: the candidates for an
outcome (a plan made, an apply finished or refused), minus those already sent for that
commit and outcome (``Memory``: the keys sent, and the NO-GO still open per
environment), and the memory after them. The shell persists the memory in the state
directory, so a restart does not send again, and delivers (``shell.notifying``); the
engine says when (``engine``).

The rule: one notification per environment, commit and outcome -- never one per resync.
An apply that proves its changes (``applied``) also covers ``converged`` at that commit;
a NO-GO is keyed by its blockers' codes and subjects, so the same NO-GO at the same
commit is said once however often it flaps, and ``no_go_cleared`` follows only a NO-GO
that was said. A plan of a dirty tree, a worktree preview, or outside git earns nothing
(no commit to report about).

The way back from a failed release (issue 20, ``--on-gate-failure revert``) is decided
by ``decide_way_back`` from ``WayBack`` (what the engine's revert did): ``reverted`` on
the failed commit, keyed by the revert's own key (so a rerun, a second watcher of the
same state directory, or any number of resyncs say it once), then the rollback's proof
on the revert commit -- ``rollback_proven`` (covers ``applied``/``converged`` there) or
``rollback_not_proven`` (also: no revert could be made, e.g. no proven release). A plan
that pins a held digest is ``held`` rather than the bare ``no_go``: an on-call engineer
must know it is a known-bad release coming back (the hold's reason, where it was
written, how to lift it), not a cluster or a policy; it opens and clears like a NO-GO.

Must not: do I/O, read a clock, import a delivery library, or judge convergence (it
reads the plan's verdict and the gate's report: the one judge's words).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from reconciler.core import reverts
from reconciler.core.codes import BlockerCode
from reconciler.core.kinds.create import CreateChange
from reconciler.core.kinds.release import PromoteChange, RollbackChange
from reconciler.core.outcomes import ApplyReport, GateReport
from reconciler.core.plans import Action, Blocker, Plan, Verdict


class Kind(StrEnum):
    """What happened, as a notification says it; the value is the wire string (``on:``)."""

    PLANNED = "planned"  # a GO plan with changes waiting (watch without --apply)
    APPLIED = "applied"  # changes sent and proven on every expected cluster
    CONVERGED = "converged"  # the commit proven converged with nothing sent now
    APPLY_FAILED = "apply_failed"  # a change was refused, failed or is in doubt
    GATE_FAILED = "gate_failed"  # sent, but the gate did not prove every service
    NO_GO = "no_go"  # the plan became NO-GO
    NO_GO_CLEARED = "no_go_cleared"  # the NO-GO that was said is gone
    #: the plan is NO-GO because a service pins a held digest (a known-bad release back)
    HELD = "held"
    #: a failed release reverted in git: a commit landed (and the rollback sent), or a
    #: pull request opened (nothing rolled back until it is merged)
    REVERTED = "reverted"
    ROLLBACK_PROVEN = "rollback_proven"  # the rollback proven on every expected cluster
    #: the rollback was sent and is not proven, or no revert could be made at all
    ROLLBACK_NOT_PROVEN = "rollback_not_proven"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class KindSpec:
    """What a kind means to every sink (the one place to add a kind's words)."""

    title: str  # "gate failed": Slack's headline, the commit status's first words
    severity: Severity
    #: GitHub commit status: pending | success | failure | error
    commit_state: str
    #: GitHub deployment status (queued | in_progress | success | failure | error |
    #: inactive); None: this kind leaves the deployment as it is
    deployment_state: str | None
    #: CDEvents type; ``None``: one ``service.deployed``/``upgraded``/``rolledback`` event
    #: per service, chosen by its change's action (``cdevent_for``)
    cdevent: str | None
    #: other kinds at the same commit this one makes redundant (said once)
    covers: tuple[Kind, ...] = ()


#: CDEvents 0.4 types (cdevents.dev). Outcomes with no CDEvents subject use the spec's
#: custom-event form ``dev.cdeventsx.<tool>-<subject>.<predicate>.<version>``.
CDEVENT_DEPLOYED = "dev.cdevents.service.deployed.0.2.0"
CDEVENT_UPGRADED = "dev.cdevents.service.upgraded.0.2.0"
CDEVENT_ROLLEDBACK = "dev.cdevents.service.rolledback.0.2.0"
CDEVENT_ENVIRONMENT_MODIFIED = "dev.cdevents.environment.modified.0.2.0"
CDEVENT_INCIDENT_DETECTED = "dev.cdevents.incident.detected.0.2.0"
CDEVENT_INCIDENT_RESOLVED = "dev.cdevents.incident.resolved.0.2.0"
CDEVENT_PLANNED = "dev.cdeventsx.reconcile-plan.queued.0.1.0"
CDEVENT_CONVERGED = "dev.cdeventsx.reconcile-environment.converged.0.1.0"
#: a revert proposed as a pull request: nothing rolled back yet, so not ``rolledback``
CDEVENT_REVERT_PROPOSED = "dev.cdeventsx.reconcile-revert.proposed.0.1.0"

KINDS: Mapping[Kind, KindSpec] = {
    Kind.PLANNED: KindSpec("changes waiting", Severity.INFO, "pending", "queued",
                           CDEVENT_PLANNED),
    Kind.APPLIED: KindSpec("applied and proven", Severity.INFO, "success", "success", None,
                           covers=(Kind.CONVERGED,)),
    Kind.CONVERGED: KindSpec("converged", Severity.INFO, "success", "success",
                             CDEVENT_CONVERGED),
    Kind.APPLY_FAILED: KindSpec("apply failed", Severity.ERROR, "failure", "failure",
                                CDEVENT_INCIDENT_DETECTED),
    Kind.GATE_FAILED: KindSpec("gate failed", Severity.ERROR, "failure", "failure",
                               CDEVENT_INCIDENT_DETECTED),
    Kind.NO_GO: KindSpec("NO-GO", Severity.WARNING, "error", "error",
                         CDEVENT_INCIDENT_DETECTED),
    Kind.NO_GO_CLEARED: KindSpec("NO-GO cleared", Severity.INFO, "pending", None,
                                 CDEVENT_INCIDENT_RESOLVED),
    Kind.HELD: KindSpec("held release pinned (NO-GO)", Severity.WARNING, "error", "error",
                        CDEVENT_INCIDENT_DETECTED),
    # On the failed commit: it stays a failure, now naming its revert. ``None``: one
    # ``service.rolledback`` per reverted service (``cdevent_types``).
    Kind.REVERTED: KindSpec("release failed, reverted", Severity.WARNING, "failure", None,
                            None),
    # On the revert commit: what ``applied`` would say there, and more.
    Kind.ROLLBACK_PROVEN: KindSpec("rolled back and proven", Severity.INFO, "success",
                                   "success", CDEVENT_INCIDENT_RESOLVED,
                                   covers=(Kind.APPLIED, Kind.CONVERGED)),
    Kind.ROLLBACK_NOT_PROVEN: KindSpec("rollback NOT proven", Severity.ERROR, "failure",
                                       "failure", CDEVENT_INCIDENT_DETECTED),
}

#: A kind that refines another: a sink subscribed to the broader one (``on: [no_go]``,
#: written before ``held`` existed) receives it too, so no NO-GO goes unsaid.
REFINES: Mapping[Kind, Kind] = {Kind.HELD: Kind.NO_GO}


def subscribed(kinds: Iterable[str | Kind]) -> frozenset[Kind]:
    """The kinds an ``on:`` list receives: those named, and each kind refining one."""
    named = frozenset(Kind(k) for k in kinds)
    return named | {k for k, broader in REFINES.items() if broader in named}


#: The CDEvents type of an applied service, by its release action.
RELEASE_CDEVENTS: Mapping[Action, str] = {
    Action.CREATE: CDEVENT_DEPLOYED,
    Action.PROMOTE: CDEVENT_UPGRADED,
    Action.ROLLBACK: CDEVENT_ROLLEDBACK,
}

#: How many sent keys the memory keeps (oldest dropped first): far more commits than a
#: watcher sees between two restarts, bounded so the state file stays small.
MAX_KEYS = 500


@dataclass(frozen=True)
class ServiceLine:
    """One service as a notification names it."""

    service: str
    service_id: str = ""
    #: the change's action (promote, rollback, create, set_egress, set_grant), if any
    action: str | None = None
    digest: str | None = None  # the pinned digest (what the commit asks for)
    previous: str | None = None  # what ran before, for a release change
    #: the clusters concerned: every expected one, or those not proven for a failure
    clusters: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()  # why it is not proven / not applied (already safe)


@dataclass(frozen=True)
class RevertLine:
    """The revert a ``reverted``/``rollback_*`` notification is about."""

    key: str  # the revert's key (``core.reverts.key``; the commit's trailer)
    failed_commit: str  # the commit whose release failed
    commit: str | None = None  # the revert commit (on the branch, or the pull request's)
    landed: bool = False  # on the branch (else proposed, or not made)
    pull_url: str | None = None
    pull_number: int | None = None
    why_pr: str | None = None  # why a pull request rather than a commit


@dataclass(frozen=True)
class Notification:
    """One thing to tell: a kind, at a commit, in an environment, about services."""

    kind: Kind
    environment: str
    commit: str
    summary: str  # one sentence
    key: str  # what "already sent" is decided on
    services: tuple[ServiceLine, ...] = ()
    blockers: tuple[str, ...] = ()  # "code: message" for NO-GO
    control_plane_url: str = ""
    created_at: int = 0  # ms since the epoch: the plan's time (planning stays clockless)
    revert: RevertLine | None = None  # reverted, rollback_proven, rollback_not_proven

    @property
    def spec(self) -> KindSpec:
        return KINDS[self.kind]

    @property
    def incident(self) -> str:
        """The CDEvents incident this notification opens or resolves: a proven rollback
        resolves the failed commit's ``gate_failed`` incident (same subject id)."""
        if self.kind is Kind.ROLLBACK_PROVEN and self.revert is not None:
            return f"{self.environment}/{self.revert.failed_commit}/{Kind.GATE_FAILED.value}"
        return f"{self.environment}/{self.commit}/{self.kind.value}"

    def cdevent_types(self) -> tuple[tuple[str, ServiceLine | None], ...]:
        """(CDEvents type, subject service) of every event this notification becomes:
        one per released service for ``applied`` (an egress or grant only change is an
        ``environment.modified``), else one."""
        if self.spec.cdevent is not None:
            return ((self.spec.cdevent, self.services[0] if self.services else None),)
        if self.kind is Kind.REVERTED and (self.revert is None or not self.revert.landed):
            return ((CDEVENT_REVERT_PROPOSED, self.services[0] if self.services else None),)
        released = [(RELEASE_CDEVENTS[Action(s.action)], s) for s in self.services
                    if s.action is not None and Action(s.action) in RELEASE_CDEVENTS]
        return tuple(released) or ((CDEVENT_ENVIRONMENT_MODIFIED, None),)


@dataclass(frozen=True)
class Memory:
    """What was already said: the keys sent (oldest first, at most ``MAX_KEYS``) and, per
    environment, the key of the NO-GO said and not yet cleared."""

    sent: tuple[str, ...] = ()
    open_no_go: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "sent": list(self.sent), "open_no_go": dict(self.open_no_go)}

    @classmethod
    def from_json(cls, data: object) -> Memory:
        """The memory a state file holds; anything unreadable is an empty memory (at
        worst one notification is said again, never one lost)."""
        if not isinstance(data, dict) or data.get("version") != 1:
            return cls()
        sent = data.get("sent")
        open_no_go = data.get("open_no_go")
        keys = tuple(k for k in sent if isinstance(k, str)) if isinstance(sent, list) else ()
        opened = {str(k): str(v) for k, v in open_no_go.items()} \
            if isinstance(open_no_go, dict) else {}
        return cls(sent=keys[-MAX_KEYS:], open_no_go=opened)

    def remember(self, *keys: str) -> Memory:
        known = set(self.sent)
        added = tuple(k for k in dict.fromkeys(keys) if k not in known)
        return replace(self, sent=(self.sent + added)[-MAX_KEYS:])


@dataclass(frozen=True)
class Decision:
    """The notifications to deliver now (new ones only) and the memory after them."""

    new: tuple[Notification, ...]
    memory: Memory

    @property
    def changed(self) -> bool:
        return bool(self.new)


def key_of(kind: Kind, environment: str, commit: str, detail: str = "") -> str:
    return f"{environment}@{commit}:{kind.value}" + (f":{detail}" if detail else "")


def _short(digest: str | None) -> str:
    return digest[:19] if digest else "?"


def _lines(plan: Plan, report: ApplyReport | None = None) -> tuple[ServiceLine, ...]:
    """Every service the plan changes or does not prove, with its change and clusters."""
    changes = {c.service: c for c in plan.changes}
    failed = {} if report is None else {r.change.service: r for r in report.failures()}
    proofs = {p.service: p for p in plan.proofs}
    if report is not None and report.gate is not None:
        proofs.update({p.service: p for p in report.gate.proofs})
    expected = {e.service: e.expected_clusters for e in plan.evidence}
    names = sorted(set(changes) | {p.service for p in proofs.values() if not p.converged}
                   | set(failed))
    out = []
    for name in names:
        change = changes.get(name)
        proof = proofs.get(name)
        release = change.release_after if isinstance(
            change, PromoteChange | RollbackChange | CreateChange) else None
        before = change.release_before if isinstance(
            change, PromoteChange | RollbackChange) else None
        pending = tuple(c.cluster for c in proof.pending()) if proof is not None else ()
        reasons: list[str] = []
        if name in failed:
            result = failed[name]
            reasons.append(f"{result.outcome.value}: {result.detail}".rstrip(": "))
        if proof is not None and not proof.converged:
            reasons.extend(proof.reasons())
        out.append(ServiceLine(
            service=name, service_id=change.service_id if change is not None else "",
            action=change.action.value if change is not None else None,
            digest=(release.digest if release is not None and release.digest
                    else proof.digest if proof is not None else None),
            previous=before.digest if before is not None else None,
            clusters=pending or expected.get(name, plan.expected_clusters),
            reasons=tuple(reasons)))
    return tuple(out)


def _no_go_detail(plan: Plan) -> str:
    """What makes two NO-GOs the same: their blockers' codes and subjects (not messages,
    whose numbers and wording may move between two reads of the same cause)."""
    subjects = sorted({(b.code.value, b.service or "", b.cluster or "") for b in plan.blockers})
    text = "\n".join("|".join(s) for s in subjects)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _notification(kind: Kind, plan: Plan, environment: str, commit: str, summary: str,
                  *, detail: str = "", services: tuple[ServiceLine, ...] = (),
                  blockers: tuple[str, ...] = ()) -> Notification:
    return Notification(kind=kind, environment=environment, commit=commit, summary=summary,
                        key=key_of(kind, environment, commit, detail), services=services,
                        blockers=blockers, control_plane_url=plan.control_plane_url,
                        created_at=plan.created_at)


def candidates(plan: Plan, *, environment: str, report: ApplyReport | None = None,
               applying: bool = False, open_no_go: str | None = None,
               ) -> tuple[Notification, ...]:
    """What this outcome says, before deduplication.

    ``plan``: the plan made (watch) or the fresh plan an apply judged; ``report``: what
    the apply did (None: nothing was applied). ``applying``: the watcher applies GO plans
    itself, so a plan with changes is not "waiting" for anyone. ``open_no_go``: the key
    of the NO-GO said and not cleared for this environment."""
    commit = plan.commit
    if commit is None or plan.dirty or plan.worktree:
        return ()
    at = commit[:12]
    out: list[Notification] = []
    if plan.verdict is Verdict.NO_GO:
        blockers = tuple(f"{b.code.value}: {b.message}" for b in plan.blockers)
        held = [b for b in plan.blockers if b.code is BlockerCode.HELD]
        if held:  # the held blockers first: the one thing on-call must not miss
            blockers = tuple(f"{b.code.value}: {b.message}" for b in held) + tuple(
                f"{b.code.value}: {b.message}" for b in plan.blockers
                if b.code is not BlockerCode.HELD)
        out.append(_notification(
            Kind.HELD if held else Kind.NO_GO, plan, environment, commit,
            f"{environment}: commit {at} is NO-GO, {len(plan.blockers)} blocker(s): "
            + blockers[0] + (f" (+{len(blockers) - 1} more)" if len(blockers) > 1 else ""),
            detail=_no_go_detail(plan), blockers=blockers,
            services=_held_lines(plan, held)))
        return tuple(out)
    if open_no_go is not None:
        out.append(_notification(
            Kind.NO_GO_CLEARED, plan, environment, commit,
            f"{environment}: the NO-GO is cleared at commit {at} ({plan.verdict.value})",
            detail=hashlib.sha256(open_no_go.encode()).hexdigest()[:12]))
    if report is None:
        if plan.verdict is Verdict.NO_CHANGES:
            out.append(_notification(
                Kind.CONVERGED, plan, environment, commit,
                f"{environment}: commit {at} is converged on every expected cluster "
                f"({len(plan.proofs)} service(s))"))
        elif plan.changes and not applying:
            out.append(_notification(
                Kind.PLANNED, plan, environment, commit,
                f"{environment}: commit {at} has {len(plan.changes)} change(s) waiting",
                services=_lines(plan)))
        return tuple(out)
    gate = report.gate
    if report.failures():
        failures = report.failures()
        out.append(_notification(
            Kind.APPLY_FAILED, plan, environment, commit,
            f"{environment}: apply of commit {at} failed: {len(failures)} change(s) "
            "refused, failed or in doubt", services=_lines(plan, report)))
    elif gate is not None and not gate.converged:
        pending = gate.pending()
        why = "--timeout expired" if gate.expired else (
            "the rollout failed" if gate.stopped() else f"after {gate.attempts} poll(s)")
        out.append(_notification(
            Kind.GATE_FAILED, plan, environment, commit,
            f"{environment}: commit {at} not proven on every cluster ({why}): "
            + ", ".join(p.service for p in pending), services=_lines(plan, report)))
    elif report.results:
        out.append(_notification(
            Kind.APPLIED, plan, environment, commit,
            f"{environment}: commit {at} applied and proven: {len(report.results)} "
            "change(s) on every expected cluster", services=_lines(plan)))
    elif gate is None or gate.converged:
        out.append(_notification(
            Kind.CONVERGED, plan, environment, commit,
            f"{environment}: commit {at} is converged on every expected cluster"))
    return tuple(out)


def decide(memory: Memory, plan: Plan, *, environment: str,
           report: ApplyReport | None = None, applying: bool = False) -> Decision:
    """The notifications this outcome earns that were not sent already, and the memory
    after them (``candidates``, deduplicated by key; a kind's ``covers`` are remembered
    with it; a NO-GO opens, its clearing closes, the environment's open NO-GO)."""
    found = candidates(plan, environment=environment, report=report, applying=applying,
                       open_no_go=memory.open_no_go.get(environment))
    return _dedup(memory, found, environment)


def _dedup(memory: Memory, found: tuple[Notification, ...], environment: str) -> Decision:
    sent = set(memory.sent)
    new: list[Notification] = []
    opened = dict(memory.open_no_go)
    keys: list[str] = []
    for note in found:
        if note.kind in (Kind.NO_GO, Kind.HELD):
            opened[environment] = note.key
        elif note.kind is Kind.NO_GO_CLEARED:
            opened.pop(environment, None)
        if note.key in sent:
            continue
        new.append(note)
        keys.append(note.key)
        keys.extend(key_of(k, environment, note.commit) for k in note.spec.covers)
    return Decision(new=tuple(new), memory=replace(memory.remember(*keys), open_no_go=opened))


def _held_lines(plan: Plan, held: list[Blocker]) -> tuple[ServiceLine, ...]:
    """Each service that pins a held digest: the digest (the plan's proof of it) and the
    hold's words (reason, file and line, how to lift it)."""
    proofs = {p.service: p for p in plan.proofs}
    return tuple(ServiceLine(
        service=b.service or "?", digest=proofs[b.service].digest if b.service in proofs
        else None, reasons=(b.message,)) for b in held)


@dataclass(frozen=True)
class WayBack:
    """What ``--on-gate-failure revert`` did after a failed gate, as the engine hands it
    over: the revert (its key, items, commit, whether it landed or was proposed), the
    rollback's apply when one ran (its fresh plan and report), or why no revert was made
    (``error``, with ``failed``: the services and digests the gate failed on)."""

    key: str = ""
    items: tuple[reverts.Item, ...] = ()
    commit: str | None = None
    landed: bool = False
    pull_url: str | None = None
    pull_number: int | None = None
    why_pr: str | None = None
    rollback: tuple[Plan, ApplyReport] | None = None
    error: str | None = None
    failed: tuple[tuple[str, str], ...] = ()
    #: asked for by hand (``reconcile revert``): no gate failed, the judge did not prove
    #: the release at the commit reverted
    by_hand: bool = False


def _revert_lines(way: WayBack, gate: GateReport | None) -> tuple[ServiceLine, ...]:
    """One line per reverted service: the digest now pinned (rolled back to), the failed
    one (as ``previous``: a rollback's "before"), the clusters that refused it -- those
    that stated their failure (a cluster still rolling out when the gate ended refused
    nothing), or where none did, those not proven -- and the evidence (cluster and
    reason)."""
    proofs = {p.service: p for p in gate.proofs} if gate is not None else {}
    out = []
    for item in way.items:
        proof = proofs.get(item.service)
        refused = (proof.stated() or proof.pending()) if proof is not None else ()
        clusters = tuple(c.cluster for c in refused)
        out.append(ServiceLine(service=item.service, service_id=proof.app_id if proof
                               else "", action=Action.ROLLBACK.value, digest=item.to,
                               previous=item.failed, clusters=clusters,
                               reasons=item.evidence))
    return tuple(out)


def way_back_candidates(failed: Plan, gate: GateReport | None, way: WayBack, *,
                        environment: str) -> tuple[Notification, ...]:
    """What the way back from ``failed`` (the plan whose apply's gate failed) says,
    before deduplication: ``reverted`` (on the failed commit), then the rollback's proof
    (on the revert commit), or ``rollback_not_proven`` when no revert was made."""
    commit = failed.commit
    if commit is None or failed.dirty or failed.worktree:
        return ()
    at = commit[:12]
    out: list[Notification] = []
    if not way.items:
        if way.error is None:
            return ()
        subjects = "\n".join(f"{s}|{d}" for s, d in sorted(way.failed))
        out.append(_notification(
            Kind.ROLLBACK_NOT_PROVEN, failed, environment, commit,
            f"{environment}: release of commit {at} failed and was NOT reverted: "
            f"{way.error}", detail=hashlib.sha256(subjects.encode()).hexdigest()[:12],
            services=tuple(ServiceLine(service=s, digest=d, clusters=(), reasons=(
                way.error,)) for s, d in way.failed)))
        return tuple(out)
    back = ", ".join(f"{i.service} {i.to_tag} ({_short(i.to)})" for i in way.items)
    line = RevertLine(key=way.key, failed_commit=commit, commit=way.commit,
                      landed=way.landed, pull_url=way.pull_url,
                      pull_number=way.pull_number, why_pr=way.why_pr)
    if way.landed and way.commit:
        how = f"reverted to {back} by commit {way.commit[:12]}"
    elif way.pull_url or way.pull_number is not None:
        how = (f"revert to {back} proposed in pull request #{way.pull_number} "
               f"({way.pull_url}): {way.why_pr or 'a pull request'}; nothing rolled back "
               "until it is merged")
    else:
        how = f"reverted to {back}"
    what = f"release of commit {at} not proven, reverted by hand" if way.by_hand \
        else f"release of commit {at} failed"
    out.append(Notification(
        kind=Kind.REVERTED, environment=environment, commit=commit,
        summary=f"{environment}: {what}; {how}",
        key=key_of(Kind.REVERTED, environment, commit, way.key),
        services=_revert_lines(way, gate), control_plane_url=failed.control_plane_url,
        created_at=failed.created_at, revert=line))
    if way.rollback is None:
        return tuple(out)
    plan, report = way.rollback
    at_revert = plan.commit or way.commit or commit
    if reverts.rollback_proven(plan, report):
        kind, summary, services = Kind.ROLLBACK_PROVEN, (
            f"{environment}: rolled back to {back} and proven on every cluster (revert "
            f"commit {at_revert[:12]}; the release of {at} failed)"), _lines(plan)
    else:
        missing = reverts.unproven_lines(report)
        kind, summary, services = Kind.ROLLBACK_NOT_PROVEN, (
            f"{environment}: the rollback to {back} is NOT proven (revert commit "
            f"{at_revert[:12]}): {' | '.join(missing) or 'no gate ran'}"), \
            _lines(plan, report)
    out.append(Notification(
        kind=kind, environment=environment, commit=at_revert, summary=summary,
        key=key_of(kind, environment, at_revert, way.key), services=services,
        control_plane_url=plan.control_plane_url, created_at=plan.created_at,
        revert=line))
    return tuple(out)


def decide_way_back(memory: Memory, failed: Plan, gate: GateReport | None, way: WayBack,
                    *, environment: str) -> Decision:
    """``way_back_candidates`` not said already, and the memory after them."""
    found = way_back_candidates(failed, gate, way, environment=environment)
    return _dedup(memory, found, environment)


def short(digest: str | None) -> str:
    """A digest as a notification's text shows it (``sha256:`` and 12 hex)."""
    return _short(digest)
