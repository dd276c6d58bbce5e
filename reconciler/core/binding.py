"""Is a saved plan what apply re-derives now? The comparison, pure.

Owns the rule that binds a reviewed plan to its execution: what decides its meaning --
the git tree of the desired-state directory (its tree id) -- and the environment it was
made for (control plane, gateway, expected clusters, desired-state path) must equal what
apply reads now, and its changes (same idempotency keys, same content) must equal what a
fresh plan says. The commit id is not bound: a plan reviewed on a pull request's merge
preview applies after the real merge when the merged desired-state tree is the same tree
(``source``); when it is not, the files that differ are named (from the file lists both
sides carry, so the reviewed tree's objects need not be in this clone). A plan saved by
reconcile < 2.3 carries no tree and stays bound to its commit; a worktree preview
(``plan --worktree``) is never applied.

A change the saved plan holds and the fresh one does not is accepted only when the
staleness check calls it already live or ours (a rerun after a crash); the caller passes
those keys. Each difference is one sentence naming both sides.

A ``create`` is bound to the preflight the plan saw: its payload carries the request and
the fence of that report, so a fresh preflight that yields another fence (version,
digest, configuration digest, namespace) is another creation -- named field by field,
never sent in the reviewed one's place (same key or not: the key follows the intent, the
fence follows the report). The one exception is the revision: a preflight binds the
commit it was asked at (``sourceRevision``), so after a merge the fresh preflight is
asked at the merged commit; when the tree is the one reviewed, a creation that differs
only in its revision (and the request id derived from it) and whose fresh preflight is
GO for the same intent digest is the reviewed creation, sent with the new revision.

Must not: read files or the network; the caller hands over both plans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from reconciler.core.kinds import CreateChange, kind_of
from reconciler.core.kinds.create import differences
from reconciler.core.plans import Change, Plan
from reconciler.core.preflight import Status


@dataclass(frozen=True)
class Where:
    """Where apply runs now: the values a saved plan must have been made for. ``commit``
    is where apply runs (recorded, compared only with a plan older than 2.3); ``tree`` and
    ``files`` are the desired-state directory's tree at that commit."""

    control_plane_url: str
    gateway: str
    repo_root: str | None
    repo_path: str | None
    commit: str | None
    tree: str | None = None
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)


class Unbound(StrEnum):
    """Why a saved plan's desired state is not the one apply reads."""

    PREVIEW = "preview"  # a worktree preview: never applied
    COMMIT = "commit"  # a plan of format < 2.3, bound to a commit HEAD is not at
    TREE = "tree"  # the desired-state tree differs from the reviewed one


@dataclass(frozen=True)
class SourceRefusal:
    kind: Unbound
    message: str
    files: tuple[str, ...] = ()  # the files that differ (TREE), relative to the directory


#: How many differing files a refusal names before it counts the rest.
FILES_NAMED = 50


def source(saved: Plan, now: Where) -> SourceRefusal | None:
    """Whether the desired state apply reads now is the one the plan was made from."""
    if saved.worktree:
        return SourceRefusal(Unbound.PREVIEW, (
            "the plan is a preview of uncommitted changes (plan --worktree): it can be shown "
            "and commented, never applied; commit the changes, plan again and apply that "
            "plan"))
    if saved.desired_tree is None:
        if saved.commit != now.commit:
            return SourceRefusal(Unbound.COMMIT, (
                f"the plan was made from commit {saved.commit or '<none>'} but the repo is at "
                f"{now.commit or '<none>'}"
                + ("; it carries no desired-state tree (saved by reconcile before plan "
                   "format 2.3, or outside git), so it is bound to its commit"
                   if saved.commit else "") + "; plan again"))
        return None
    if saved.desired_tree == now.tree:
        return None
    files = tree_diff(saved.desired_files, now.files)
    shown = files[:FILES_NAMED]
    listed = ", ".join(shown) + (f" and {len(files) - len(shown)} more"
                                 if len(files) > len(shown) else "")
    return SourceRefusal(Unbound.TREE, (
        f"the desired state at commit {_short(now.commit)} (tree {_short(now.tree)}) is not "
        f"the one reviewed (tree {_short(saved.desired_tree)}, planned at commit "
        f"{_short(saved.commit)}): "
        + (f"{len(files)} file(s) differ: {listed}" if files
           else "no file's content differs, their modes do")), tuple(files))


