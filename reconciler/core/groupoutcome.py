"""One outcome per commit for a coordinated group of watchers (``watch --coordinate``).
Pure.

Owns what a member says about its shards at a commit (``ShardOutcome``: proven,
failed, blocked by a NO-GO, or changes waiting), how those words are written to and
read from the coordination store (``to_json``/``from_json``), and the group's single
verdict over every shard (``aggregate``), with the notification that verdict earns
(``notification``) and the "k of N shards reported" word said until the set is
complete (``pending``).

Why: each member sees only its own shards. Told alone, the members overwrote each
other's commit status (success, failure, success: last one wins), a member owning no
shard called the commit converged "(0 service(s))", and a member paused past its lease
called writes failed that the new owner had applied. So a member only *records* its
shards' outcomes; the commit's status, deployment and chat message are decided here,
once every shard of the group has a recorded outcome for that commit:

- failure if any shard failed (naming the shard, the service and the cluster), else a
  NO-GO if any shard's plan is NO-GO, else "changes waiting" if a shard (of a group
  that does not apply) has changes waiting, else success -- only when every shard was
  proven;
- a member that owns no shard records nothing, so it never completes a set alone;
- a shard's outcome is the last one recorded by its owner at the time (the store's
  write is fenced on the owner key: an owner that lost its lease records nothing).

Must not: do I/O, read a clock, or judge convergence itself (it reads the plan's
proofs and the gate's report: the one judge's words).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reconciler.core.notifying import Kind, Notification, ServiceLine, key_of
from reconciler.core.outcomes import ApplyReport
from reconciler.core.plans import Plan, Verdict


class ShardState(StrEnum):
    """A shard's outcome at a commit, as its owner records it."""

    PROVEN = "proven"  # every service of the shard proven at the commit
    FAILED = "failed"  # a change refused, failed or in doubt, or the gate did not prove it
    BLOCKED = "blocked"  # the owner's plan is NO-GO: nothing of the shard is applied
    WAITING = "waiting"  # changes waiting (recorded only by a group that does not apply)


#: The states that end a shard's part of a commit for a group that applies: a shard
#: whose changes are waiting to be applied has not reported yet.
FINAL = frozenset({ShardState.PROVEN, ShardState.FAILED, ShardState.BLOCKED})


#: Every word said once per commit (``GroupVerdict.claim``): a pending word is said only
#: while none of them was claimed.
FINAL_WORDS = ("success", "failure", "no_go", "planned")


@dataclass(frozen=True)
class Failed:
    """One service of a failed shard: where it is not proven, and why."""

    service: str
    clusters: tuple[str, ...]
    reason: str
    stage: str = "gate"  # "apply": its write went wrong; "gate": sent, not proven

    def describe(self) -> str:
        where = f" on {', '.join(self.clusters)}" if self.clusters else ""
        return f"{self.service}{where}: {self.reason}" if self.reason else \
            f"{self.service}{where}"


@dataclass(frozen=True)
class ShardOutcome:
    """What the owner of ``shard`` says about it at one commit."""

    shard: int
    state: ShardState
    services: int = 0  # how many services the shard holds
    changes: int = 0  # how many changes the owner applied for it at this commit
    failed: tuple[Failed, ...] = ()
    blockers: tuple[str, ...] = ()
    member: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"shard": self.shard, "state": self.state.value, "services": self.services,
                "changes": self.changes, "member": self.member,
                "failed": [{"service": f.service, "clusters": list(f.clusters),
                            "reason": f.reason, "stage": f.stage} for f in self.failed],
                "blockers": list(self.blockers)}

    @classmethod
    def from_json(cls, data: object) -> ShardOutcome | None:
        """The outcome a store value holds; None when it is not one (another version, an
        edit): such a shard has not reported."""
        if not isinstance(data, dict):
            return None
        try:
            failed = tuple(Failed(str(f["service"]), tuple(str(c) for c in f["clusters"]),
                                  str(f.get("reason", "")), str(f.get("stage", "gate")))
                           for f in data.get("failed", ()))
            return cls(shard=int(data["shard"]), state=ShardState(data["state"]),
                       services=int(data.get("services", 0)),
                       changes=int(data.get("changes", 0)), failed=failed,
                       blockers=tuple(str(b) for b in data.get("blockers", ())),
                       member=str(data.get("member", "")))
        except (KeyError, TypeError, ValueError):
            return None


