"""What every change kind shares: the action names, the fields every change carries, the
idempotency key, the staleness verdict, and ``Kind`` -- the interface one kind implements.

Owns ``Action``, ``Preconditions``, ``ReleaseRef``, ``ChangeBase`` (the fields of every
change; each kind's change model adds its own and narrows ``action`` to a literal, so
``core.kinds.Change`` is a union discriminated on ``action``), ``idempotency_key``,
``Freshness``/``Check`` (``core.staleness``'s verdicts), ``Diff`` (what a kind's diff
adds to a plan) and ``Kind``.

Must not import the plan (``core.plans``) or the judge (``core.evidence``): both import
the kinds. Pure: no I/O imports.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Final, Generic, TypeVar

from reconciler.core.codes import ReasonCode
from reconciler.core.desired import DesiredState, Service
from reconciler.core.findings import Blocker, Drift
from reconciler.core.lean import CoreModel
from reconciler.core.live import LiveService, LiveSnapshot, Observation, ReadFailure
from reconciler.core.preflight import ServicePreflight
from reconciler.core.targets import Target
from reconciler.core.whys import Assessment, Why


class Action(StrEnum):
    """What a change does; the wire value is the string."""

    SET_GRANT = "set_grant"
    SET_EGRESS = "set_egress"
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    CREATE = "create"
    SYNC_ROUTE = "sync_route"  # issue 21: ``core.kinds.route``
    DELETE_ROUTE = "delete_route"


class Preconditions(CoreModel):
    """The live values a change was planned against (compare-and-swap inputs)."""

    rollout_generation: int | None = None
    rollout_id: str | None = None
    egress_revision: int | None = None
    capabilities: tuple[str, ...] | None = None  # the live grant, for set_grant


class ReleaseRef(CoreModel):
    """A release as a change shows it: enough to name it to a human and to the API."""

    release_id: str | None = None
    digest: str | None = None
    tags: tuple[str, ...] = ()
    reference: str | None = None


class ChangeBase(CoreModel):
    """One intended change to one service (or one user's grant on one service): the
    fields every kind carries. A kind's own model narrows ``action`` and adds the rest."""

    action: Action
    service: str  # the desired-state name
    service_id: str
    app_id: str
    reason: ReasonCode
    summary: str  # one sentence
    preconditions: Preconditions
    idempotency_key: str
    #: who the change is for beyond the service (a grant's user): part of what the change
    #: writes, so it is in the sort order, the labels and the review's target
    user_id: str | None = None


#: ``json.dumps(..., sort_keys=True, separators=(",", ":"))`` without building an encoder
#: per call (one per change: 10,000 in a 10,000-service plan); the same text.
_KEY_ENCODER: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def idempotency_key(action: Action, service_id: str, payload: object,
                    preconditions: Preconditions) -> str:
    """A key derived from the change and what it was planned against.

    The same change against the same live state always gets the same key, so a rerun
    after a crash replays the first call instead of making a second rollout; a change
    planned against a moved state gets a new key (and the CAS check decides).
    """
    material = _KEY_ENCODER.encode(
        {"action": action.value, "service": service_id, "payload": payload,
         "pre": preconditions.model_dump(mode="json")})
    return "rcn-" + hashlib.sha256(material.encode()).hexdigest()[:40]


def short(digest: str | None) -> str:
    """A digest as a summary names it: ``sha256:`` and 12 hex."""
    if not digest:
        return "<none>"
    return digest[:19]


class Freshness(StrEnum):
    FRESH = "fresh"
    ALREADY_LIVE = "already_live"
    OURS = "ours"
    STALE = "stale"


C = TypeVar("C", bound=ChangeBase)


@dataclass(frozen=True)
class Check(Generic[C]):
    """A change and whether it is still safe to send (``core.staleness``)."""

    change: C
    freshness: Freshness
    detail: str = ""


@dataclass
class Diff:
    """What one kind's diff adds to a plan: its changes, the blockers and drift it found,
    the preflights it judged, and the live values it read (for the plan's fingerprint)."""

    changes: list[ChangeBase] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)
    drift: list[Drift] = field(default_factory=list)
    preflights: list[ServicePreflight] = field(default_factory=list)
    preconditions: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Expecting:
    """What the judge's target for one service is built from (``core.planning.target_of``
    asks every kind's ``expect``): the desired state and the service, the control
    plane's state of it, and -- where the caller has them -- the snapshot, the clusters'
    answers about the app and the changes being applied."""

    svc: Service
    live: LiveService | ReadFailure | None
    desired: DesiredState | None = None
    snapshot: LiveSnapshot | None = None
    observations: Sequence[Observation] = ()
    changes: Sequence[ChangeBase] = ()


