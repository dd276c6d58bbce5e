"""``reconcile show FILE``: render a saved plan with no network access."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reconciler.commands import options, output
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("show", help="render a saved plan (no network)")
    parser.add_argument("file", help="a plan saved with `reconcile plan --out`")
    parser.add_argument("--format", choices=options.FORMATS, default="text")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        plan = output.load_plan(Path(args.file))
    except EngineError as exc:
        return output.report_error(exc)
    output.write(output.render(plan, args.format, sys.stdout, plan_file=str(args.file)))
    return int(Exit.OK)
