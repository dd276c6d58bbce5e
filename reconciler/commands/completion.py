"""``reconcile completion bash|zsh|tcsh``: a shell completion script, generated from the
parser itself (``shtab``), so it never lags behind the commands and flags.

Install: bash, ``reconcile completion bash >
~/.local/share/bash-completion/completions/reconcile``; zsh, ``reconcile completion zsh >
"${fpath[1]}/_reconcile"``; or for this shell only, ``eval "$(reconcile completion bash)"``
or ``source <(reconcile completion zsh)``.
"""

from __future__ import annotations

import argparse
import sys

from reconciler.exitcodes import Exit

SHELLS = ("bash", "zsh", "tcsh")

#: shtab's completers (``shtab.FILE`` / ``shtab.DIRECTORY``), spelled out so the parser
#: is built without importing shtab.
_FILE = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}
_DIRECTORY = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/", "tcsh": "d"}
#: Arguments that name a file or a directory, by destination.
_FILES = frozenset({"path", "target", "file", "out", "seed", "ca_file", "control_plane_ca",
                    "mesh_ca"})
_DIRECTORIES = frozenset({"state"})


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "completion", help="print a shell completion script (bash, zsh or tcsh)",
        description="Print a completion script for SHELL, generated from this version's "
        "commands and flags. bash: reconcile completion bash > "
        "~/.local/share/bash-completion/completions/reconcile; zsh: reconcile completion "
        "zsh > \"${fpath[1]}/_reconcile\"; or eval its output in the current shell.")
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL",
                        help="the shell to complete for: " + ", ".join(SHELLS))
    parser.set_defaults(handler=run)


def script(root: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell``: every subcommand, flag and choice of ``root``."""
    import shtab  # only this command needs it

    _mark_paths(root)
    return str(shtab.complete(root, shell=shell))


def _mark_paths(parser: argparse.ArgumentParser) -> None:
    """Complete file and directory arguments with file and directory names."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _mark_paths(sub)
        elif action.dest in _FILES:
            action.complete = _FILE  # type: ignore[attr-defined]
        elif action.dest in _DIRECTORIES:
            action.complete = _DIRECTORY  # type: ignore[attr-defined]


def run(args: argparse.Namespace) -> int:
    root = getattr(args, "root_parser", None)
    if not isinstance(root, argparse.ArgumentParser):
        print("error: reconcile completion: no parser to complete", file=sys.stderr)
        return int(Exit.ERROR)
    sys.stdout.write(script(root, args.shell))
    return int(Exit.OK)
