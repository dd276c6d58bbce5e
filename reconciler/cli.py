"""The ``reconcile`` command line: parse arguments, dispatch, return an exit code.

Owns argument parsing and the mapping of unexpected failures to exit codes. It must
not decide anything about plans or evidence: commands call the engine and renderers.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from reconciler import __version__
from reconciler.exitcodes import Exit

#: Each module registers one command (``register(subparsers)``).
COMMAND_MODULES: tuple[str, ...] = (
    "reconciler.commands.validate",
    "reconciler.commands.plan",
    "reconciler.commands.show",
    "reconciler.commands.config",
    "reconciler.commands.comment",
    "reconciler.commands.apply",
    "reconciler.commands.watch",
    "reconciler.commands.watch_status",
    "reconciler.commands.watchcontrol",
    "reconciler.commands.history",
    "reconciler.commands.pin",
    "reconciler.commands.revert",
    "reconciler.commands.freeze",
    "reconciler.commands.promote",
    "reconciler.commands.status",
    "reconciler.commands.sandbox",
    "reconciler.commands.completion",
)


class UsageError(Exception):
    """Raised instead of argparse's ``exit(2)``: 2 means "changes present" here."""

    def __init__(self, message: str, prog: str = "reconcile") -> None:
        super().__init__(message)
        self.prog = prog


#: Where a parser leaves its "did you mean" for the flags it did not know (argparse copies
#: a subcommand's namespace into the top-level one, so the top level can report them).
_SUGGESTIONS = "_did_you_mean"


class Parser(argparse.ArgumentParser):
    """argparse with usage errors as ``UsageError`` (exit 64, not 2) and "did you mean"
    for a mistyped subcommand, choice or flag (Python 3.11 has no ``suggest_on_error``).

    Abbreviations are off for every parser, subcommands included: argparse would
    otherwise take ``apply --auto`` for ``--auto-approve`` and really apply. A prefix is
    an unknown flag, answered with "did you mean" like any other typo."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False  # never a prefix: see the class docstring
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}", self.prog)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(choice) for choice in choices]
        message = f"invalid choice: {value!r} (choose from {', '.join(names)})"
        close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
        if close:
            message += f"; did you mean {close[0]!r}?"
        raise argparse.ArgumentError(action, message)

    def parse_known_args(  # type: ignore[override]
            self, args: Sequence[str] | None = None,
            namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if not extras:
            return parsed, extras
        suggestions: dict[str, str] = getattr(parsed, _SUGGESTIONS, None) or {}
        suggestions.setdefault("", self.prog)  # the innermost parser that met them
        flags = [s for s in self._option_string_actions if s.startswith("--")]
        for extra in extras:
            flag = extra.split("=", 1)[0]
            if flag.startswith("-") and flag not in suggestions:
                # A prefix of one flag (abbreviations are off) names that flag.
                longer = [s for s in flags if s.startswith(flag)] if len(flag) > 2 else []
                close = longer if len(longer) == 1 else \
                    difflib.get_close_matches(flag, flags, n=1, cutoff=0.6)
                if close:
                    suggestions[flag] = close[0]
        setattr(parsed, _SUGGESTIONS, suggestions)
        return parsed, extras

    def parse_args(  # type: ignore[override]
            self, args: Sequence[str] | None = None,
            namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        suggestions: dict[str, str] = vars(parsed).pop(_SUGGESTIONS, None) or {}
        if extras:
            prog = suggestions.pop("", self.prog)
            noun = "argument" if len(extras) == 1 else "arguments"
            which = "" if len(extras) == 1 else " for {}"
            hints = [f"did you mean {suggestions[flag]}{which.format(flag)}?"
                     for flag in dict.fromkeys(e.split("=", 1)[0] for e in extras)
                     if flag in suggestions]
            message = "; ".join([f"unrecognized {noun}: {' '.join(extras)}", *hints])
            raise UsageError(f"{prog}: {message}", prog)
        return parsed


def build_parser() -> Parser:
    parser = Parser(
        prog="reconcile",
        description="Declarative GitOps reconciler: validate, plan, apply, watch.",
    )
    parser.add_argument("--version", action="version", version=f"reconcile {__version__}",
                        help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser,
                                       help="what to do (reconcile COMMAND --help for its "
                                       "options)")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(subparsers)
    parser.set_defaults(root_parser=parser)  # `reconcile completion` walks the whole parser
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"{exc}\n(see: {exc.prog} --help)", file=sys.stderr)
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
