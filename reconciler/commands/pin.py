"""``reconcile pin SERVICE [TAG]``: pin a service's release to the digest the control plane
observed under a tag (the newest release without TAG), in place, and show what plan would
then do. ``reconcile pin --check [SERVICE]``: say which pins lag the newest release.

Owns the command's arguments, which view is shown and the exit codes (docs/pin.md); the
words -- the diff of the file, the refusals, the lag listing -- are ``render.pinview``'s.
Resolution is ``core.pinning``'s, the file rewrite ``shell.pinning``'s, the sequence
``engine.pin`` / ``engine.check_pins``'; the plan preview is rendered by the text
renderer of ``plan``.

Exit codes: 0 pinned (or already pinned; with ``--dry-run``, would pin), or with
``--check`` every pin current; 20 (``--check``) a pin lags; 21 the tag was not observed;
22 the tag names several digests (or the newest release is a tie); 23 the repo pins that
tag to another digest (a moved tag; ``--allow-moved`` accepts it); 1 error (unreachable
control plane, invalid working tree, a file that cannot be rewritten faithfully, or a
rewrite that leaves the Service invalid, e.g. evidence still bound to the old digest);
64 usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from reconciler.commands import options, output, stages
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the engine (and the HTTP stack) loads only when the command runs
    from reconciler.core.pinning import PinCheck, PinRun


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "pin", help="pin a service to the digest of a tag the control plane observed",
        description="Resolve TAG (default: the newest release) to its digest from the "
        "releases the control plane observed for SERVICE, rewrite release.digest and "
        "release.tag (and release.version when the file has one) in the service's file in "
        "the working tree, keeping every other byte, and show the diff and the plan for "
        "that service. Refuses a tag that was not observed (exit 21), names several digests "
        "(22), or moved away from the digest the repo pins for it (23). With --check: write "
        "nothing, exit 20 when a pin lags the newest observed release.")
    parser.add_argument("service", nargs="?", metavar="SERVICE",
                        help="the service's name (its Service document's name:); optional "
                        "with --check, which then checks every service")
    parser.add_argument("tag", nargs="?", metavar="TAG",
                        help="the tag to pin (e.g. v2.5.0); default: the newest release the "
                        "control plane observed (greatest firstObservedAt)")
    parser.add_argument("-C", "--path", default=".", metavar="PATH",
                        help="where the desired state is: its directory or any directory "
                        "below it (default: the current directory)")
    parser.add_argument("--dry-run", action="store_true",
                        help="show the diff and the plan, write nothing")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 20 when any pin (or SERVICE's) lags the "
                        "newest release the control plane observed, 0 when all are current "
                        "(for a scheduled CI job)")
    parser.add_argument("--allow-moved", action="store_true",
                        help="accept a moved tag: the repo pins TAG to one digest and the "
                        "control plane now reports it on another (both are printed)")
    parser.add_argument("--no-plan", action="store_true",
                        help="do not observe the clusters and plan the service afterwards "
                        "(show the diff only)")
    stages.add_env_flag(parser)
    options.add_connection_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from reconciler import engine  # HTTP loads only when needed

    if args.check and (args.tag or args.dry_run or args.allow_moved):
        print("reconcile pin: --check takes at most SERVICE (no TAG, --dry-run or "
              "--allow-moved): it only compares", file=sys.stderr)
        return int(Exit.USAGE)
    if not args.check and not args.service:
        print("reconcile pin: SERVICE is required (or --check to check every pin)\n"
              "(see: reconcile pin --help)", file=sys.stderr)
        return int(Exit.USAGE)
    try:
        root, stage = stages.select(args, args.path, command="pin")
        overrides = options.overrides_from(args)
        if args.check:
            return check(engine.check_pins(root, args.service, overrides=overrides))
        result = engine.pin(root, args.service, args.tag, write=not args.dry_run,
                            allow_moved=args.allow_moved, preview=not args.no_plan,
                            overrides=overrides, progress=output.progress_for_stderr(),
                            stage=stage)
    except EngineError as exc:
        return output.report_error(exc)
    return show(result, planned=not args.no_plan)


def show(result: PinRun, *, planned: bool) -> int:
    """Print what pin did (``render.pinview``), then the plan of the service with it."""
    from reconciler.render import pinview

    output.say(pinview.story(result))
    if result.problems:
        return int(Exit.ERROR)
    if not planned:
        return int(Exit.OK)
    output.say(pinview.preview(result))
    if result.preview is not None:
        output.show(result.preview, "text", sys.stdout)
    return int(Exit.OK)


def check(results: Sequence[PinCheck]) -> int:
    """``--check``: 20 when any pin lags, 1 when any could not be compared (and none
    lags), 0 when every pin compared is current."""
    from reconciler.render import pinview

    output.say(pinview.check(results))
    if any(r.lags for r in results):
        return int(Exit.PIN_LAGS)
    return int(Exit.ERROR if any(r.unknown for r in results) else Exit.OK)


def unified_diff(path: str, before: bytes, after: bytes) -> list[str]:
    """The file's change as ``render.pinview`` shows it (kept here for its callers)."""
    from reconciler.render import pinview

    return pinview.unified_diff(path, before, after)