def shard_outcomes(plan: Plan, report: ApplyReport | None, *, shards: Iterable[int],
                   shard_of: Mapping[str, int], applying: bool,
                   member: str = "") -> tuple[ShardOutcome, ...]:
    """The outcomes a member records for ``shards`` (those its plan covered) from its
    ``plan`` (restricted to its shards) and, after an apply, its ``report``.
    ``shard_of``: service name -> shard, for every service of the desired state.

    Nothing for a plan of no commit (dirty, a preview, outside git), and nothing for a
    shard whose changes are waiting when the group applies them (its owner reports it
    when the apply ends). A shard with no service is proven: nothing to do."""
    if plan.commit is None or plan.dirty or plan.worktree:
        return ()
    wanted = sorted(set(shards))
    members: dict[int, list[str]] = {s: [] for s in wanted}
    for name, shard in shard_of.items():
        if shard in members:
            members[shard].append(name)
    out = []
    if plan.verdict is Verdict.NO_GO:
        for shard in wanted:
            inside = set(members[shard])
            own = tuple(f"{b.code.value}: {b.message}" for b in plan.blockers
                        if b.service is None or b.service in inside)
            out.append(ShardOutcome(shard, ShardState.BLOCKED, len(inside), blockers=own or
                                    tuple(f"{b.code.value}: {b.message}"
                                          for b in plan.blockers), member=member))
        return tuple(out)
    proofs = {p.service: p for p in plan.proofs}
    if report is not None and report.gate is not None:
        proofs.update({p.service: p for p in report.gate.proofs})
    expected = {e.service: e.expected_clusters for e in plan.evidence}
    changed = {c.service for c in plan.changes}
    broken = {} if report is None else {r.change.service: r for r in report.failures()}
    applied: dict[str, int] = {}
    if report is not None:
        for r in report.results:
            applied[r.change.service] = applied.get(r.change.service, 0) + 1
    for shard in wanted:
        names = sorted(members[shard])
        failed: list[Failed] = []
        waiting = False
        for name in names:
            proof = proofs.get(name)
            if name in broken:
                result = broken[name]
                failed.append(Failed(name, expected.get(name, plan.expected_clusters),
                                     f"{result.outcome.value}: {result.detail}".rstrip(": "),
                                     stage="apply"))
            elif report is not None and proof is not None and not proof.converged:
                failed.append(Failed(name, tuple(c.cluster for c in proof.pending()),
                                     "; ".join(proof.reasons()) or "not proven"))
            elif report is None and (name in changed
                                     or (proof is not None and not proof.converged)):
                waiting = True
        changes = sum(applied.get(n, 0) for n in names)
        if failed:
            out.append(ShardOutcome(shard, ShardState.FAILED, len(names), changes,
                                    tuple(failed), member=member))
        elif waiting:
            if not applying:
                out.append(ShardOutcome(shard, ShardState.WAITING, len(names), member=member))
        else:
            out.append(ShardOutcome(shard, ShardState.PROVEN, len(names), changes,
                                    member=member))
    return tuple(out)


@dataclass(frozen=True)
class GroupVerdict:
    """The group's word on a commit: what every shard reported so far."""

    commit: str
    count: int  # the group's shard count
    reported: tuple[ShardOutcome, ...]  # by shard, final ones only

    @property
    def complete(self) -> bool:
        return {o.shard for o in self.reported} == set(range(self.count))

    @property
    def failed(self) -> tuple[ShardOutcome, ...]:
        return tuple(o for o in self.reported if o.state is ShardState.FAILED)

    @property
    def kind(self) -> Kind | None:
        """The kind the commit earns, None until every shard reported."""
        if not self.complete:
            return None
        states = {o.state for o in self.reported}
        if ShardState.FAILED in states:
            stages = {f.stage for o in self.failed for f in o.failed}
            return Kind.APPLY_FAILED if "apply" in stages else Kind.GATE_FAILED
        if ShardState.BLOCKED in states:
            return Kind.NO_GO
        if ShardState.WAITING in states:
            return Kind.PLANNED
        return Kind.APPLIED if any(o.changes for o in self.reported) else Kind.CONVERGED

    def claim(self) -> str | None:
        """The name of what is said once per commit (the store's create-if-absent key):
        one success (``applied`` covers ``converged``), one failure, one NO-GO, one
        "changes waiting". None until the set is complete."""
        kind = self.kind
        if kind is None:
            return None
        return {Kind.APPLIED: "success", Kind.CONVERGED: "success",
                Kind.APPLY_FAILED: "failure", Kind.GATE_FAILED: "failure"}.get(
                    kind, kind.value)


