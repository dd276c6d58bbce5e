"""``reconcile pin SERVICE [TAG]``: pin a service's release to the digest the control plane
observed under a tag (the newest release without TAG), in place, and show what plan would
then do. ``reconcile pin --check [SERVICE]``: say which pins lag the newest release.

Owns the command's arguments and its text output: the unified diff of the file, the
refusals, the lag listing and the exit codes (docs/pin.md). Resolution is
``core.pinning``'s, the file rewrite ``shell.pinning``'s, the sequence ``engine.pin`` /
``engine.check_pins``'; the plan preview is rendered by the text renderer of ``plan``.

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
import difflib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from reconciler.commands import options, output, stages
from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the engine (and the HTTP stack) loads only when the command runs
    from reconciler.engine import PinCheck, PinRun


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


def _release(tag: str | None, digest: str) -> str:
    return f"{safe(tag, 130) if tag else '<no tag>'} {safe(digest, 80)}"


def show(result: PinRun, *, planned: bool) -> int:
    """Print what pin did: the change, the diff, what may now be stale, the plan."""
    from reconciler.core import pinning  # loads with the engine, when the command runs

    pin, pinned = result.pin, result.pinned
    path = safe(result.path, 500)  # a file name is the user's, but still no terminal escapes
    changed = result.after != result.before
    first = pinning.when(pin.release.first_observed_at)
    if changed:
        print(f"{result.service}: {_release(pinned.tag, pinned.digest)} → "
              f"{_release(pin.tag, pin.digest)} (first observed {first})")
        if pin.version is not None and pin.version != pinned.version:
            print(f"{result.service}: release.version {safe(pinned.version)} → "
                  f"{safe(pin.version)}")
        if pin.moved_from is not None:
            print(f"warning: tag {safe(pin.tag)} moved from {safe(pin.moved_from)} to "
                  f"{safe(pin.digest)} (--allow-moved)", file=sys.stderr)
        output.write("".join(unified_diff(result.path, result.before, result.after)))
        if result.written:
            print(f"wrote {path}; commit it: plan and apply read the commit")
        else:
            print(f"dry run: {path} not written")
    else:
        print(f"{result.service}: already pins {_release(pin.tag, pin.digest)} (first "
              f"observed {first}); {path} unchanged")
    for line in result.stale_comments:
        print(f"note: {path}:{line}: a comment mentions the previous tag or digest; "
              "pin does not edit comments", file=sys.stderr)
    if result.problems:
        for diagnostic in result.problems:
            print(diagnostic.render(), file=sys.stderr)
        state = "is now" if result.written else "would be"
        print(f"error: {path} {state} invalid with this pin ({len(result.problems)} "
              "problem(s) above; e.g. release.evidence must be attested for the new digest)",
              file=sys.stderr)
        return int(Exit.ERROR)
    if not planned:
        return int(Exit.OK)
    if result.preview is None:
        print(f"warning: no plan for {result.service}: {safe(result.preview_error, 2000)}; "
              "run `reconcile plan` once the change is committed", file=sys.stderr)
        return int(Exit.OK)
    print(f"\nplan for {result.service} with this pin (the working tree, as if committed):")
    output.show(result.preview, "text", sys.stdout)
    return int(Exit.OK)


def unified_diff(path: str, before: bytes, after: bytes) -> list[str]:
    """The file's change as a unified diff, each line made safe for a terminal. Line
    endings are not shown (a CRLF file keeps its CRLF: only the values change)."""
    def lines(data: bytes) -> list[str]:
        text = data.decode("utf-8", "replace").removesuffix("\n")
        return [line.removesuffix("\r") for line in text.split("\n")]

    out = []
    for line in difflib.unified_diff(lines(before), lines(after), f"a/{path}", f"b/{path}",
                                     lineterm="", n=2):
        out.append(safe(line, 4000) + "\n")
    return out


def check(results: Sequence[PinCheck]) -> int:
    """``--check``: one line per service; 20 when any lags, 1 when any could not be
    compared (and none lags), 0 when every pin is current."""
    from reconciler.core import pinning
    from reconciler.core.live import ReadFailure

    lagging = unknown = current = absent = untagged = 0
    width = max((len(r.service) for r in results), default=0)
    for result in results:
        name = result.service.ljust(width)
        outcome = result.outcome
        if isinstance(outcome, pinning.Lag):
            pinned = outcome.pinned
            if outcome.lags:
                lagging += 1
                moved = (f" (its tag {safe(pinned.tag)} moved)" if outcome.moved else "")
                print(f"{name}  lags     {_release(pinned.tag, pinned.digest)} → "
                      f"{_release(outcome.newest_tag, outcome.newest.digest)} (first observed "
                      f"{pinning.when(outcome.newest.first_observed_at)}){moved}")
            else:
                current += 1
                print(f"{name}  current  {_release(pinned.tag, pinned.digest)}")
        elif isinstance(outcome, pinning.Refused):
            unknown += 1
            print(f"{name}  unknown  {safe(outcome.message, 2000)}")
        elif isinstance(outcome, ReadFailure):
            absent += 1
            print(f"{name}  absent   the control plane has no service {safe(outcome.service_id)}"
                  f" ({safe(outcome.code or outcome.reason)}): nothing to compare with")
        else:
            untagged += 1
            print(f"{name}  none     the control plane observed no tagged release: nothing "
                  "to compare with")
    total = len(results)
    if lagging:
        print(f"{lagging} of {total} pin(s) lag the newest observed release; update with "
              "reconcile pin SERVICE", file=sys.stderr)
        return int(Exit.PIN_LAGS)
    if unknown:
        print(f"{unknown} of {total} pin(s) could not be compared", file=sys.stderr)
        return int(Exit.ERROR)
    # Only what was compared is called current; the rest is counted, not glossed over.
    uncompared = [f"{absent} not on the control plane"] if absent else []
    uncompared += [f"{untagged} without a tagged release"] if untagged else []
    print(f"{current} of {total} pin(s) current"
          + (f"; not compared: {', '.join(uncompared)}" if uncompared else ""),
          file=sys.stderr)
    return int(Exit.OK)
