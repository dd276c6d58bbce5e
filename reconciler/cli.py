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

#: Each module registers one command or two (``register(subparsers)``), in this order.
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

#: Each command's name, module and one-line help, so that ``reconcile --version``,
#: ``reconcile --help`` and ``reconcile plan --help`` import no command module but the one
#: that runs: importing all of them cost 0.14 s of CPU on every start (issue 33).
#: ``tests/test_start_time.py`` checks this against what each module registers.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("validate", "reconciler.commands.validate",
     "check a desired-state repo and report every problem"),
    ("plan", "reconciler.commands.plan", "show what apply would change, and on what evidence"),
    ("show", "reconciler.commands.show", "render a saved plan (no network)"),
    ("config", "reconciler.commands.config",
     "show the effective connection settings and where each came from"),
    ("comment", "reconciler.commands.comment",
     "post a plan, or why there is none, on a GitHub pull request (one living comment)"),
    ("apply", "reconciler.commands.apply", "apply a plan and wait until every cluster proves it"),
    ("watch", "reconciler.commands.watch",
     "re-plan on every edit and on drift; apply with --apply"),
    ("watch-status", "reconciler.commands.watch_status",
     "show the shards of a group of watchers: owners and ages"),
    ("watch-ctl", "reconciler.commands.watchcontrol",
     "suspend, resume or reconcile-now a running `reconcile watch`"),
    ("history", "reconciler.commands.history",
     "past applies from the journal: commit, outcomes, gate, duration"),
    ("pin", "reconciler.commands.pin",
     "pin a service to the digest of a tag the control plane observed"),
    ("revert", "reconciler.commands.revert",
     "pin a failed release's service back to its last proven release"),
    ("release-hold", "reconciler.commands.revert",
     "remove the hold on a service's digest, by a commit"),
    ("freeze", "reconciler.commands.freeze",
     "stop every promotion into an environment, until a time or until unfreeze (commits "
     "freezes/NAME.yaml)"),
    ("unfreeze", "reconciler.commands.freeze",
     "allow promotions into an environment again (commits the removal)"),
    ("promote", "reconciler.commands.promote",
     "pin in ENV the digests the previous environment proves (soak, windows, freezes, holds, "
     "policies checked before anything is written)"),
    ("status", "reconciler.commands.status",
     "service × environment: pinned, proven on how many clusters, since when, what the next "
     "promotion waits for"),
    ("sandbox", "reconciler.commands.sandbox",
     "run a local control plane and cluster mesh (for trying reconcile)"),
    ("completion", "reconciler.commands.completion",
     "print a shell completion script (bash, zsh or tcsh)"),
)

#: ``reconcile completion`` generates its scripts from every command's parser.
_NEEDS_EVERY_PARSER = frozenset({"completion"})


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


def build_parser(command: str | None = None) -> Parser:
    """The whole parser, or (given the ``command`` about to run) one whose other commands
    are stubs named and helped from ``COMMANDS``: the same top-level ``--help``, choices
    and "did you mean", without importing their modules. ``completion`` needs them all."""
    parser = Parser(
        prog="reconcile",
        description="Declarative GitOps reconciler: validate, plan, apply, watch.",
    )
    parser.add_argument("--version", action="version", version=f"reconcile {__version__}",
                        help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser,
                                       help="what to do (reconcile COMMAND --help for its "
                                       "options)")
    lazy = command is not None and command not in _NEEDS_EVERY_PARSER
    for module_name in COMMAND_MODULES:
        stubs = [(name, line) for name, module, line in COMMANDS if module == module_name]
        if lazy and stubs and all(name != command for name, _ in stubs):
            for name, line in stubs:
                subparsers.add_parser(name, help=line)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(subparsers)
    parser.set_defaults(root_parser=parser)  # `reconcile completion` walks the whole parser
    return parser


def _command_of(argv: Sequence[str]) -> str:
    """The command about to run: the first word that is not a flag (the top level's own
    flags, ``--version`` and ``--help``, take no value). ``""`` when there is none."""
    return next((word for word in argv if not word.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words == ["--version"]:
        # Answered before any parser is built (a sixth of the start's CPU): what
        # argparse's version action prints, for completion, pre-commit and CI steps.
        print(f"reconcile {__version__}")
        return Exit.OK
    parser = build_parser(_command_of(words))
    try:
        args = parser.parse_args(words)
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
