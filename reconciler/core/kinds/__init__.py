"""The change kinds, one module each, behind one dispatch.

A kind is one place (gitops-engine keeps one health check per resource kind behind
``pkg/health/health.go``): ``release`` (promote, rollback), ``egress``, ``grant``,
``create`` and ``route`` (issue 21) each own their change model, their diff (called by
``core.planning``), their
preconditions and idempotency key, their part of the judge's proof (``core.evidence``),
their part of the staleness rule (``core.staleness``) and of a review
(``core.review``), and their summary. This module owns the dispatch: ``Change`` (the
union of every kind's model, discriminated on ``action``), ``kind_of`` and the derived
``ACTION_ORDER`` and ``VERBS``.

Adding a kind (docs/architecture.md, "How to add a change kind"): its module here, its
entry in ``KINDS`` and ``Change`` below, its sender in ``shell.sending`` (and a reader,
if the gate or the plan must read something new), and at most a view in
``render.kindviews``. What
the rest of the core asks of a kind goes through ``Kind`` (``core.kinds.base``): the
judge's target and proof (``expect``, ``assess``: ``core.planning.target_of``,
``core.evidence``), its reasons and codes with their sentences (``whys``, ``unproven``,
``codes``: ``core.codetable.table``), its review target (``review_key``) and plan order
(``sort_key``), its summary count and wire fields (``counted_as``, ``optional_actions``,
``optional_fields``: ``core.plans``, ``render``) and its detail lines (``detail``). Its
code *members* are ``core.codes``' and ``core.whys``' enums (one wire vocabulary, one
order in docs/codes.md and the schema): one line each there.

Pure: no I/O imports.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field

from reconciler.core.kinds import create, egress, grant, release, route
from reconciler.core.kinds.base import (
    Action,
    ChangeBase,
    Check,
    Diff,
    Expecting,
    Freshness,
    Kind,
    Preconditions,
    ReleaseRef,
    idempotency_key,
)
from reconciler.core.kinds.create import CreateChange
from reconciler.core.kinds.egress import EgressChange
from reconciler.core.kinds.grant import GrantChange
from reconciler.core.kinds.release import PromoteChange, RollbackChange
from reconciler.core.kinds.route import RouteChange
from reconciler.core.whys import JUDGE_UNPROVEN, Why

__all__ = [
    "ACTION_ORDER",
    "KINDS",
    "OPTIONAL_ACTIONS",
    "OPTIONAL_FIELDS",
    "PROVERS",
    "UNPROVEN_WHYS",
    "VERBS",
    "Action",
    "Change",
    "ChangeBase",
    "Check",
    "CreateChange",
    "Diff",
    "EgressChange",
    "Expecting",
    "Freshness",
    "GrantChange",
    "Kind",
    "Preconditions",
    "PromoteChange",
    "ReleaseRef",
    "RollbackChange",
    "RouteChange",
    "code_docs",
    "idempotency_key",
    "kind_of",
]

#: Every kind, in execution order.
KINDS: tuple[Kind[Any], ...] = (grant.KIND, egress.KIND, release.KIND, create.KIND,
                                route.KIND)

#: One intended change: the model of its kind, chosen by ``action``.
Change = Annotated[
    PromoteChange | RollbackChange | EgressChange | GrantChange | CreateChange | RouteChange,
    Field(discriminator="action"),
]

_BY_ACTION: dict[Action, Kind[Any]] = {a: k for k in KINDS for a in k.actions}

#: Execution order: authority and network policy before the release that may need them.
ACTION_ORDER: dict[Action, int] = {a: k.order for a, k in _BY_ACTION.items()}

#: The fixed verb each change is rendered with.
VERBS: dict[Action, str] = {a: k.verbs[a] for a, k in _BY_ACTION.items()}

#: The kinds with a part of the judge's proof of a cluster, in the order it asks them.
PROVERS: tuple[Kind[Any], ...] = tuple(sorted((k for k in KINDS if k.proves is not None),
                                              key=lambda k: k.proves or 0))

#: The whys that are a gap in evidence (unproven), not evidence of something else: the
#: judge's own and each kind's.
UNPROVEN_WHYS: frozenset[Why] = JUDGE_UNPROVEN.union(*(k.unproven for k in KINDS))

#: Actions counted only on a plan that holds one, and change fields written only on their
#: own kind's changes (``Kind.optional_actions``/``optional_fields``).
OPTIONAL_ACTIONS: frozenset[Action] = frozenset(a for k in KINDS for a in k.optional_actions)
OPTIONAL_FIELDS: frozenset[str] = frozenset(f for k in KINDS for f in k.optional_fields)


def code_docs() -> dict[StrEnum, str]:
    """Every kind's codes with the sentence docs/codes.md shows (``core.codetable.table``)."""
    return {code: text for k in KINDS for code, text in k.codes.items()}


def kind_of(change: ChangeBase | Action) -> Kind[Any]:
    """The kind a change (or an action) belongs to."""
    return _BY_ACTION[change if isinstance(change, Action) else change.action]


def waits_for_convergence(change: ChangeBase) -> bool:
    """Whether the convergence gate must see the change on every cluster."""
    return kind_of(change).waits_for_convergence
