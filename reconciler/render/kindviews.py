"""How each change kind reads: its detail lines, its preconditions, and its words in the
PR comment -- one view per kind behind one dispatch (``view_of``), so the renderers hold
no per-kind branches.

Owns ``KindView`` (what a view answers, with the fallback every kind without words of
its own gets: its summary), one view per kind keyed by the kind (``core.kinds.KINDS``),
and the plain-text dispatch the text plan, the apply view and the comment share
(``change_detail``, ``preconditions_text``). The Markdown answers take ``Words`` --
``render.markdown``'s inline-code and list helpers, handed in so this module sits below
it. A kind's own plain detail may also live in the core (``Kind.detail``, as a route's
does); it is asked first.

Adding a kind: its view class here and one entry in ``_VIEWS`` (or none, if the summary
reads well enough). Pure: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from reconciler.core.codes import ReasonCode
from reconciler.core.kinds import (
    KINDS,
    Action,
    ChangeBase,
    CreateChange,
    EgressChange,
    GrantChange,
    Kind,
    PromoteChange,
    ReleaseRef,
    RollbackChange,
    RouteChange,
    create,
    egress,
    grant,
    kind_of,
    release,
    route,
)
from reconciler.core.live import EgressRule
from reconciler.core.plans import VERBS
from reconciler.core.sanitize import safe
from reconciler.render.common import (
    FACT_LIST_MAX,
    _field,
    _more,
    _plain,
    caps_text,
    release_text,
    rules_text,
    short,
)

C = TypeVar("C", bound=ChangeBase)


@dataclass(frozen=True)
class Words:
    """``render.markdown``'s helpers a view's Markdown is written with: a plan string as
    inline code (``code``, bounded by ``limit``), a count with its noun (``n``), clusters,
    a release's version, egress destinations and capabilities as inline code."""

    code: Callable[..., str]
    n: Callable[..., str]
    clusters: Callable[[Sequence[str]], str]
    version: Callable[[ReleaseRef | None], str]
    rules: Callable[[Iterable[EgressRule]], str]
    caps: Callable[[Sequence[str]], str]


class KindView(Generic[C]):
    """How one kind's changes read. The defaults are the words of a kind with none of its
    own: its summary, its verb."""

    #: where the PR comment's first line names the kind's changes (lower first; None:
    #: after every ranked kind, in ``Action`` order)
    title_rank: ClassVar[int | None] = None

    def detail(self, change: C) -> list[str]:
        """The before → after lines of a change, plain text."""
        return [safe(change.summary)]

    def headline(self, change: C) -> tuple[bool, str]:
        """The text plan's line for the change after its verb, and whether the change
        brings something into being (marked ``+``, else ``~``)."""
        return False, change.summary

    def label(self, change: C) -> str:
        """The change as the apply view names it, sanitized."""
        return safe(f"{change.action.value} {change.service}"
                    + (f" ({change.user_id})" if change.user_id else ""))

    def preconditions(self, change: C) -> list[str]:
        """What the change is bound to beyond its compare-and-swap values, plain text."""
        return []

    def destructive(self, change: C, w: Words) -> str | None:
        """What the change takes away, in Markdown words, or None."""
        return None

    def phrase(self, change: C, clusters: Sequence[str], warn: str, w: Words) -> str:
        """One change as the comment's first line says it (``warn``: its destructive mark)."""
        return w.code(change.summary)

    def aggregate(self, action: Action, changes: Sequence[C], named: bool, who: str,
                  taking: int, w: Words) -> str:
        """Changes of one action as the first line says them: ``who`` names the services
        (``named``) or counts them; ``taking``: how many are destructive."""
        return f"{VERBS[action]} {who}" + (f" ({taking:,} ⚠️)" if taking else "")

    def item_head(self, change: C, origin: str, w: Words) -> str:
        """The first line of the change's Markdown list item."""
        return f"- **{VERBS[change.action]}** — {w.code(change.summary)}{origin}"

    def item_detail(self, change: C, w: Words) -> list[str]:
        """The detail lines under the change's Markdown list item (indented)."""
        return [f"  {w.code(detail.strip())}" for detail in change_detail(change)]


