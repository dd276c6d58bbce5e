"""What changed between two plans: the watcher prints this instead of the whole plan.

Owns the comparison of two plan values by identity of their items (a change is the same
change when its action, service and user match; a blocker or drift item when its code,
service and cluster match). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.core.plans import VERBS, Change, Plan


@dataclass(frozen=True)
class PlanDiff:
    verdict_before: str | None
    verdict_after: str
    added: tuple[str, ...]  # one line per item that appeared
    removed: tuple[str, ...]  # one line per item that went away

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed and self.verdict_before == self.verdict_after


def _change_id(change: Change) -> tuple[str, str, str]:
    return (change.action.value, change.service, change.user_id or "")


def _items(plan: Plan) -> dict[tuple[str, ...], str]:
    items: dict[tuple[str, ...], str] = {}
    for change in plan.changes:
        items[("change", *_change_id(change), change.idempotency_key)] = \
            f"{VERBS[change.action]}: {change.summary}"
    for blocker in plan.blockers:
        items[("blocker", blocker.code, blocker.service or "", blocker.cluster or "")] = \
            f"blocker {blocker.code}: {blocker.message}"
    for drift in plan.drift:
        items[("drift", drift.code, drift.service or "", drift.cluster or "", drift.message)] = \
            f"drift {drift.code}: {drift.message}"
    for name in plan.converging:
        items[("converging", name)] = f"converging: {name}"
    return items


def diff(before: Plan | None, after: Plan) -> PlanDiff:
    old = _items(before) if before is not None else {}
    new = _items(after)
    return PlanDiff(
        verdict_before=before.verdict.value if before is not None else None,
        verdict_after=after.verdict.value,
        added=tuple(new[k] for k in sorted(new.keys() - old.keys())),
        removed=tuple(old[k] for k in sorted(old.keys() - new.keys())),
    )