def aggregate(commit: str, count: int, recorded: Mapping[int, ShardOutcome],
              *, applying: bool) -> GroupVerdict:
    """The group's verdict from the outcomes recorded for ``commit`` (shard -> outcome):
    outside ``0 .. count-1`` ignored; a "waiting" shard of a group that applies has not
    reported."""
    final = FINAL if applying else FINAL | {ShardState.WAITING}
    reported = tuple(recorded[s] for s in sorted(recorded)
                     if 0 <= s < count and recorded[s].state in final)
    return GroupVerdict(commit, count, reported)


def _shards(outcomes: Iterable[ShardOutcome]) -> str:
    return ", ".join(str(o.shard) for o in outcomes)


def notification(verdict: GroupVerdict, plan: Plan, *, environment: str,
                 group: str) -> Notification | None:
    """What the complete set says, once: None while it is not complete."""
    kind = verdict.kind
    if kind is None:
        return None
    commit = verdict.commit
    at = commit[:12]
    n = verdict.count
    services: tuple[ServiceLine, ...] = ()
    blockers: tuple[str, ...] = ()
    if kind in (Kind.APPLY_FAILED, Kind.GATE_FAILED):
        lines = [(o.shard, f) for o in verdict.failed for f in o.failed]
        first_shard, first = lines[0]
        more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
        summary = (f"{environment}: commit {at} failed on shard {first_shard} of group "
                   f"{group}: {first.describe()}{more}; {len(verdict.failed)} of {n} "
                   "shard(s) failed")
        services = tuple(ServiceLine(service=f.service, clusters=f.clusters,
                                     reasons=(f"shard {s}: {f.reason}",))
                         for s, f in lines)
    elif kind is Kind.NO_GO:
        blocked = [o for o in verdict.reported if o.state is ShardState.BLOCKED]
        blockers = tuple(dict.fromkeys(b for o in blocked for b in o.blockers))
        summary = (f"{environment}: commit {at} is NO-GO on shard(s) {_shards(blocked)} of "
                   f"group {group}: " + (blockers[0] if blockers else "blocked")
                   + (f" (+{len(blockers) - 1} more)" if len(blockers) > 1 else ""))
    elif kind is Kind.PLANNED:
        waiting = [o for o in verdict.reported if o.state is ShardState.WAITING]
        summary = (f"{environment}: commit {at} has changes waiting on shard(s) "
                   f"{_shards(waiting)} of group {group}")
    elif kind is Kind.APPLIED:
        changes = sum(o.changes for o in verdict.reported)
        summary = (f"{environment}: commit {at} applied and proven on every expected "
                   f"cluster: {changes} change(s), all {n} shard(s) of group {group} proven")
    else:
        total = sum(o.services for o in verdict.reported)
        summary = (f"{environment}: commit {at} is converged on every expected cluster "
                   f"({total} service(s), all {n} shard(s) of group {group} proven)")
    return Notification(kind=kind, environment=environment, commit=commit, summary=summary,
                        key=key_of(kind, environment, commit, f"group:{group}"),
                        services=services, blockers=blockers,
                        control_plane_url=plan.control_plane_url,
                        created_at=plan.created_at)


def pending(verdict: GroupVerdict, plan: Plan, *, environment: str,
            group: str) -> Notification:
    """Until the set is complete: a pending word, "k of N shards reported"."""
    k = len(verdict.reported)
    return Notification(
        kind=Kind.PLANNED, environment=environment, commit=verdict.commit,
        summary=(f"{environment}: commit {verdict.commit[:12]}: {k} of {verdict.count} "
                 f"shards reported (group {group})"),
        # One key per count: "2 of 3" is news after "1 of 3", never a repeat of it.
        key=key_of(Kind.PLANNED, environment, verdict.commit, f"group:{group}:pending:{k}"),
        control_plane_url=plan.control_plane_url, created_at=plan.created_at)
