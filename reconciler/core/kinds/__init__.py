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
entry in ``KINDS`` and ``Change`` below, its sender in ``shell.applying`` (and a reader,
if the gate or the plan must read something new), and at most a renderer detail.

Pure: no I/O imports.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from reconciler.core.kinds import create, egress, grant, release, route
from reconciler.core.kinds.base import (
    Action,
    ChangeBase,
    Check,
    Diff,
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

__all__ = [
    "ACTION_ORDER", "KINDS", "VERBS", "Action", "Change", "ChangeBase", "Check",
    "CreateChange", "Diff", "EgressChange", "Freshness", "GrantChange", "Kind",
    "Preconditions", "PromoteChange", "ReleaseRef", "RollbackChange", "RouteChange",
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


def kind_of(change: ChangeBase | Action) -> Kind[Any]:
    """The kind a change (or an action) belongs to."""
    return _BY_ACTION[change if isinstance(change, Action) else change.action]


def waits_for_convergence(change: ChangeBase) -> bool:
    """Whether the convergence gate must see the change on every cluster."""
    return kind_of(change).waits_for_convergence
