"""The ``reconcile`` command line: parse arguments, dispatch, return an exit code.

Owns argument parsing and the mapping of unexpected failures to exit codes. It must
not decide anything about plans or evidence: commands call the engine and renderers.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from reconciler import __version__
from reconciler.exitcodes import Exit

#: Each module registers one command (``register(subparsers)``).
COMMAND_MODULES: tuple[str, ...] = (
    "reconciler.commands.validate",
    "reconciler.commands.plan",
    "reconciler.commands.show",
    "reconciler.commands.comment",
    "reconciler.commands.apply",
    "reconciler.commands.watch",
    "reconciler.commands.sandbox",
)


class UsageError(Exception):
    """Raised instead of argparse's ``exit(2)``: 2 means "changes present" here."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> Parser:
    parser = Parser(
        prog="reconcile",
        description="Declarative GitOps reconciler: validate, plan, apply, watch.",
    )
    parser.add_argument("--version", action="version", version=f"reconcile {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"{exc}\n(see: reconcile --help)", file=sys.stderr)
        return Exit.USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return Exit.USAGE
    try:
        return int(args.handler(args))
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return Exit.USAGE
    except KeyboardInterrupt:
        print("reconcile: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except BrokenPipeError:
        return Exit.ERROR


if __name__ == "__main__":
    sys.exit(main())
