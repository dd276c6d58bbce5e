"""The web view's model (issue 35): what the fleet, service and pipeline pages show.

Owns the four words a cell of the fleet grid says -- ``proven`` (the judge proves the
pinned digest on every expected cluster), ``converging`` (the clusters run something
else and say nothing is wrong), ``failing`` (a cluster states an error), ``unknown`` (a
silent cluster, missing evidence, or a live side the watcher cannot read) -- derived from
``core.status`` rows, never a second opinion: ``proven`` is exactly the judge's
``converged``. When the live side is unread, every cell is ``unknown``: the page never
shows the last read's green as if it were now.

Also owns the other facts a page shows beside ``core.status.Status``: how the last read
of the live side went (``LiveRead``), the current plan's pending changes, the journal's
history in a few words, and a place for per-cluster verification results
(``View.verification``) that verification checks fill when they are declared.

Pure: no I/O; every time is given (``now_ms``). Rendering is ``render.webview``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reconciler.core.evidence import Proof
from reconciler.core.status import ClusterRow, ServiceRow, Status
from reconciler.core.verification import Outcome
from reconciler.core.whys import JUDGE_UNPROVEN, Why


class CellState(StrEnum):
    PROVEN = "proven"
    CONVERGING = "converging"
    FAILING = "failing"
    UNKNOWN = "unknown"


#: Why a cluster is unknown rather than converging: the judge's gaps in evidence.
_UNKNOWN_WHYS = frozenset(w.value for w in JUDGE_UNPROVEN) | {Why.NO_RECORD.value}


@dataclass(frozen=True)
class LiveRead:
    """How the watcher's reads of the live side went. ``ok``: the last read succeeded;
    ``unknown_since_ms``: the first failed read after the last success (None while ok)."""

    ok: bool
    last_success_ms: int | None = None
    unknown_since_ms: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ClusterCheck:
    """One verification check's result on one cluster (``ok`` None: not run yet)."""

    name: str
    ok: bool | None
    detail: str = ""


@dataclass(frozen=True)
class Pending:
    """One change of the current plan, as the plan says it."""

    environment: str
    service: str
    action: str
    summary: str


@dataclass(frozen=True)
class HistoryItem:
    """One line of a service's history: an apply, a revert, a proposed promotion."""

    at_ms: int
    kind: str  # apply | revert | promotion | hold
    words: str
    services: tuple[str, ...] = ()  # (): the whole repo
    commit: str | None = None
    link: str | None = None  # a pull request's URL, when the journal knows it


@dataclass(frozen=True)
class View:
    """Everything one page is rendered from."""

    status: Status
    live: LiveRead
    now_ms: int
    #: where the page came from: ``watch`` (served, live) or ``status`` (a file)
    source: str = "status"
    pending: tuple[Pending, ...] = ()
    #: ``True`` when ``pending`` is the current plan's; a ``status`` file makes no plan
    planned: bool = False
    history: tuple[HistoryItem, ...] = ()
    #: per-cluster verification results, by (environment, service, cluster); empty until
    #: verification checks are declared and run
    verification: Mapping[tuple[str, str, str], tuple[ClusterCheck, ...]] = \
        field(default_factory=dict)
    #: a commit's link: a template with ``{commit}`` (None: commits are not linked)
    commit_url: str | None = None


def checks_of(row: ClusterRow) -> tuple[ClusterCheck, ...]:
    """The verification results the judge read for this cluster (``core.verification``),
    in the view's words: passing, failing with the value, unknown with why."""
    return tuple(ClusterCheck(name=r.check, ok={Outcome.PASS: True, Outcome.FAIL: False}.get(
        r.outcome), detail=r.sentence()) for r in row.checks)


def cell_state(row: ServiceRow, live: LiveRead) -> CellState:
    """The word of a fleet cell: the judge's proof, and who states what keeps it."""
    if not live.ok:
        return CellState.UNKNOWN
    if row.proof is Proof.CONVERGED:
        return CellState.PROVEN
    states = {cluster_state(c, live) for c in row.clusters}
    if CellState.FAILING in states:
        return CellState.FAILING
    if row.proof is Proof.UNPROVEN or CellState.UNKNOWN in states:
        return CellState.UNKNOWN
    return CellState.CONVERGING


def cluster_state(row: ClusterRow, live: LiveRead) -> CellState:
    if not live.ok:
        return CellState.UNKNOWN
    if row.proven:
        return CellState.PROVEN
    if row.last_error:
        return CellState.FAILING  # stated by the cluster itself
    if row.why in _UNKNOWN_WHYS:
        return CellState.UNKNOWN
    return CellState.CONVERGING


def pending_of(environment: str, changes: Sequence[Any]) -> tuple[Pending, ...]:
    """The plan's changes (``core.plans.Change``) as the page lists them."""
    return tuple(Pending(environment=environment, service=str(c.service),
                         action=str(getattr(c.action, "value", c.action)),
                         summary=str(c.summary)) for c in changes)


def history_of(runs: Sequence[Mapping[str, Any]], reverts: Sequence[Mapping[str, Any]] = (),
               proposals: Sequence[Mapping[str, Any]] = (),
               limit: int = 200) -> tuple[HistoryItem, ...]:
    """The journal's runs (``Run.to_json``), reverts and proposals, newest first, as
    history lines; at most ``limit``."""
    items: list[HistoryItem] = []
    for run in runs:
        count = int(run.get("change_count") or 0)
        items.append(HistoryItem(
            at_ms=int(run.get("started_ms") or 0), kind="apply",
            words=f"apply {run.get('status') or '?'} ({count} change"
                  f"{'' if count == 1 else 's'})",
            services=tuple(_name(s) for s in (run.get("services") or ())),
            commit=str(run["commit"]) if run.get("commit") else None))
    for revert in reverts:
        pull = revert.get("pull")
        items.append(HistoryItem(
            at_ms=int(revert.get("ts") or 0), kind="revert",
            words=(f"revert proposed in pull request #{pull}" if pull is not None
                   else "reverted in git") + "".join(
                f"; {_name(s)}: release {s.get('failed') if isinstance(s, Mapping) else '?'}"
                " failed" for s in (revert.get("services") or ())),
            services=tuple(_name(s) for s in (revert.get("services") or ())),
            commit=str(revert["commit"]) if revert.get("commit") else None,
            link=str(revert["url"]) if revert.get("url") else None))
    for proposal in proposals:
        service = proposal.get("service")
        items.append(HistoryItem(
            at_ms=int(proposal.get("ts") or 0), kind="promotion",
            words=f"promotion of {str(proposal.get('digest') or '?')[:19]} from "
                  f"{proposal.get('upstream') or '?'} proposed"
                  + (f" in pull request #{proposal['pull']}" if proposal.get("pull") else ""),
            commit=str(proposal["commit"]) if proposal.get("commit") else None,
            services=(str(service),) if service else (),
            link=str(proposal["url"]) if proposal.get("url") else None))
    items.sort(key=lambda i: i.at_ms, reverse=True)
    return tuple(items[:limit])


def _name(item: object) -> str:
    """A journal's service entry: a name, or a mapping with ``service``."""
    if isinstance(item, Mapping):
        return str(item.get("service") or "?")
    return str(item)