def create_target(change: CreateChange, wrap: Callable[[str], str] = _plain) -> str:
    """What a create line says after its verb: ``ledger → sha256:9a5afa418cac… (v1.0.0)``.

    ``wrap`` embeds each plan string (identity for a terminal, a code span in Markdown)."""
    ref = change.release_after
    digest = ref.digest if ref is not None else None
    target = f"{wrap(short(digest))}…" if digest else wrap("<no digest>")
    tags = ",".join(ref.tags) if ref is not None else ""
    return f"{wrap(change.service)} → {target}" + (f" ({wrap(tags)})" if tags else "")


def creation_detail(change: CreateChange, wrap: Callable[[str], str] = _plain) -> list[str]:
    """The lines under a create: where it goes, what it opens, the evidence it sends."""
    creation = change.creation
    request = creation.preflight if creation is not None else None
    namespace = _field(request, "proposedNamespace")
    lines = [f"service {wrap(change.service_id)} · app {wrap(change.app_id)} · namespace "
             + (wrap(str(namespace)) if isinstance(namespace, str) else "<none declared>")]
    if creation is not None:
        lines.append("egress: " + (", ".join(wrap(f"{d.host}:{d.port}")
                                             for d in creation.service.egress)
                                   or "[] (none)"))
    resources = _field(request, "proposedCorestoreResources")
    if isinstance(resources, list) and resources:
        lines.append("corestore: " + ", ".join(
            wrap(f"{_field(r, 'capability')}/{_field(r, 'resourceName')}")
            for r in resources[:FACT_LIST_MAX]) + _more(len(resources)))
    attestations = _field(request, "releaseEvidence", "attestations")
    if isinstance(attestations, list):
        kinds = [str(_field(a, "kind")) for a in attestations]
        lines.append("attestations sent: " + (", ".join(wrap(k) for k in kinds[:FACT_LIST_MAX])
                                               + _more(len(kinds)) + f" ({len(kinds)})"
                                               if kinds else "none"))
    return lines


class _CreateView(KindView[CreateChange]):
    title_rank = 0

    def detail(self, change: CreateChange) -> list[str]:
        return creation_detail(change)

    def headline(self, change: CreateChange) -> tuple[bool, str]:
        return True, create_target(change)

    def label(self, change: CreateChange) -> str:
        # What is being brought into being, as the plan said it: name → digest (tag).
        return "create " + create_target(change, lambda s: safe(s, 120))

    def preconditions(self, change: CreateChange) -> list[str]:
        # A creation has no live value to compare and swap: it is bound to the absence of
        # the service and to the fence of the preflight report the plan saw.
        fence = change.creation.fence
        return [f"no service {safe(change.service_id, 64)} on the control plane",
                f"fence revision {safe(fence.source_revision[:12])}, version "
                f"{safe(fence.version, 64)}, index {short(fence.oci_index_digest)}, "
                f"namespace {safe(fence.target_namespace, 64)}" if fence is not None
                else "no fence (no GO report: it cannot be sent)"]

    def phrase(self, change: CreateChange, clusters: Sequence[str], warn: str,
               w: Words) -> str:
        return (f"creates {w.code(change.service, 64)} at {w.version(change.release_after)} "
                f"on {w.clusters(clusters)}")

    def aggregate(self, action: Action, changes: Sequence[CreateChange], named: bool,
                  who: str, taking: int, w: Words) -> str:
        return f"creates {who}"

    def item_head(self, change: CreateChange, origin: str, w: Words) -> str:
        return (f"- ➕ **{VERBS[change.action]}** — "
                f"{create_target(change, lambda s: w.code(s, 200))}{origin}")

    def item_detail(self, change: CreateChange, w: Words) -> list[str]:
        return [f"  {detail}" for detail in creation_detail(change, lambda s: w.code(s, 200))]


