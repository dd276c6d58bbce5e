"""What a pull request changes: the head's plan against the base's, over one live snapshot.

Owns ``review(base, head, ...)``, pure. Planning is a pure function, so the desired state
at the base and at the head are planned against the *same* snapshot and compared. Every
change has a **target** -- what it writes: the egress of a service, the release of a
service (a promotion or a rollback), the grant of one user on a service, the creation of
a service -- and four origins follow:

- **already pending**: the base plan makes the very same change (equal idempotency keys:
  a key is a function of the action, the service, the payload and the live
  preconditions, and the snapshot is shared, so equal keys mean equal changes); it would
  happen anyway;
- **modified**: the base plan changes the same target differently (``ModifiedChange``
  says what the PR changes inside it: for egress the destinations added and dropped
  relative to the base's pending change and to live, for a release the base's digest/tag
  and the head's, for a grant the capabilities added and dropped, for a creation the
  fields that differ);
- **introduced**: the base plan does not touch the target;
- **removed**: a target the base plan changes and the head no longer changes at all.

So every head change is exactly one of introduced / modified / already pending, and
every base change exactly one of already pending / modified / removed. Blockers keep
their meaning; those the PR adds or clears are listed too.

Must not: read git or the network (the engine hands both plans over), or render.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol

from reconciler.core.desired import DesiredState
from reconciler.core.findings import Blocker
from reconciler.core.kinds import KINDS, Change, kind_of
from reconciler.core.lean import CoreModel
from reconciler.core.live import EgressRule


class Plan(Protocol):
    """What a review reads of a plan (``core.plans.Plan``): named by what it reads, since
    ``core.plans`` imports this module (a plan carries its review)."""

    @property
    def changes(self) -> Sequence[Change]: ...
    @property
    def blockers(self) -> Sequence[Blocker]: ...
    @property
    def verdict(self) -> StrEnum: ...




class Origin(StrEnum):
    INTRODUCED = "introduced"  # this PR causes it: the base does not touch its target
    MODIFIED = "modified"  # the base changes the same target differently
    PENDING = "already_pending"  # pending on the base too: it would happen anyway
    REMOVED = "removed"  # pending on the base; the head no longer changes its target


class Target(StrEnum):
    """What a change writes; two changes to one target cannot both be applied."""

    # Each kind names its own (``core.kinds``: ``Kind.target``): a new kind adds its member.

    EGRESS = "egress"
    RELEASE = "release"  # promote and rollback both write it
    GRANT = "grant"  # one user's grant on one service
    CREATE = "create"
    ROUTE = "route"  # one gateway route, by its owner key (issue 21)



class BlockerRef(CoreModel):
    """A blocker as the review compares it (code, service, cluster, and the control
    plane's preflight code) with its sentence."""

    code: str
    service: str | None = None
    cluster: str | None = None
    message: str
    #: a preflight blocker's upstream code: one service can have several preflight
    #: blockers under one reconcile code, and a PR that clears one and adds another
    #: must show both
    upstream_code: str | None = None


class ReleaseAt(CoreModel):
    """A release as one side of a modified change names it."""

    digest: str | None = None
    tags: tuple[str, ...] = ()


class FieldChange(CoreModel):
    """One field of a creation that the base and the head set differently."""

    field: str
    base: str
    head: str


class ModifiedChange(CoreModel):
    """A target both plans change, differently: the head's change replaces the base's.

    The ``*_vs_base`` fields compare the head's change with the base's pending one; the
    ``*_vs_live`` fields compare it with what runs (they are the head change's own
    ``egress_added`` / ``egress_removed``, repeated so the entry reads on its own)."""

    target: Target
    service: str
    user_id: str | None = None  # grants: whose
    action: str  # the head's change
    base_action: str  # the base's (a release can turn from promote into rollback)
    idempotency_key: str  # the head's change
    base_idempotency_key: str
    summary: str
    base_summary: str
    # egress
    egress_added_vs_base: tuple[EgressRule, ...] = ()
    egress_dropped_vs_base: tuple[EgressRule, ...] = ()
    #: destinations the base's change opens too and the head keeps: already pending
    egress_pending_on_base: tuple[EgressRule, ...] = ()
    egress_added_vs_live: tuple[EgressRule, ...] = ()
    egress_removed_vs_live: tuple[EgressRule, ...] = ()
    # release
    release_base: ReleaseAt | None = None
    release_head: ReleaseAt | None = None
    # grant
    capabilities_added_vs_base: tuple[str, ...] = ()
    capabilities_dropped_vs_base: tuple[str, ...] = ()
    # create
    fields: tuple[FieldChange, ...] = ()


class RemovedChange(CoreModel):
    """A change the base would make to a target the head no longer changes (kept small:
    a sentence)."""

    action: str
    service: str
    summary: str
    idempotency_key: str


class Review(CoreModel):
    """The PR's part of the plan. The plan it is attached to is the head's."""

    base_ref: str
    base_commit: str | None = None
    head_commit: str | None = None
    base_verdict: str  # go | no_go | no_changes | invalid (the base's desired state is)
    #: idempotency key of every change of the head plan -> introduced | modified |
    #: already_pending
    origins: dict[str, Origin]
    #: head changes that replace a base change to the same target, and what differs
    modified: tuple[ModifiedChange, ...] = ()
    #: changes of the base plan to targets the head does not change, as the base planned them
    removed: tuple[RemovedChange, ...] = ()
    #: services whose desired state (Service document, or a grant on it) the PR edits
    touched: tuple[str, ...] = ()
    settings_changed: bool = False
    blockers_introduced: tuple[BlockerRef, ...] = ()
    blockers_cleared: tuple[BlockerRef, ...] = ()

    def origin(self, key: str) -> Origin:
        return self.origins.get(key, Origin.INTRODUCED)

    def modification(self, key: str) -> ModifiedChange | None:
        """What the PR changes inside the head change ``key``, when it modifies one."""
        return next((m for m in self.modified if m.idempotency_key == key), None)

    @property
    def introduced(self) -> tuple[str, ...]:
        return tuple(k for k, o in self.origins.items() if o is Origin.INTRODUCED)

    @property
    def by_this_pr(self) -> tuple[str, ...]:
        """Head changes the PR causes or alters: introduced and modified."""
        return tuple(k for k, o in self.origins.items() if o is not Origin.PENDING)

    @property
    def changes_nothing_managed(self) -> bool:
        """No introduced, modified or removed change, no managed document edited, no new
        blocker."""
        return not (self.by_this_pr or self.modified or self.removed or self.touched
                    or self.settings_changed or self.blockers_introduced
                    or self.blockers_cleared)


def _blocker_key(b: BlockerRef) -> tuple[str, str | None, str | None, str | None]:
    return (b.code, b.service, b.cluster, b.upstream_code)


def target_of(change: Change) -> tuple[Target, str, str | None]:
    """What a change writes: (kind, service id, user for a grant / "hostname/routeRef"
    for a route). Two changes with one target cannot both be applied; the head's
    replaces the base's."""
    of = kind_of(change)
    return Target(of.target), change.service_id, of.review_key(change)


def touched_services(base: DesiredState, head: DesiredState) -> tuple[tuple[str, ...], bool]:
    """Services whose document, or a document of a kind's own about them (``Kind.touched``:
    grants, routes), differ between base and head; and whether the Settings document
    changed (it may change every service's plan)."""
    before = {s.name: s for s in base.services}
    after = {s.name: s for s in head.services}
    touched = {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}
    for kind in KINDS:
        touched.update(kind.touched(base, head))
    return tuple(sorted(touched)), base.settings != head.settings


def modification(base: Change, head: Change) -> ModifiedChange:
    """What ``head`` changes inside ``base``, two changes to one target: the fields of
    ``ModifiedChange`` the target's kind fills (``core.kinds``: ``Kind.modification``)."""
    kind, _, _ = target_of(head)
    extra = kind_of(head).modification(base, head) if base.action in kind_of(head).actions \
        else {}
    return ModifiedChange.model_validate({
        "target": kind, "service": head.service,
        "user_id": head.user_id,  # a grant's user (a route's third part is its key)
        "action": head.action.value, "base_action": base.action.value,
        "idempotency_key": head.idempotency_key, "base_idempotency_key": base.idempotency_key,
        "summary": head.summary, "base_summary": base.summary, **extra})


def review(*, base_ref: str, base_commit: str | None, head_commit: str | None,
           base_plan: Plan | None, head_plan: Plan, base: DesiredState | None,
           head: DesiredState) -> Review:
    """Classify every change of ``head_plan`` against ``base_plan`` (same snapshot). A
    base whose desired state is invalid (``None``) plans nothing: every change is the PR's."""
    base_changes = base_plan.changes if base_plan is not None else ()
    head_keys = {c.idempotency_key for c in head_plan.changes}
    base_keys = {c.idempotency_key for c in base_changes}
    # Equal keys first (the same change), then the same target (the same thing written
    # differently); what is left is the PR's own (head) or no longer made (base).
    unmatched_base: dict[tuple[Target, str, str | None], list[Change]] = {}
    for change in base_changes:
        if change.idempotency_key not in head_keys:
            unmatched_base.setdefault(target_of(change), []).append(change)
    origins: dict[str, Origin] = {}
    modified: list[ModifiedChange] = []
    for change in head_plan.changes:
        if change.idempotency_key in base_keys:
            origins[change.idempotency_key] = Origin.PENDING
            continue
        same_target = unmatched_base.get(target_of(change))
        if same_target:
            modified.append(modification(same_target.pop(0), change))
            origins[change.idempotency_key] = Origin.MODIFIED
        else:
            origins[change.idempotency_key] = Origin.INTRODUCED
    replaced = {m.base_idempotency_key for m in modified}
    removed = tuple(RemovedChange(action=c.action.value, service=c.service, summary=c.summary,
                                  idempotency_key=c.idempotency_key)
                    for c in base_changes
                    if c.idempotency_key not in head_keys and c.idempotency_key not in replaced)
    before = {_blocker_key(r): r for r in _refs(base_plan)} if base_plan is not None else {}
    after = {_blocker_key(r): r for r in _refs(head_plan)}
    if base is None:
        touched, settings_changed = tuple(sorted(s.name for s in head.services)), True
    else:
        touched, settings_changed = touched_services(base, head)
    return Review(
        base_ref=base_ref, base_commit=base_commit, head_commit=head_commit,
        base_verdict=base_plan.verdict.value if base_plan is not None else "invalid",
        origins=origins, modified=tuple(modified), removed=removed, touched=touched,
        settings_changed=settings_changed,
        blockers_introduced=tuple(after[k] for k in sorted(after.keys() - before.keys(),
                                                           key=str)),
        blockers_cleared=tuple(before[k] for k in sorted(before.keys() - after.keys(),
                                                         key=str)))


def _refs(plan: Plan) -> list[BlockerRef]:
    return [BlockerRef(code=b.code.value, service=b.service, cluster=b.cluster,
                       message=b.message, upstream_code=b.upstream_code)
            for b in plan.blockers]
