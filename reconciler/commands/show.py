"""``reconcile show FILE``: render a saved plan with no network access."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reconciler.commands import options, output
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("show", help="render a saved plan (no network)",
                                   description="Render a plan saved with `reconcile plan "
                                   "--out`, as plan would have shown it; no network access.")
    parser.add_argument("file", metavar="FILE", help="a plan saved with `reconcile plan --out`")
    parser.add_argument("--format", choices=options.FORMATS, default="text",
                        help="text for a terminal, json (the plan file's form), or markdown "
                        "(a pull-request comment); default text")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from reconciler.shell import discovery  # the repo reader loads when the command runs

    try:
        problem = discovery.unusable(Path(args.file), want="file")
        if problem is not None:
            raise EngineError(problem, Exit.ERROR)
        plan = output.load_plan(Path(args.file))
    except EngineError as exc:
        return output.report_error(exc)
    output.show(plan, args.format, sys.stdout, plan_file=str(args.file))
    return int(Exit.OK)