class Kind(Generic[C]):
    """One change kind behind the dispatch (``core.kinds.kind_of``): its model, where it
    sits in the execution order, how it is named, whether the gate waits for it, its
    part of the staleness rule, its part of the judge's target and proof, its review
    target, its codes and its renderer detail. Each ``core.kinds.<kind>`` module has one
    instance."""

    #: the review's name for what the kind writes (``core.review.Target``)
    target: ClassVar[str]
    #: the models of its changes, one per action
    models: ClassVar[tuple[type[ChangeBase], ...]]
    #: execution order: lower first (authority and network policy before the release
    #: that may need them)
    order: ClassVar[int]
    #: the fixed verb each action is rendered with
    verbs: ClassVar[dict[Action, str]]
    #: whether the convergence gate must see the change on every cluster
    waits_for_convergence: ClassVar[bool] = True
    #: whether a fresh plan may bind the same target under another key (a creation
    #: re-asked at another commit); ``core.binding`` pairs those by service
    rebinds: ClassVar[bool] = False
    #: where its part of the judge's proof comes in a cluster's assessment (lower
    #: first); None: the kind has no part of its own (``assess``)
    proves: ClassVar[int | None] = None
    #: the judge's reasons this kind's proof gives, with the sentence docs/codes.md shows
    whys: ClassVar[Mapping[Why, str]] = {}
    #: those of ``whys`` that are a gap in evidence (unproven), not evidence of another
    #: state
    unproven: ClassVar[frozenset[Why]] = frozenset()
    #: its blocker, drift and reason codes (``core.codes``' enums) with the sentence
    #: docs/codes.md shows for each
    codes: ClassVar[Mapping[StrEnum, str]] = {}
    #: actions counted in a plan's ``counts`` only when the plan holds one (a kind added
    #: after the format's counts were fixed), and the change fields written only on its
    #: own changes (``render.jsonplan``), so a plan without the kind reads as before
    optional_actions: ClassVar[tuple[Action, ...]] = ()
    optional_fields: ClassVar[tuple[str, ...]] = ()
    #: how a plan's one-line summary counts its changes ("N <label>"); None: the
    #: summary line names the kind's actions itself
    counted_as: ClassVar[str | None] = None

    @property
    def actions(self) -> tuple[Action, ...]:
        return tuple(self.verbs)

    def diff_all(self, desired: DesiredState, live: LiveSnapshot) -> Diff | None:
        """The kind's changes planned from the whole desired state (a kind with documents
        of its own, such as grants): ``core.planning`` asks every kind once per plan.
        None: the kind is planned per service (its module's ``diff``, called by the
        planner for each declared service)."""
        return None

    def shows(self, change: C, svc: LiveService) -> bool:
        """Does the service's own state already hold what the change wants? (False for
        what lives apart from the service, such as a grant.)"""
        return False

    def already_live(self, change: C, svc: LiveService, live: LiveSnapshot) -> bool:
        return self.shows(change, svc)

    def moved(self, change: C, svc: LiveService, live: LiveSnapshot) -> str:
        """What moved under the change, as "field: planned → now"; empty when nothing."""
        return ""

    def check(self, change: C, live: LiveSnapshot, *, journaled: bool) -> Check[C]:
        """Judge the change against ``live`` (``core.staleness``); ``journaled``: its key
        was sent before."""
        svc = live.services.get(change.service_id)
        if not isinstance(svc, LiveService):
            return Check(change, Freshness.STALE, f"{change.service}: the control plane gave "
                         "no state for it now")
        moved = self.moved(change, svc, live)
        if not moved:
            return Check(change, Freshness.OURS if journaled else Freshness.FRESH)
        if self.already_live(change, svc, live):
            return Check(change, Freshness.ALREADY_LIVE, moved)
        if journaled:
            return Check(change, Freshness.OURS, moved)
        return Check(change, Freshness.STALE, f"{change.service}: {moved}")

    def modification(self, base: C, head: C) -> dict[str, object]:
        """What ``head`` changes inside ``base`` (two changes to one target), as the
        fields of ``core.review.ModifiedChange`` this kind fills."""
        return {}

    def expect(self, ask: Expecting) -> dict[str, object]:
        """The fields of the judge's target (``core.targets.Target``) this kind fills
        for ``ask.svc``: what every expected cluster must show of it."""
        return {}

    def assess(self, observation: Observation, target: Target, running: str | None,
               last_error: str | None) -> Assessment | None:
        """The kind's part of the judge's proof of one answered cluster (asked in
        ``proves`` order); None: proven, or nothing of the kind to check."""
        return None

    def touched(self, base: DesiredState, head: DesiredState) -> set[str]:
        """The services whose documents of this kind's own (not the service document)
        differ between base and head (``core.review.touched_services``)."""
        return set()

    def review_key(self, change: C) -> str | None:
        """The third part of what the change writes (``core.review.target_of``): who or
        what beyond the service (a grant's user, a route's owner key)."""
        return None

    def sort_key(self, change: C) -> tuple[str, ...]:
        """Orders two changes of this kind to one service in a plan (after the action,
        the service and the user)."""
        return ()

    def detail(self, change: C) -> list[str] | None:
        """The before -> after lines of a change as plain text (``render.common``), or
        None: the renderer's fallback (the summary)."""
        return None

    def counts(self, counts: Mapping[str, int]) -> int:
        """How many of a plan's changes this kind holds, from its ``counts``."""
        return sum(counts.get(a.value, 0) for a in self.actions)
