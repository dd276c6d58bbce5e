"""The judge's target: what must be proven for one service.

Owns ``Target``. It sits below both the judge (``core.evidence``, which proves it) and
the change kinds (``core.kinds``, whose ``Kind.expect`` fills it and whose
``Kind.assess`` reads it), so neither has to import the other to name it. Re-exported
by ``core.evidence``.

Pure: no I/O imports.
"""

from __future__ import annotations

from pydantic import ConfigDict

from reconciler.core.lean import LeanModel
from reconciler.core.live import EgressRule
from reconciler.core.routing import GatewayRoute


class Target(LeanModel):
    """What must be proven for one service: the pinned digest and the egress that must be
    in effect (``None``: no egress is declared anywhere, so none is checked)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    service: str
    app_id: str
    digest: str
    egress: tuple[EgressRule, ...] | None = None
    #: Issue 21: the gateway routes of this app every expected cluster must report in
    #: effect with their priority and target (None: the repo declares none: not checked).
    routes: tuple[GatewayRoute, ...] | None = None
    #: the owner keys (appId, hostname, routeRef) of deleted routes no expected cluster
    #: may still serve (``kinds.route.gone_keys``)
    routes_gone: tuple[tuple[str, str | None, str | None], ...] = ()
    #: Issue 34: the checks (``<verification>/<check>``) every expected cluster must pass
    #: for the digest before it is proven there (empty: none declared, none asked).
    checks: tuple[str, ...] = ()