class _ReleaseView(KindView[PromoteChange | RollbackChange]):
    title_rank = 1

    def detail(self, change: PromoteChange | RollbackChange) -> list[str]:
        return [f"release: {release_text(change.release_before)} → "
                f"{release_text(change.release_after)}"]

    def destructive(self, change: PromoteChange | RollbackChange, w: Words) -> str | None:
        if isinstance(change, RollbackChange):
            return (f"rolls back {w.version(change.release_before)} → "
                    f"{w.version(change.release_after)}")
        return None

    def phrase(self, change: PromoteChange | RollbackChange, clusters: Sequence[str],
               warn: str, w: Words) -> str:
        svc = w.code(change.service, 64)
        if isinstance(change, PromoteChange):
            return (f"promotes {svc} {w.version(change.release_before)} → "
                    f"{w.version(change.release_after)} on {w.clusters(clusters)}")
        return (f"rolls {svc} back {w.version(change.release_before)} → "
                f"{w.version(change.release_after)} on {w.clusters(clusters)}{warn}")

    def aggregate(self, action: Action, changes: Sequence[PromoteChange | RollbackChange],
                  named: bool, who: str, taking: int, w: Words) -> str:
        if action is Action.PROMOTE:
            return f"promotes {who}"
        return f"rolls back {who} ⚠️"


def delta_lines(head: str, *, added: str | None, removed: str | None) -> list[str]:
    """A set-valued field's detail: ``head`` (before → after), then what was added and
    what was removed, each on its own line and only when there is any -- the egress
    rules and the grant capabilities read alike."""
    return ([head] + ([f"  added: {added}"] if added is not None else [])
            + ([f"  removed: {removed}"] if removed is not None else []))


class _EgressView(KindView[EgressChange]):
    title_rank = 2

    def detail(self, change: EgressChange) -> list[str]:
        return delta_lines(
            f"egress: {rules_text(change.egress_before)} → {rules_text(change.egress_after)}",
            added=rules_text(change.egress_added) if change.egress_added else None,
            removed=rules_text(change.egress_removed) if change.egress_removed else None)

    def destructive(self, change: EgressChange, w: Words) -> str | None:
        if change.reason == ReasonCode.EGRESS_REVOKE_ALL:
            return "revokes every egress destination" + (
                f" ({w.rules(change.egress_removed)})" if change.egress_removed else "")
        if change.egress_removed:
            return f"revokes egress to {w.rules(change.egress_removed)}"
        return None

    def phrase(self, change: EgressChange, clusters: Sequence[str], warn: str,
               w: Words) -> str:
        svc, n = w.code(change.service, 64), w.n
        added, removed = len(change.egress_added), len(change.egress_removed)
        if change.reason == ReasonCode.EGRESS_REVOKE_ALL:
            return (f"revokes all {n(removed, 'egress destination')} of {svc}{warn}"
                    if removed else f"declares no egress for {svc}")
        if added and removed:
            return f"opens {added} and revokes {n(removed, 'egress destination')} of {svc}{warn}"
        if removed:
            return f"revokes {n(removed, 'egress destination')} of {svc}{warn}"
        if added == 1:
            return f"opens egress to {w.rules(change.egress_added)} for {svc}"
        if added:
            return f"opens {n(added, 'egress destination')} for {svc}"
        return f"sets the egress of {svc}"

    def aggregate(self, action: Action, changes: Sequence[EgressChange], named: bool,
                  who: str, taking: int, w: Words) -> str:
        return f"changes the egress of {who}" + (f" ({taking:,} revoking ⚠️)" if taking else "")


