"""``reconcile freeze`` / ``unfreeze``: stop (and allow again) promotions into environments.

Owns the two commands' flags and their usage errors; the outcome is worded by
``render.freezeview``. ``freeze`` writes ``freezes/NAME.yaml`` (a
``kind: Freeze`` document: reason, until -- left out without ``--until``: the freeze lasts
until it is removed -- and environments) at the pipeline root and commits it; ``unfreeze
--env NAME`` removes what freezes that environment and commits. Plans read committed
freezes (``shell.environments``), so the commit is what takes effect.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from reconciler.commands import options
from reconciler.exitcodes import Exit


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "freeze", help="stop every promotion into an environment, until a time or until "
        "unfreeze (commits freezes/NAME.yaml)",
        description="Write a kind: Freeze document at the pipeline root and commit it: "
        "every plan promoting into the environment is NO-GO (frozen) until it ends or "
        "`reconcile unfreeze` removes it. Without --until it ends only with unfreeze.")
    options.add_path_argument(parser)
    parser.add_argument("--env", metavar="NAME", dest="env_name", action="append",
                        required=True, help="the environment to freeze (repeatable)")
    parser.add_argument("--reason", required=True, help="why, shown in every blocked plan")
    parser.add_argument("--until", metavar="TIME|DURATION",
                        help="when it ends: an RFC 3339 time (2026-12-03T18:00:00Z) or a "
                        "duration from now (4h, 2d); without it, when `reconcile unfreeze` "
                        "removes it")
    parser.add_argument("--name", help="the file's name under freezes/ (default: the "
                        "environments, joined by '-')")
    parser.add_argument("--no-commit", action="store_true",
                        help="write the file only (a plan counts it once it is committed)")
    parser.set_defaults(handler=run_freeze)

    undo = subparsers.add_parser(
        "unfreeze", help="allow promotions into an environment again (commits the removal)",
        description="Remove every committed freeze covering the environment (a freeze of "
        "several environments loses this one only) and commit.")
    options.add_path_argument(undo)
    undo.add_argument("--env", metavar="NAME", dest="env_name", required=True,
                      help="the environment to unfreeze")
    undo.add_argument("--no-commit", action="store_true", help="remove the files only")
    undo.set_defaults(handler=run_unfreeze)


def _until(text: str | None) -> str | None:
    if text is None:
        return None
    # The pipeline's models load when the command runs, not to build the parser.
    from reconciler.core.pipeline import duration_seconds, parse_instant

    if re.fullmatch(r"(?:\d+[dhms])+", text.strip()):
        at = time.time() + duration_seconds(text)
        return f"{datetime.fromtimestamp(at, UTC):%Y-%m-%dT%H:%M:%SZ}"
    parse_instant(text)
    return text


def _pipeline(args: argparse.Namespace, names: list[str]) -> Path:
    from reconciler.shell import environments

    root = environments.find_pipeline_root(Path(args.path))
    if root is None:
        raise environments.PipelineError(f"no pipeline.yaml at or above {args.path}: "
                                          "freezes belong to a repo with environments",
                                          usage=True)
    rules = environments.read_rules(root)
    known = {e.name for e in rules.pipeline.environments} if rules.pipeline else set()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise environments.PipelineError(f"--env {', '.join(unknown)}: no such environment "
                                          f"(the pipeline has: {', '.join(sorted(known))})",
                                          usage=True)
    return root


def run_freeze(args: argparse.Namespace) -> int:
    from reconciler.shell import environments

    names = list(dict.fromkeys(args.env_name))
    try:
        until = _until(args.until)
    except ValueError as exc:
        print(f"reconcile freeze: --until: {exc}", file=sys.stderr)
        return int(Exit.USAGE)
    name = args.name or "-".join(names)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,62}", name):
        print(f"reconcile freeze: --name {name!r}: a-z, 0-9, '.', '_', '-'", file=sys.stderr)
        return int(Exit.USAGE)
    try:
        root = _pipeline(args, names)
        rel, made = environments.write_freeze(root, name, args.reason, until, names,
                                              commit=not args.no_commit)
    except environments.PipelineError as exc:
        print(f"reconcile freeze: {exc}", file=sys.stderr)
        return int(Exit.USAGE if exc.usage else Exit.ERROR)
    from reconciler.render import freezeview

    print(freezeview.froze(names, until, args.reason, rel, made))
    return int(Exit.OK)


def run_unfreeze(args: argparse.Namespace) -> int:
    from reconciler.shell import environments

    try:
        root = _pipeline(args, [args.env_name])
        touched, made = environments.remove_freezes(root, args.env_name,
                                                    commit=not args.no_commit)
    except environments.PipelineError as exc:
        print(f"reconcile unfreeze: {exc}", file=sys.stderr)
        return int(Exit.USAGE if exc.usage else Exit.ERROR)
    from reconciler.render import freezeview

    print(freezeview.unfroze(args.env_name, touched, made))
    return int(Exit.OK)
