"""Is a saved plan what apply re-derives now? The comparison, pure.

Owns the rule that binds a reviewed plan to its execution: the environment it was made
for (control plane, gateway, expected clusters, repo and desired-state path, commit) and
its changes (same idempotency keys, same content) must equal what a fresh plan says.
A change the saved plan holds and the fresh one does not is accepted only when the
staleness check calls it already live or ours (a rerun after a crash); the caller passes
those keys. Each difference is one sentence naming both sides.

A ``create`` is bound to the preflight the plan saw: its payload carries the request and
the fence of that report, so a fresh preflight that yields another fence (revision,
version, digest, configuration digest, namespace) is another creation -- named field by
field, never sent in the reviewed one's place (same key or not: the key follows the
intent, the fence follows the report).

Must not: read files or the network; the caller hands over both plans.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from reconciler.core.plans import Action, Change, Plan


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
    rebound = _rebound_creations(mine, theirs, settled)
    for service, (then, now) in sorted(rebound.items()):
        diffs.append(f"create {service}: the fresh preflight binds another creation than the "
                     f"reviewed one [{then.idempotency_key} → {now.idempotency_key}]: "
                     + "; ".join(_creation_diffs(then, now)))
    paired = {c.idempotency_key for pair in rebound.values() for c in pair}
    for key, change in mine.items():
        other = theirs.get(key)
        if key in paired:
            continue
        if other is None:
            if key not in settled:
                diffs.append(f"the plan holds {change.action.value} {change.service}"
                             + (f" ({change.user_id})" if change.user_id else "")
                             + f" [{key}], which a fresh plan does not: {change.summary}")
        elif _content(other) != _content(change):
            if change.action is Action.CREATE:
                diffs.append(f"create {change.service} [{key}]: the fresh preflight binds "
                             "another creation than the reviewed one: "
                             + "; ".join(_creation_diffs(change, other)))
                continue
            fields = sorted(k for k, v in _content(change).items() if _content(other).get(k) != v)
            diffs.append(f"{change.action.value} {change.service} [{key}] differs from a fresh "
                         f"plan in {', '.join(fields)}")
    for key, change in theirs.items():
        if key not in mine and key not in paired:
            diffs.append(f"a fresh plan also holds {change.action.value} {change.service}"
                         + (f" ({change.user_id})" if change.user_id else "")
                         + f" [{key}], which the plan does not: {change.summary}")
    return diffs


def _rebound_creations(mine: dict[str, Change], theirs: dict[str, Change],
                       settled: Collection[str]) -> dict[str, tuple[Change, Change]]:
    """Service -> (saved, fresh) for a creation whose key changed between the plans."""
    def creates(changes: dict[str, Change], other: dict[str, Change]) -> dict[str, Change]:
        return {c.service: c for k, c in changes.items()
                if c.action is Action.CREATE and k not in other and k not in settled}
    then, now = creates(mine, theirs), creates(theirs, mine)
    return {service: (then[service], now[service]) for service in then if service in now}


def _creation_diffs(then: Change, now: Change) -> list[str]:
    """What differs between two creations of one service, field by field."""
    a, b = then.creation, now.creation
    if a is None or b is None:
        return ["one of them carries no creation"]
    out = []
    fence_a = a.fence.model_dump() if a.fence else {}
    fence_b = b.fence.model_dump() if b.fence else {}
    for field in sorted(set(fence_a) | set(fence_b)):
        if fence_a.get(field) != fence_b.get(field):
            out.append(f"fence.{field} {fence_a.get(field) or '<none>'} → "
                       f"{fence_b.get(field) or '<none>'}")
    for field in sorted(set(a.preflight) | set(b.preflight)):
        if field not in ("requestId", "sourceRevision", "version", "intentDigest",
                         "ociIndexDigest", "proposedNamespace") \
                and a.preflight.get(field) != b.preflight.get(field):
            out.append(f"preflight.{field} differs")
    if a.service != b.service:
        out.append("service (name, appId, registry, repository, tag or egress) differs")
    return out or ["the request differs"]
