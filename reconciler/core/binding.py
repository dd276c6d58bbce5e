"""Is a saved plan what apply re-derives now? The comparison, pure.

Owns the rule that binds a reviewed plan to its execution: the environment it was made
for (control plane, gateway, expected clusters, repo and desired-state path, commit) and
its changes (same idempotency keys, same content) must equal what a fresh plan says.
A change the saved plan holds and the fresh one does not is accepted only when the
staleness check calls it already live or ours (a rerun after a crash); the caller passes
those keys. Each difference is one sentence naming both sides.

Must not: read files or the network; the caller hands over both plans.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from reconciler.core.plans import Change, Plan


@dataclass(frozen=True)
class Where:
    """Where apply runs now: the values a saved plan must have been made for."""

    control_plane_url: str
    gateway: str
    repo_root: str | None
    repo_path: str | None
    commit: str | None


def environment(saved: Plan, now: Where) -> list[str]:
    """What differs between the environment the plan was made for and this one."""
    diffs = []
    pairs = [("control plane", saved.control_plane_url, now.control_plane_url),
             ("gateway", saved.gateway, now.gateway),
             ("commit", saved.commit, now.commit)]
    for label, then, current in pairs:
        if then != current:
            diffs.append(f"{label}: the plan was made for {then or '<none>'}, "
                         f"this apply would use {current or '<none>'}")
    if _rel(saved.repo_root, saved.repo_path) != _rel(now.repo_root, now.repo_path):
        diffs.append(f"desired-state path: the plan was made from {saved.repo_path or '<none>'}, "
                     f"this apply reads {now.repo_path or '<none>'}")
    return diffs


def _rel(root: str | None, path: str | None) -> str | None:
    """The desired-state path inside its repo: a clone elsewhere is the same repo path."""
    if root is None or path is None:
        return path
    if path == root:
        return "."
    prefix = root.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else path


def clusters(saved: Plan, fresh: Plan) -> list[str]:
    then, now = set(saved.expected_clusters), set(fresh.expected_clusters)
    if then == now:
        return []
    bits = []
    if now - then:
        bits.append("now also " + ", ".join(sorted(now - then)))
    if then - now:
        bits.append("no longer " + ", ".join(sorted(then - now)))
    return [f"expected clusters: the plan was reviewed for {', '.join(sorted(then)) or '<none>'}"
            f"; {'; '.join(bits)}"]


def _content(change: Change) -> dict[str, object]:
    return change.model_dump(mode="json")


def changes(saved: Plan, fresh: Plan, settled: Collection[str] = ()) -> list[str]:
    """Changes that are not the same in both plans. ``settled``: keys of saved changes a
    rerun may find already done, which the fresh plan rightly no longer holds."""
    mine = {c.idempotency_key: c for c in saved.changes}
    theirs = {c.idempotency_key: c for c in fresh.changes}
    diffs = []
    for key, change in mine.items():
        other = theirs.get(key)
        if other is None:
            if key not in settled:
                diffs.append(f"the plan holds {change.action.value} {change.service}"
                             + (f" ({change.user_id})" if change.user_id else "")
                             + f" [{key}], which a fresh plan does not: {change.summary}")
        elif _content(other) != _content(change):
            fields = sorted(k for k, v in _content(change).items() if _content(other).get(k) != v)
            diffs.append(f"{change.action.value} {change.service} [{key}] differs from a fresh "
                         f"plan in {', '.join(fields)}")
    for key, change in theirs.items():
        if key not in mine:
            diffs.append(f"a fresh plan also holds {change.action.value} {change.service}"
                         + (f" ({change.user_id})" if change.user_id else "")
                         + f" [{key}], which the plan does not: {change.summary}")
    return diffs
