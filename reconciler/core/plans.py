"""The plan value: what will change, on what evidence, what blocks it, and what apply is
already known to meet.

Owns the immutable models ``Plan``, ``Change``, ``Blocker``, ``Drift``, ``Risk`` and
``ServiceEvidence``, and ``restrict`` (the part of a plan about ``--only``'s services).
``core.planning`` produces them; renderers read them;
``render.jsonplan`` maps them to and from the versioned wire format; apply consumes a
plan unchanged and never re-decides.

Invariants (each one is relied on elsewhere):

- ``Plan.verdict`` is derived, never stored: any blocker makes it ``no_go``; without
  blockers it is ``no_changes`` only when there is no change and the judge
  (``core.evidence.judge``) proves every managed service converged on every expected
  cluster, and ``go`` otherwise (apply has a write to send or a gate to pass). Unknown is
  never "no changes".
- ``Change.idempotency_key`` is a pure function of the change and its preconditions, so
  re-planning the same situation yields the same key and a rerun replays, never repeats.
- ``Change.preconditions`` are the live values the change was planned against; apply
  refuses ("stale") when any moved.
- ``Plan.risks`` never changes the verdict: a risk is a cluster that has *said* why it
  will not converge (the judge's ``stated`` findings) on a service apply will gate; the
  writes are still allowed, and every view names the first risk in its first line.
  Silence is never a risk (it is unknown: a blocker).
- Order of ``changes`` is the safe execution order: grants, egress, then releases and
  creations.
- A ``create`` change carries everything apply sends (``Creation``): the preflight
  request data as the plan sent it and the fence of the report it saw; that report is in
  ``Plan.preflights``. A create is sent only from a GO plan, so only with a fence.

Pure: no I/O imports.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from reconciler.core.codes import BlockerCode, DriftCode, ReasonCode, RiskCode
from reconciler.core.evidence import Proof, ServiceProof
from reconciler.core.live import EgressRule, Observation
from reconciler.core.preflight import Creation, ServicePreflight
from reconciler.core.review import Review
from reconciler.core.routing import GatewayRoute


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Action(StrEnum):
    """What a change does; the wire value is the string."""

    SET_GRANT = "set_grant"
    SET_EGRESS = "set_egress"
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    CREATE = "create"
    #: issue 21 (``core.routekind``): create or replace a gateway route; delete one
    SYNC_ROUTE = "sync_route"
    DELETE_ROUTE = "delete_route"


#: The route actions: counted in a plan's ``counts`` only when it holds one (format 2.4),
#: so every plan without routes reads as it always did.
ROUTE_ACTIONS = (Action.SYNC_ROUTE, Action.DELETE_ROUTE)

#: Execution order: authority and network policy before the release that may need them;
#: routes after the release they forward to, deletions last.
ACTION_ORDER = {Action.SET_GRANT: 0, Action.SET_EGRESS: 1, Action.PROMOTE: 2, Action.ROLLBACK: 2,
                Action.CREATE: 2, Action.SYNC_ROUTE: 3, Action.DELETE_ROUTE: 4}

#: The fixed verb each change is rendered with.
VERBS = {
    Action.PROMOTE: "promote",
    Action.ROLLBACK: "rollback",
    Action.SET_EGRESS: "set egress",
    Action.SET_GRANT: "set grant",
    Action.CREATE: "create",
    Action.SYNC_ROUTE: "sync route",
    Action.DELETE_ROUTE: "delete route",
}


class Verdict(StrEnum):
    GO = "go"
    NO_GO = "no_go"
    NO_CHANGES = "no_changes"


class Preconditions(_Model):
    """The live values a change was planned against (compare-and-swap inputs)."""

    rollout_generation: int | None = None
    rollout_id: str | None = None
    egress_revision: int | None = None
    capabilities: tuple[str, ...] | None = None  # the live grant, for set_grant


class ReleaseRef(_Model):
    """A release as a change shows it: enough to name it to a human and to the API."""

    release_id: str | None = None
    digest: str | None = None
    tags: tuple[str, ...] = ()
    reference: str | None = None


class Change(_Model):
    """One intended change to one service (or one user's grant on one service)."""

    action: Action
    service: str  # the desired-state name
    service_id: str
    app_id: str
    reason: ReasonCode
    summary: str  # one sentence
    preconditions: Preconditions
    idempotency_key: str
    # promote / rollback
    release_before: ReleaseRef | None = None
    release_after: ReleaseRef | None = None
    # set_egress
    egress_before: tuple[EgressRule, ...] | None = None
    egress_after: tuple[EgressRule, ...] | None = None
    egress_added: tuple[EgressRule, ...] = ()
    egress_removed: tuple[EgressRule, ...] = ()
    # set_grant
    user_id: str | None = None
    capabilities_before: tuple[str, ...] | None = None
    capabilities_after: tuple[str, ...] | None = None
    capabilities_added: tuple[str, ...] = ()
    capabilities_removed: tuple[str, ...] = ()
    # create
    creation: Creation | None = None
    # sync_route / delete_route (issue 21): absent from the wire for other kinds
    route_before: GatewayRoute | None = Field(default=None, exclude_if=lambda v: v is None)
    route_after: GatewayRoute | None = Field(default=None, exclude_if=lambda v: v is None)

    @property
    def waits_for_convergence(self) -> bool:
        """Releases, creations, egress and routes must be seen on every cluster."""
        return self.action in (Action.PROMOTE, Action.ROLLBACK, Action.SET_EGRESS,
                               Action.CREATE, Action.SYNC_ROUTE)

    @property
    def route_key(self) -> tuple[str, str | None, str | None] | None:
        route = self.route_after or self.route_before
        return route.key if route is not None else None



class Blocker(_Model):
    """Why the plan must not be applied. ``code`` is stable; ``message`` names who and where."""

    code: BlockerCode
    message: str
    service: str | None = None
    cluster: str | None = None
    services: tuple[str, ...] = ()  # for a cause shared by many: every service it blocks
    #: the control plane's preflight code, verbatim (sanitized), for preflight blockers
    upstream_code: str | None = None


class Drift(_Model):
    """Live state that differs from what the repo and the control plane intend."""

    code: DriftCode
    message: str
    service: str | None = None
    cluster: str | None = None


#: A digest inside a cluster's words: shortened when quoted, the sentence names it once.
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: How much of what a cluster said a risk's sentence quotes (``reason`` has all of it).
SAID_LIMIT = 200


def _plain(text: str) -> str:
    return text


class Risk(_Model):
    """A write the plan allows that apply is already known not to prove: ``cluster``
    said why it does not run (or is failing at) ``digest``, the control plane's current
    rollout of ``service``; ``reason`` is what it said (sanitized), ``message`` the one
    sentence every view shows (``sentence()``). ``cluster`` is None only for a rollout
    the control plane reports failed with no cluster saying more."""

    code: RiskCode
    service: str
    cluster: str | None = None
    digest: str | None = None  # what the cluster was asked to run
    running: str | None = None  # what it runs instead, when it said
    reason: str
    message: str

    def said(self) -> str:
        """``reason`` as a sentence quotes it: digests shortened, bounded."""
        text = _DIGEST.sub(lambda m: m.group()[:19] + "…", self.reason)
        return text if len(text) <= SAID_LIMIT else text[:SAID_LIMIT] + "…"

    def sentence(self, quote: Callable[[str], str] = _plain, *, brief: bool = False) -> str:
        """The risk in words; ``quote`` wraps each value taken from the live world (a
        Markdown code span; identity for text and JSON). ``brief`` leaves out what the
        cluster said (a headline that stays short; the full sentence is ``message``)."""
        service = quote(self.service)
        digest = quote(self.digest[:19] if self.digest else "<none>")
        cluster = quote(self.cluster or "?")
        said = "" if brief else quote(self.said())
        if self.code is RiskCode.ROLLOUT_FAILED:
            return (f"the control plane reports {service}'s {quote(self.said())} (to {digest}); "
                    "apply will not prove it until it is rolled out again")
        if self.code is RiskCode.CLUSTER_DROPPED_EGRESS:
            return (f"{cluster} does not allow {service}'s egress"
                    + (f" ({said})" if said else "")
                    + f"; apply will not prove it until {cluster} allows it")
        if self.code is RiskCode.CLUSTER_REFUSED_RELEASE:
            return (f"{cluster} refused the last digest for {service} ({digest}"
                    + (f": {said}" if said else "")
                    + f"); apply will not prove it until {cluster} recovers")
        return (f"{cluster} fails to run {service} at {digest}" + (f" ({said})" if said else "")
                + f"; apply will not prove it until {cluster} recovers")


class ServiceEvidence(_Model):
    """Per expected cluster, what it said about one service's app, or why it was silent."""

    service: str
    service_id: str
    app_id: str
    expected_clusters: tuple[str, ...]
    observations: tuple[Observation, ...]
    current_digest: str | None = None
    desired_digest: str | None = None

    @property
    def complete(self) -> bool:
        answered = {o.cluster_id for o in self.observations if o.kind != "silent"}
        return set(self.expected_clusters) <= answered


class Plan(_Model):
    """``plan = f(desired, live)``: a value; rendered, saved, and applied unchanged."""

    created_at: int  # ms since epoch, taken from the snapshot (keeps planning pure)
    commit: str | None = None
    dirty: bool = False
    repo_path: str | None = None  # where the desired state was read; apply re-reads settings here
    repo_root: str | None = None  # the git work tree holding it (None: not a git repository)
    untracked: tuple[str, ...] = ()  # YAML under repo_path that no commit holds (never read)
    #: what a saved plan is bound to (``core.binding``): the git tree id of the desired-state
    #: directory at ``commit`` and its files (path -> blob id, so apply can name the files
    #: of another tree without having its objects). None: a plan saved by reconcile < 2.3
    #: (bound to ``commit``), made outside git, or a worktree preview.
    desired_tree: str | None = None
    desired_files: dict[str, str] = Field(default_factory=dict)
    #: tracked files under repo_path with edits the commit does not hold (the plan left
    #: them out; a worktree preview read them)
    uncommitted: tuple[str, ...] = ()
    #: ``plan --worktree``: a preview of uncommitted changes; shown and commented, never
    #: applied
    worktree: bool = False
    control_plane_url: str
    gateway: str
    expected_clusters: tuple[str, ...]
    changes: tuple[Change, ...]
    blockers: tuple[Blocker, ...]
    drift: tuple[Drift, ...]
    evidence: tuple[ServiceEvidence, ...]
    fingerprint: str  # digest of every precondition the plan read
    proofs: tuple[ServiceProof, ...] = ()  # the judge's word on every managed service
    review: Review | None = None  # plan --base: what this PR changes (the plan is the head's)
    #: per new service (and, by policy, per promotion): the preflight and its report
    preflights: tuple[ServicePreflight, ...] = ()
    #: what apply is known to meet on services it will gate (``Risk``); never a blocker
    risks: tuple[Risk, ...] = ()
    #: what the reading side wants the reader to know once, e.g. a cluster that advertised
    #: batch reads but had to be read app by app (the evidence is the same, the cost is not)
    notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> Verdict:
        if self.blockers:
            return Verdict.NO_GO
        # "No changes" is a claim of convergence: only the judge may make it, and only
        # when it proves every managed service on every expected cluster.
        if self.changes or not all(p.proof is Proof.CONVERGED for p in self.proofs):
            return Verdict.GO
        return Verdict.NO_CHANGES

    @property
    def converging(self) -> tuple[str, ...]:
        """Services with no change of their own that the judge does not call converged:
        apply has nothing to send for them, but a gate to pass."""
        changed = {c.service for c in self.changes}
        return tuple(p.service for p in self.proofs
                     if p.proof is not Proof.CONVERGED and p.service not in changed)

    def counts(self) -> dict[str, int]:
        counts = {a.value: 0 for a in Action if a not in ROUTE_ACTIONS
                  or any(c.action is a for c in self.changes)}
        for change in self.changes:
            counts[change.action.value] += 1
        counts["blockers"] = len(self.blockers)
        counts["drift"] = len(self.drift)
        return counts

    def unconverged(self) -> list[str]:
        """Services the judge does not prove converged (with or without a change)."""
        return sorted(p.service for p in self.proofs if p.proof is not Proof.CONVERGED)

    def risk_line(self) -> str | None:
        """The first risk's sentence and how many more: what the first line of every view
        of a GO plan says (None without risks)."""
        if not self.risks:
            return None
        rest = len(self.risks) - 1
        return self.risks[0].sentence() + (
            f" (+{rest} more risk{'s' if rest > 1 else ''})" if rest else "")

    def proof_of(self, service: str) -> ServiceProof | None:
        return next((p for p in self.proofs if p.service == service), None)

    def services(self) -> list[str]:
        """Every service the plan says something about, in a stable order."""
        names = {e.service for e in self.evidence}
        names.update(c.service for c in self.changes)
        names.update(b.service for b in self.blockers if b.service)
        names.update(d.service for d in self.drift if d.service)
        return sorted(names)

    def preflight_of(self, service: str) -> ServicePreflight | None:
        return next((p for p in self.preflights if p.service == service), None)


def restrict(plan: Plan, only: frozenset[str]) -> Plan:
    """The part of a plan about ``only`` (all of it when empty); mesh-wide blockers stay,
    and a shared cause keeps only the services in scope."""
    if not only:
        return plan

    def keep(name: str | None) -> bool:
        return name is None or name in only

    return plan.model_copy(update={
        "changes": tuple(c for c in plan.changes if c.service in only),
        "blockers": tuple(b.model_copy(update={"services": tuple(s for s in b.services
                                                                  if s in only)})
                          for b in plan.blockers if keep(b.service)),
        "drift": tuple(d for d in plan.drift if keep(d.service)),
        "evidence": tuple(e for e in plan.evidence if e.service in only),
        "proofs": tuple(p for p in plan.proofs if p.service in only),
        "risks": tuple(r for r in plan.risks if r.service in only),
        "preflights": tuple(p for p in plan.preflights if p.service in only),
    })
