"""The engine: the one place that sequences load → observe → plan (→ apply).

Owns the order of operations and the translation of shell failures into
``EngineError``s that carry an exit code and a sentence. It decides nothing about what
to change (``core.planning`` does) and prints nothing (commands render; progress goes
through the ``Progress`` hook).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reconciler.core.desired import DesiredState
from reconciler.core.diagnostics import Diagnostic
from reconciler.core.live import LiveSnapshot
from reconciler.core.planning import plan as make_plan
from reconciler.core.plans import Plan
from reconciler.exitcodes import Exit
from reconciler.shell import gitrepo, observing, validating
from reconciler.shell.controlplane import ControlPlaneError
from reconciler.shell.endpoints import ConfigError, Connection, Overrides
from reconciler.shell.progress import Progress


class EngineError(Exception):
    """A failure the CLI reports as one message and an exit code."""

    def __init__(self, message: str, code: Exit = Exit.ERROR,
                 diagnostics: tuple[Diagnostic, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.diagnostics = diagnostics


@dataclass(frozen=True)
class PlanRun:
    desired: DesiredState
    connection: Connection
    snapshot: LiveSnapshot
    plan: Plan


def load(root: Path) -> DesiredState:
    """Validate the repo at ``root``; every problem, or the desired state."""
    if not root.is_dir():
        raise EngineError(f"{root}: not a directory")
    result = validating.load_repo(root)
    if result.state is None:
        raise EngineError(
            f"{root}: the desired state is invalid ({len(result.diagnostics)} problem(s))",
            Exit.ERROR, result.diagnostics)
    return result.state


def connect(desired: DesiredState, root: Path, overrides: Overrides) -> Connection:
    try:
        return Connection.build(desired.settings, repo_root=root, overrides=overrides)
    except ConfigError as exc:
        raise EngineError(f"settings: {exc}") from exc


def plan(root: Path, *, overrides: Overrides, env: Mapping[str, str] | None = None,
         progress: Progress | None = None) -> PlanRun:
    """Load, observe every cluster and the control plane, and plan. Pure planning last."""
    env = os.environ if env is None else env
    desired = load(root)
    connection = connect(desired, root, overrides)
    try:
        provenance = gitrepo.provenance(root)
    except gitrepo.GitError as exc:
        raise EngineError(str(exc)) from exc
    snapshot = observe(desired, connection, env=env, progress=progress)
    return PlanRun(desired, connection, snapshot, make_plan(desired, snapshot, provenance))


def observe(desired: DesiredState, connection: Connection, *, env: Mapping[str, str],
            progress: Progress | None = None) -> LiveSnapshot:
    try:
        return observing.observe(desired, connection, env=env, progress=progress)
    except ControlPlaneError as exc:
        raise EngineError(f"control plane {connection.control_plane_url}: {exc}") from exc
    except ConfigError as exc:
        raise EngineError(str(exc)) from exc
