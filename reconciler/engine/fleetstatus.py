"""``reconcile status``: each environment's services as the control plane observes them,
judged by ``core.status``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from reconciler.core import policy as policy_rules
from reconciler.core import (
    promotion,
)
from reconciler.core import status as service_status
from reconciler.core.pipeline import Environment, Freeze, Policy
from reconciler.core.plans import Blocker
from reconciler.engine.reconciling import Reconciler
from reconciler.engine.wiring import load_consistent, make_plan
from reconciler.failures import EngineError
from reconciler.shell.endpoints import Overrides

# -- status (issues 19 and 23) ---------------------------------------------------------------

def status(roots: Sequence[tuple[str, Path, Environment | None]], *, overrides: Overrides,
           freezes: Sequence[tuple[Freeze, str]] = (), env: Mapping[str, str] | None = None,
           clock: Callable[[], float] = time.time,
           policies: Sequence[tuple[Policy, str, int]] = ()) -> service_status.Status:
    """``reconcile status``: one snapshot per environment, in pipeline order (the batch
    reads a plan makes, no preflight, no plan), judged per service (``core.status``); an
    environment's snapshot is also the upstream evidence of the next one. ``overrides``
    apply to a repo without environments only: each environment's Settings say where it
    is. What cannot be read is reported per environment, never raised.

    An environment some of ``policies`` cover is also planned from that same snapshot
    (pure: no read more), so a digest it pins that a policy refuses is shown as refused,
    with the words its plan uses (``core.policy``)."""
    env = os.environ if env is None else env
    single = len(roots) == 1 and roots[0][2] is None

    async def run() -> service_status.Status:
        per: dict[str, tuple[service_status.ServiceRow, ...]] = {}
        errors: list[tuple[str, str]] = []
        previous: promotion.Upstream | None = None
        for name, root, environment in roots:
            try:
                desired, provenance = load_consistent(root)
                async with Reconciler(root, desired, overrides=overrides if single
                                      else Overrides(), env=env) as reconciler:
                    snapshot = await reconciler.observe(desired)
            except EngineError as exc:
                errors.append((name, str(exc).splitlines()[0]))
                previous = promotion.Upstream(name=name, error=str(exc).splitlines()[0])
                continue
            refused: tuple[Blocker, ...] = ()
            if any(p.covers(name) for p, _, _ in policies):
                made = make_plan(desired, snapshot, provenance, None)
                refused = policy_rules.policy_blockers(
                    made, desired, name, policies, previous,
                    environment.soak_seconds if environment else 0, made.created_at)
            per[name] = service_status.rows(
                name, desired, snapshot, environment=environment, upstream=previous,
                freezes=freezes, now_ms=int(clock() * 1000), refused=refused)
            previous = service_status.upstream_facts(name, desired, snapshot)
        return service_status.assemble(int(clock() * 1000), [n for n, _, _ in roots], per,
                                       errors)

    return asyncio.run(run())
