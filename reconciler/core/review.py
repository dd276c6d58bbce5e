"""What a pull request changes: the head's plan against the base's, over one live snapshot.

Owns ``review(base, head, ...)``, pure. Planning is a pure function, so the desired state
at the base and at the head are planned against the *same* snapshot and compared: each
change of the head plan is either **introduced** by the PR (the base would not make it)
or **already pending** on the base (it would happen anyway); each change of the base plan
the head no longer makes is **removed** by the PR. Changes are the same change when their
idempotency keys are equal -- a key is a function of the action, the service, the
payload and the live preconditions, and the snapshot is shared, so equal keys mean equal
changes. Blockers keep their meaning; those the PR adds or clears are listed too.

Must not: read git or the network (the engine hands both plans over), or render.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from reconciler.core.desired import DesiredState

if TYPE_CHECKING:  # ``core.plans`` imports this module: a plan carries its review
    from reconciler.core.plans import Plan


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Origin(StrEnum):
    INTRODUCED = "introduced"  # this PR causes it
    PENDING = "already_pending"  # pending on the base too: it would happen anyway
    REMOVED = "removed"  # pending on the base, no longer after this PR


class BlockerRef(_Model):
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


class Review(_Model):
    """The PR's part of the plan. The plan it is attached to is the head's."""

    base_ref: str
    base_commit: str | None = None
    head_commit: str | None = None
    base_verdict: str  # go | no_go | no_changes | invalid (the base's desired state is)
    #: idempotency key of every change of the head plan -> introduced | already_pending
    origins: dict[str, Origin]
    #: changes of the base plan the head does not make, as the base planned them
    removed: tuple[RemovedChange, ...] = ()
    #: services whose desired state (Service document, or a grant on it) the PR edits
    touched: tuple[str, ...] = ()
    settings_changed: bool = False
    blockers_introduced: tuple[BlockerRef, ...] = ()
    blockers_cleared: tuple[BlockerRef, ...] = ()

    def origin(self, key: str) -> Origin:
        return self.origins.get(key, Origin.INTRODUCED)

    @property
    def introduced(self) -> tuple[str, ...]:
        return tuple(k for k, o in self.origins.items() if o is Origin.INTRODUCED)

    @property
    def changes_nothing_managed(self) -> bool:
        """No introduced or removed change, no managed document edited, no new blocker."""
        return not (self.introduced or self.removed or self.touched or self.settings_changed
                    or self.blockers_introduced or self.blockers_cleared)


class RemovedChange(_Model):
    """A change the base would make and the head no longer does (kept small: a sentence)."""

    action: str
    service: str
    summary: str
    idempotency_key: str


Review.model_rebuild()


def _blocker_key(b: BlockerRef) -> tuple[str, str | None, str | None, str | None]:
    return (b.code, b.service, b.cluster, b.upstream_code)


def touched_services(base: DesiredState, head: DesiredState) -> tuple[tuple[str, ...], bool]:
    """Services whose document or grants differ between base and head; and whether the
    Settings document changed (it may change every service's plan)."""
    before = {s.name: s for s in base.services}
    after = {s.name: s for s in head.services}
    grants_before = base.desired_grants()
    grants_after = head.desired_grants()
    ids = {s.service_id: s.name for s in (*base.services, *head.services)}
    touched = {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}
    for key in grants_before.keys() | grants_after.keys():
        if grants_before.get(key) != grants_after.get(key):
            touched.add(ids.get(key[1], key[1]))
    return tuple(sorted(touched)), base.settings != head.settings


def review(*, base_ref: str, base_commit: str | None, head_commit: str | None,
           base_plan: Plan | None, head_plan: Plan, base: DesiredState | None,
           head: DesiredState) -> Review:
    """Classify every change of ``head_plan`` against ``base_plan`` (same snapshot). A
    base whose desired state is invalid (``None``) plans nothing: every change is the PR's."""
    base_changes = base_plan.changes if base_plan is not None else ()
    base_keys = {c.idempotency_key for c in base_changes}
    head_keys = {c.idempotency_key for c in head_plan.changes}
    origins = {c.idempotency_key: Origin.PENDING if c.idempotency_key in base_keys
               else Origin.INTRODUCED for c in head_plan.changes}
    removed = tuple(RemovedChange(action=c.action.value, service=c.service, summary=c.summary,
                                  idempotency_key=c.idempotency_key)
                    for c in base_changes if c.idempotency_key not in head_keys)
    before = {_blocker_key(r): r for r in _refs(base_plan)} if base_plan is not None else {}
    after = {_blocker_key(r): r for r in _refs(head_plan)}
    if base is None:
        touched, settings_changed = tuple(sorted(s.name for s in head.services)), True
    else:
        touched, settings_changed = touched_services(base, head)
    return Review(
        base_ref=base_ref, base_commit=base_commit, head_commit=head_commit,
        base_verdict=base_plan.verdict.value if base_plan is not None else "invalid",
        origins=origins, removed=removed, touched=touched, settings_changed=settings_changed,
        blockers_introduced=tuple(after[k] for k in sorted(after.keys() - before.keys(),
                                                           key=str)),
        blockers_cleared=tuple(before[k] for k in sorted(before.keys() - after.keys(),
                                                         key=str)))


def _refs(plan: Plan) -> list[BlockerRef]:
    return [BlockerRef(code=b.code.value, service=b.service, cluster=b.cluster,
                       message=b.message, upstream_code=b.upstream_code)
            for b in plan.blockers]