def tree_diff(then: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """The files that differ between two trees (as ``git diff --name-only``), each with
    what happened to it, sorted by path."""
    out = []
    for path in sorted(set(then) | set(now)):
        if path not in now:
            out.append(f"{path} (deleted)")
        elif path not in then:
            out.append(f"{path} (added)")
        elif then[path] != now[path]:
            out.append(f"{path} (modified)")
    return out


def _short(value: str | None) -> str:
    return value[:12] if value else "<none>"


def environment(saved: Plan, now: Where) -> list[str]:
    """What differs between the environment the plan was made for and this one."""
    diffs = []
    pairs = [("control plane", saved.control_plane_url, now.control_plane_url),
             ("gateway", saved.gateway, now.gateway)]
    for label, then, current in pairs:
        if then != current:
            diffs.append(f"{label}: the plan was made for {then or '<none>'}, "
                         f"this apply would use {current or '<none>'}")
    if _rel(saved.repo_root, saved.repo_path) != _rel(now.repo_root, now.repo_path):
        diffs.append(f"desired-state path: the plan was made from {saved.repo_path or '<none>'}, "
                     f"this apply reads {now.repo_path or '<none>'}")
    return diffs


def desired_path(saved: Plan) -> str | None:
    """Where the plan's desired state is inside its repository ("." for its top; None for
    a plan made outside git): what a checkout elsewhere -- the merged one on a CI runner,
    a downloaded artifact's -- holds at the same place. The recorded absolute path is
    where it was made, information only."""
    if saved.repo_root is None:
        return None
    return _rel(saved.repo_root, saved.repo_path)


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


#: Fields a creation's payload takes from the commit it was planned at (the preflight's
#: ``sourceRevision``, anywhere in the request, its evidence and the fence, and the request
#: id derived from it).
REVISION_FIELDS = frozenset({"sourceRevision", "source_revision", "requestId", "request_id"})


def _without_revision(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_revision(v) for k, v in value.items() if k not in REVISION_FIELDS}
    if isinstance(value, list):
        return [_without_revision(v) for v in value]
    return value


def _intent(plan: Plan, service: str) -> tuple[str | None, Status | None]:
    pre = next((p for p in plan.preflights if p.service == service and p.purpose == "create"),
               None)
    return (None, None) if pre is None else (pre.intent_digest, pre.status)


def _same_but_revision(saved: Plan, fresh: Plan, then: Change, now: Change) -> bool:
    """The fresh creation is the reviewed one asked again at another commit: only the
    revision-bound fields differ, the intent digest is the same, the fresh preflight GO."""
    if _without_revision(_content(then)) != _without_revision(_content(now)):
        return False
    (digest_then, _), (digest_now, status) = _intent(saved, then.service), \
        _intent(fresh, now.service)
    return digest_then is not None and digest_then == digest_now and status is Status.GO


def changes(saved: Plan, fresh: Plan, settled: Collection[str] = (), *,
            same_tree: bool = False) -> list[str]:
    """Changes that are not the same in both plans. ``settled``: keys of saved changes a
    rerun may find already done, which the fresh plan rightly no longer holds.
    ``same_tree``: the desired-state tree is the reviewed one, so a creation whose fresh
    preflight was asked at another commit may differ in its revision (nothing else)."""
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
            if kind_of(change).rebinds:
                if same_tree and _same_but_revision(saved, fresh, change, other):
                    continue
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
                if kind_of(c).rebinds and k not in other and k not in settled}
    then, now = creates(mine, theirs), creates(theirs, mine)
    return {service: (then[service], now[service]) for service in then if service in now}


def _creation_diffs(then: Change, now: Change) -> list[str]:
    """What differs between two creations of one service, field by field."""
    if not (isinstance(then, CreateChange) and isinstance(now, CreateChange)):
        return ["one of them carries no creation"]
    return differences(then, now)
