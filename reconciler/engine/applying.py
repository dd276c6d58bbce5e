"""``reconcile apply``: plan, refuse a NO-GO plan, send behind the one gate, and (with
``--on-gate-failure revert``) take the way back (``engine.wayback``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from reconciler.core.events import (
    Hook,
)
from reconciler.core.plans import Plan
from reconciler.engine.reconciling import Reconciler
from reconciler.engine.wayback import revert_after
from reconciler.engine.wiring import ApplyRun, Deadline, PullTarget, load_consistent, notifier
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    environments,
)
from reconciler.shell.endpoints import Overrides
from reconciler.shell.progress import Progress


async def apply_async(
    root: Path,
    *,
    overrides: Overrides,
    env: Mapping[str, str],
    hook: Hook,
    saved: Plan | None = None,
    only: frozenset[str] = frozenset(),
    confirm: Callable[[Plan], bool] | None = None,
    progress: Progress | None = None,
    timeout: float | None = None,
    started: float | None = None,
    on_gate_failure: str = "stop",
    pull: PullTarget | None = None,
    stage: environments.Selected | None = None,
) -> ApplyRun:
    """Load the commit, then one ``Reconciler`` run: observe, plan, bind, send, gate;
    all of it within ``timeout`` seconds when given (``apply --timeout``), counted from
    ``started`` (``time.monotonic()``; the command passes its process's start, so
    loading the interpreter and the HTTP stack counts too) or from now."""
    deadline = None
    if timeout is not None:
        deadline = Deadline(at=(time.monotonic() if started is None else started) + timeout,
                            seconds=timeout)
    desired, provenance = load_consistent(root)
    unknown = sorted(only - {s.name for s in desired.services})
    if unknown:
        raise EngineError(f"--only names no service of this repo: {', '.join(unknown)}",
                          Exit.USAGE)
    async with Reconciler(root, desired, overrides=overrides, env=env,
                          stage=stage) as reconciler:
        # An --only apply proves a part of the commit: it says nothing about the commit.
        notify = None if only else notifier(desired, root, env, reconciler.connection.gateway,
                                            environment=stage.name if stage else None)
        try:
            run = await reconciler.apply(desired, provenance, hook=hook, saved=saved,
                                         only=only, confirm=confirm, progress=progress,
                                         deadline=deadline, notify=notify)
            return await revert_after(reconciler, root, run, on_gate_failure, pull, hook,
                                      progress, notify=notify)
        finally:
            if notify is not None:  # bounded: a receiver that is down costs drainSeconds
                await notify.drain()
