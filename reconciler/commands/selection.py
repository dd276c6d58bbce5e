"""What a command acts on: the desired-state root (found from PATH like git finds its
repo, ``desired_root``) and ``--only``, the services it is limited to (plan, apply, watch).

``--only``: it takes ONE value, a comma-separated list of service names
(``--only checkout,search``), and may be repeated (``--only checkout --only search``).
A value is never followed by more names, so ``apply --only checkout PATH`` keeps PATH as
the path. An empty name (``--only a,,b``, ``--only ''``) is a usage error (64) at parse
time; a name no service of the repo has is one too, once the repo is read
(``unknown_names``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Iterable
from pathlib import Path

from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

#: The flag's help text, shared so every command says the same.
HELP = ("limit to these services: a comma-separated list of names, repeatable "
        "(--only checkout,search or --only checkout --only search); "
        "a name no service has is a usage error (64)")


def names(value: str) -> tuple[str, ...]:
    """One ``--only`` value split on commas; an ``argparse`` type (raises
    ``ArgumentTypeError`` for an empty name, which argparse turns into a usage error)."""
    parts = tuple(part.strip() for part in value.split(","))
    if not parts or any(not part for part in parts):
        raise argparse.ArgumentTypeError(
            f"{value!r}: service names separated by commas, none empty (e.g. checkout,search)")
    return parts


def add_only_flag(parser: argparse.ArgumentParser, *, help_text: str = HELP) -> None:
    """``--only NAME[,NAME...]``, repeatable; read it back with ``only_from``."""
    parser.add_argument("--only", action="append", type=names, default=[],
                        metavar="SERVICE[,SERVICE...]", help=help_text)


def only_from(args: argparse.Namespace) -> frozenset[str]:
    """Every name given to ``--only`` (empty: no limit)."""
    groups: Iterable[tuple[str, ...]] = getattr(args, "only", None) or ()
    return frozenset(name for group in groups for name in group)


def unknown_names(only: Collection[str], known: Iterable[str]) -> list[str]:
    """The names in ``only`` no service has, sorted."""
    return sorted(set(only) - set(known))


def unknown_message(unknown: Collection[str], known: Iterable[str]) -> str:
    """The usage error for ``unknown`` names, with the names there are."""
    there = sorted(set(known))
    shown = ", ".join(there[:20]) + (f", … (+{len(there) - 20})" if len(there) > 20 else "")
    return (f"--only names no service of this repo: {', '.join(sorted(unknown))} "
            f"(services: {shown or 'none'})")


def desired_root(path: str, *, command: str) -> Path:
    """The desired-state root for PATH by ``shell.discovery``'s rule (walk up to the
    nearest directory holding a Settings file); says on stderr when it is not PATH itself.
    Raises ``EngineError`` (exit 1) with the shared wording when PATH cannot be used."""
    from reconciler.shell import discovery  # loads the repo reader: only when run

    given = Path(path)
    problem = discovery.unusable(given, want="directory")
    if problem is not None:
        raise EngineError(problem, Exit.ERROR)
    found = discovery.find_root(given)
    nothing = discovery.absent(found, command=command)
    if nothing is not None:
        raise EngineError(nothing, Exit.ERROR)
    if found.moved:
        print(f"reconcile {command}: using the desired state in {found.root} (the nearest "
              f"directory above {path} holding a Settings document)", file=sys.stderr)
    return found.root