class _GrantView(KindView[GrantChange]):
    title_rank = 3

    def detail(self, change: GrantChange) -> list[str]:
        return delta_lines(
            f"grant for {safe(change.user_id)}: {caps_text(change.capabilities_before)} → "
            f"{caps_text(change.capabilities_after)}",
            added=", ".join(change.capabilities_added) if change.capabilities_added else None,
            removed=(", ".join(change.capabilities_removed)
                     if change.capabilities_removed else None))

    def destructive(self, change: GrantChange, w: Words) -> str | None:
        if change.capabilities_removed:
            return (f"{w.code(change.user_id or '?', 64)} loses "
                    f"{w.caps(change.capabilities_removed)}")
        return None

    def phrase(self, change: GrantChange, clusters: Sequence[str], warn: str,
               w: Words) -> str:
        svc, n = w.code(change.service, 64), w.n
        user = w.code(change.user_id or "?", 64)
        gained, lost = change.capabilities_added, change.capabilities_removed
        if gained and lost:
            return f"changes the grant of {user} on {svc} (+{len(gained)}, −{len(lost)}){warn}"
        if lost:
            caps = w.caps(lost) if len(lost) <= 2 else n(len(lost), "capability",
                                                          "capabilities")
            return f"{user} loses {caps} on {svc}{warn}"
        if gained:
            caps = w.caps(gained) if len(gained) <= 2 else n(len(gained), "capability",
                                                              "capabilities")
            return f"{user} gains {caps} on {svc}"
        return f"sets the grant of {user} on {svc}"

    def aggregate(self, action: Action, changes: Sequence[GrantChange], named: bool,
                  who: str, taking: int, w: Words) -> str:
        grants = who if named else w.n(len(changes), "grant")
        return f"changes {'the grants on ' if named else ''}{grants}" + (
            f" ({taking:,} removing capabilities ⚠️)" if taking else "")


class _RouteView(KindView[RouteChange]):
    # Its plain detail is the core's (``Kind.detail``); its first-line words, its verb.

    def destructive(self, change: RouteChange, w: Words) -> str | None:
        if change.route_after is None and change.route_before is not None:
            return f"deletes route {w.code(change.route_before.name, 64)}"
        return None


_VIEWS: Mapping[Kind[Any], KindView[Any]] = {
    create.KIND: _CreateView(), release.KIND: _ReleaseView(), egress.KIND: _EgressView(),
    grant.KIND: _GrantView(), route.KIND: _RouteView(),
}
_FALLBACK: KindView[Any] = KindView()


def view_of(change: ChangeBase | Action) -> KindView[Any]:
    """The view of the kind a change (or an action) belongs to."""
    return _VIEWS.get(kind_of(change), _FALLBACK)


#: The order the comment's first line names actions in: the ranked kinds first, then the
#: rest in ``Action`` order.
TITLE_ORDER: tuple[Action, ...] = tuple(sorted(
    (a for k in KINDS for a in k.actions),
    key=lambda a: (view_of(a).title_rank is None, view_of(a).title_rank or 0,
                   list(Action).index(a))))


def change_detail(change: ChangeBase) -> list[str]:
    """The before → after lines of a change, plain text (each kind its own: a kind's
    ``Kind.detail`` when it has one, else its view's)."""
    lines = kind_of(change).detail(change)
    if lines is not None:
        return lines
    return view_of(change).detail(change)


def preconditions_text(change: ChangeBase) -> str:
    pre = change.preconditions
    bits = view_of(change).preconditions(change)
    if pre.rollout_generation is not None:
        bits.append(f"generation {pre.rollout_generation}")
    if pre.rollout_id is not None:
        bits.append(f"rollout {safe(pre.rollout_id, 64)}")
    if pre.egress_revision is not None:
        bits.append(f"egress revision {pre.egress_revision}")
    if pre.capabilities is not None:
        bits.append(f"live grant [{', '.join(pre.capabilities)}]")
    return ", ".join(bits) or "none"
