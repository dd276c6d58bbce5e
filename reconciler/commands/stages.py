"""``--env NAME`` (and ``--override-window REASON``): which environment a command runs in.

Owns the flags and turning them into a desired-state root and the environment's context
(``shell.environments.Selected``). A repo without ``pipeline.yaml`` has one root and no
environments: ``--env`` left out, every command does exactly what it did before.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.commands import options, selection
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the parser is built without the repo reader (start time)
    from reconciler.shell import environments


def add_env_flag(parser: argparse.ArgumentParser, *, override: bool = False) -> None:
    parser.add_argument("--env", metavar="NAME", dest="env_name",
                        help="the environment of the repo's pipeline.yaml to use (default: "
                        "the one PATH lies in, else the only one; a repo without "
                        "pipeline.yaml has one and needs no --env)")
    if override:
        parser.add_argument("--override-window", metavar="REASON",
                            help="emergency: promote although a deny window is open, no allow "
                            "window is, or the environment is frozen; REASON is recorded in "
                            "the plan's notes (the PR comment, the journal and history). "
                            "Never lifts soak or proof upstream")


def select(args: argparse.Namespace, path: str, *, command: str,
           ) -> tuple[Path, environments.Selected | None]:
    """The desired-state root PATH and ``--env`` mean, and the environment (None: a
    repo without environments, whose root is found as before)."""
    from reconciler.shell import environments

    name = getattr(args, "env_name", None)
    override = getattr(args, "override_window", None)
    if override is not None and not override.strip():
        raise EngineError("--override-window needs a REASON (it is recorded)", Exit.USAGE)
    try:
        stage = environments.select(Path(path), name, override=override)
    except environments.PipelineError as exc:
        raise EngineError(str(exc), Exit.USAGE if exc.usage else Exit.ERROR,
                          exc.diagnostics) from exc
    if stage is None:
        return selection.desired_root(path, command=command), None
    return stage.root, stage


def add_live_flags(parser: argparse.ArgumentParser) -> None:
    """What a command that plans against the live side takes (plan, apply): the
    environment (overriding the place), the connection overrides and the trace."""
    add_env_flag(parser, override=True)
    options.add_connection_flags(parser)
    options.add_tracing_flag(parser)
