"""The plan value: what will change, on what evidence, what blocks it, and what apply is
already known to meet.

Owns the immutable models ``Plan``, ``Risk`` and ``ServiceEvidence``, and ``restrict``
(the part of a plan about ``--only``'s services). A ``Change`` is the model of its kind
(``core.kinds``: one module per kind, a union discriminated on ``action``); ``Blocker``
and ``Drift`` are ``core.findings``'; all are re-exported here with the plan.
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
  Silence is never a risk (it is unknown: a blocker). Views show risks by cause
  (``Plan.risk_groups``: one cluster, one code, one thing said, every service it
  affects), each said once, the services the pull request touches first.
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
from typing import Annotated

from pydantic import Field

from reconciler.core.codes import SILENT_CLUSTER_CODES, BlockerCode, RiskCode
from reconciler.core.evidence import Proof, ServiceProof
from reconciler.core.findings import Blocker, Drift
from reconciler.core.kinds import (
    ACTION_ORDER,
    OPTIONAL_ACTIONS,
    VERBS,
    Action,
    Change,
    ChangeBase,
    Preconditions,
    ReleaseRef,
    kind_of,
)
from reconciler.core.lean import CoreModel
from reconciler.core.live import Observation
from reconciler.core.preflight import ServicePreflight
from reconciler.core.review import Review
from reconciler.core.verification import ServiceChecks

__all__ = [
    "ACTION_ORDER", "SAID_LIMIT", "VERBS", "Action", "Blocker", "Change", "ChangeBase",
    "Drift", "Plan", "Preconditions", "ReleaseRef", "Risk", "RiskGroup", "ServiceEvidence",
    "Verdict",
    "kind_of", "restrict",
]




class Verdict(StrEnum):
    GO = "go"
    NO_GO = "no_go"
    NO_CHANGES = "no_changes"


#: A digest inside a cluster's words: shortened when quoted, the sentence names it once.
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: How much of what a cluster said a risk's sentence quotes (``reason`` has all of it).
SAID_LIMIT = 200


def _plain(text: str) -> str:
    return text


class Risk(CoreModel):
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


def _listed(names: list[str], limit: int = 3) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


class RiskGroup(CoreModel):
    """Risks with one cause: the same ``code`` on the same ``cluster`` with the same
    words (``reason``), over every service it affects (``risks``, one each). Derived
    (``Plan.risk_groups``), never saved."""

    risks: tuple[Risk, ...]

    @property
    def first(self) -> Risk:
        return self.risks[0]

    @property
    def services(self) -> tuple[str, ...]:
        return tuple(r.service for r in self.risks)

    def sentence(self, quote: Callable[[str], str] = _plain, *, brief: bool = False) -> str:
        """One sentence for the cause: a single risk's own sentence; for several, the
        cluster and what it said once, with every service (and its digest) it affects."""
        first = self.first
        if len(self.risks) == 1:
            return first.sentence(quote, brief=brief)
        cluster = quote(first.cluster or "?")
        said = "" if brief else quote(first.said())
        services = _listed([f"{quote(r.service)} ({quote(r.digest[:19] if r.digest else '<none>')})"
                            for r in self.risks])
        if first.code is RiskCode.CLUSTER_DROPPED_EGRESS:
            names = _listed([quote(s) for s in self.services])
            return (f"{cluster} does not allow the egress of {names}"
                    + (f" ({said})" if said else "")
                    + f"; apply will not prove them until {cluster} allows it")
        if first.code is RiskCode.CLUSTER_REFUSED_RELEASE:
            what = f"{cluster} refused the last digest for {services}"
        elif first.code is RiskCode.ROLLOUT_FAILED:
            what = f"the control plane reports the rollouts of {services} failed"
        else:
            what = f"{cluster} fails to run {services}"
        return what + (f" ({said})" if said else "") + \
            f"; apply will not prove them until {cluster} recovers"


class ServiceEvidence(CoreModel):
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


class Plan(CoreModel):
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
    #: Issue 34: the checks each service is held to (``kind: Verification``); left out of
    #: the wire when none, so plans of fleets without checks read as they always did.
    verifications: Annotated[tuple[ServiceChecks, ...],
                             Field(exclude_if=lambda v: not v)] = ()

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
        # A kind added after the format's counts were fixed (routes, 2.4) is counted
        # only on a plan that holds one of its changes (``Kind.optional_actions``).
        counts = {a.value: 0 for a in Action if a not in OPTIONAL_ACTIONS
                  or any(c.action is a for c in self.changes)}
        for change in self.changes:
            counts[change.action.value] += 1
        counts["blockers"] = len(self.blockers)
        counts["drift"] = len(self.drift)
        return counts

    def unconverged(self) -> list[str]:
        """Services the judge does not prove converged (with or without a change)."""
        return sorted(p.service for p in self.proofs if p.proof is not Proof.CONVERGED)

    def risk_groups(self) -> tuple[RiskGroup, ...]:
        """The risks by cause (``RiskGroup``): one per cluster, code and thing said,
        listing every service it affects. Ordered by what the pull request changes:
        causes touching a service the PR edits first (``review.touched``), then a service
        the plan changes, then those apply only gates; ties keep the plan's order."""
        groups: dict[tuple[str, str | None, str], list[Risk]] = {}
        for risk in self.risks:
            # A rollout's failure is its own service's (its words name the rollout).
            key = (risk.code.value, risk.cluster if risk.cluster is not None
                   else f"service:{risk.service}", risk.reason)
            groups.setdefault(key, []).append(risk)
        touched = set(self.review.touched) if self.review is not None else set()
        changed = {c.service for c in self.changes}

        def rank(risks: list[Risk]) -> int:
            names = {r.service for r in risks}
            return 0 if names & touched else 1 if names & changed else 2

        ordered = sorted(groups.values(), key=rank)  # stable: the plan's order within a rank
        return tuple(RiskGroup(risks=tuple(sorted(g, key=lambda r: (
            r.service not in touched, r.service not in changed)))) for g in ordered)

    def risk_line(self) -> str | None:
        """The first cause's sentence and how many more: what the first line of every
        view of a GO plan says (None without risks)."""
        groups = self.risk_groups()
        if not groups:
            return None
        rest = len(groups) - 1
        return groups[0].sentence() + (
            f" (+{rest} more risk{'s' if rest > 1 else ''})" if rest else "")

    def silent_clusters(self) -> frozenset[str]:
        """The clusters that gave no evidence for at least one service: those a blocker of
        ``SILENT_CLUSTER_CODES`` names (an address that would not name its cluster is one
        too), and every expected cluster when the gateway resolved to nothing."""
        silent = [b for b in self.blockers if b.code in SILENT_CLUSTER_CODES]
        named = {b.cluster for b in silent if b.cluster is not None}
        if any(b.code is BlockerCode.GATEWAY_UNRESOLVED for b in silent):
            named.update(self.expected_clusters)
        return frozenset(named)

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
    and a shared cause keeps only the services in scope -- one that holds none of them
    (a freeze or a closed window holding other services' promotions, a cluster only
    other services expect) is not part of their plan."""
    if not only:
        return plan

    def keep(name: str | None) -> bool:
        return name is None or name in only

    def held(blocker: Blocker) -> bool:
        if blocker.service is not None or not blocker.services:
            return keep(blocker.service)
        return any(s in only for s in blocker.services)

    return plan.model_copy(update={
        "changes": tuple(c for c in plan.changes if c.service in only),
        "blockers": tuple(b.model_copy(update={"services": tuple(s for s in b.services
                                                                  if s in only)})
                          for b in plan.blockers if held(b)),
        "drift": tuple(d for d in plan.drift if keep(d.service)),
        "evidence": tuple(e for e in plan.evidence if e.service in only),
        "proofs": tuple(p for p in plan.proofs if p.service in only),
        "risks": tuple(r for r in plan.risks if r.service in only),
        "preflights": tuple(p for p in plan.preflights if p.service in only),
    })
