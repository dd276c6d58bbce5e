"""What a plan finds besides its changes: ``Blocker`` (why not to apply) and ``Drift``
(live state that differs without being an intended change).

Owns the two models only; ``core.plans`` re-exports them with the plan. They live apart
so the change kinds (``core.kinds``), which raise blockers and drift of their own, need
not import the plan that holds their changes.

Pure: no I/O imports.
"""

from __future__ import annotations

from reconciler.core.codes import BlockerCode, DriftCode
from reconciler.core.lean import CoreModel


class Blocker(CoreModel):
    """Why the plan must not be applied. ``code`` is stable; ``message`` names who and where."""

    code: BlockerCode
    message: str
    service: str | None = None
    cluster: str | None = None
    services: tuple[str, ...] = ()  # for a cause shared by many: every service it blocks
    #: the control plane's preflight code, verbatim (sanitized), for preflight blockers
    upstream_code: str | None = None


class Drift(CoreModel):
    """Live state that differs from what the repo and the control plane intend."""

    code: DriftCode
    message: str
    service: str | None = None
    cluster: str | None = None
