"""``reconcile pin`` in words: what one pin changed (``story``), the plan preview's
heading, and ``pin --check``'s table (``check``). Pure.

Owns the wording of the command's outcomes (docs/pin.md); the exit codes are the
command's, the values the engine's (``core.pinning.PinRun``/``PinCheck``). Every string
that came from the control plane or a file name is made safe for a terminal here.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from reconciler.core import pinning
from reconciler.core.live import ReadFailure
from reconciler.core.pinning import PinCheck, PinRun
from reconciler.core.sanitize import safe
from reconciler.render.said import Said, err, out


def release(tag: str | None, digest: str) -> str:
    return f"{safe(tag, 130) if tag else '<no tag>'} {safe(digest, 80)}"


def story(result: PinRun) -> list[Said]:
    """What pin did: the change and its diff (or that nothing changed), comments it
    left quoting the old release, and what the rewritten file fails, if anything."""
    pin, pinned = result.pin, result.pinned
    path = safe(result.path, 500)  # a file name is the user's, but still no terminal escapes
    first = pinning.when(pin.release.first_observed_at)
    said: list[Said] = []
    if result.after != result.before:
        said += out(f"{result.service}: {release(pinned.tag, pinned.digest)} → "
                    f"{release(pin.tag, pin.digest)} (first observed {first})")
        if pin.version is not None and pin.version != pinned.version:
            said += out(f"{result.service}: release.version {safe(pinned.version)} → "
                        f"{safe(pin.version)}")
        if pin.moved_from is not None:
            said += err(f"warning: tag {safe(pin.tag)} moved from {safe(pin.moved_from)} "
                        f"to {safe(pin.digest)} (--allow-moved)")
        said.append(Said("".join(unified_diff(result.path, result.before, result.after)),
                         raw=True))
        said += out(f"wrote {path}; commit it: plan and apply read the commit"
                    if result.written else f"dry run: {path} not written")
    else:
        said += out(f"{result.service}: already pins {release(pin.tag, pin.digest)} (first "
                    f"observed {first}); {path} unchanged")
    said += err(*(f"note: {path}:{line}: a comment mentions the previous tag or digest; "
                  "pin does not edit comments" for line in result.stale_comments))
    if result.problems:
        said += err(*(diagnostic.render() for diagnostic in result.problems))
        state = "is now" if result.written else "would be"
        said += err(f"error: {path} {state} invalid with this pin ({len(result.problems)} "
                    "problem(s) above; e.g. release.evidence must be attested for the new "
                    "digest)")
    return said


def preview(result: PinRun) -> list[Said]:
    """What comes before the plan preview: its heading, or why there is none."""
    if result.preview is None:
        return err(f"warning: no plan for {result.service}: "
                   f"{safe(result.preview_error, 2000)}; run `reconcile plan` once the "
                   "change is committed")
    return out(f"\nplan for {result.service} with this pin (the working tree, as if "
               "committed):")


def unified_diff(path: str, before: bytes, after: bytes) -> list[str]:
    """The file's change as a unified diff, each line made safe for a terminal. Line
    endings are not shown (a CRLF file keeps its CRLF: only the values change)."""
    def lines(data: bytes) -> list[str]:
        text = data.decode("utf-8", "replace").removesuffix("\n")
        return [line.removesuffix("\r") for line in text.split("\n")]

    return [safe(line, 4000) + "\n"
            for line in difflib.unified_diff(lines(before), lines(after), f"a/{path}",
                                             f"b/{path}", lineterm="", n=2)]


def check(results: Sequence[PinCheck]) -> list[Said]:
    """``--check``: one line per service, then the tally on stderr. Only what was
    compared is called current; the rest is counted, not glossed over."""
    width = max((len(r.service) for r in results), default=0)
    said = out(*(f"{r.service.ljust(width)}  {_checked(r)}" for r in results))
    total = len(results)
    lagging = sum(r.lags for r in results)
    unknown = sum(r.unknown for r in results)
    if lagging:
        return said + err(f"{lagging} of {total} pin(s) lag the newest observed release; "
                          "update with reconcile pin SERVICE")
    if unknown:
        return said + err(f"{unknown} of {total} pin(s) could not be compared")
    absent = sum(isinstance(r.outcome, ReadFailure) for r in results)
    untagged = sum(r.outcome is None for r in results)
    current = total - absent - untagged
    uncompared = [f"{absent} not on the control plane"] if absent else []
    uncompared += [f"{untagged} without a tagged release"] if untagged else []
    return said + err(f"{current} of {total} pin(s) current"
                      + (f"; not compared: {', '.join(uncompared)}" if uncompared else ""))


def _checked(result: PinCheck) -> str:
    """One service's ``--check`` word and why, after its padded name."""
    outcome = result.outcome
    if isinstance(outcome, pinning.Lag):
        pinned = outcome.pinned
        if not outcome.lags:
            return f"current  {release(pinned.tag, pinned.digest)}"
        moved = f" (its tag {safe(pinned.tag)} moved)" if outcome.moved else ""
        return (f"lags     {release(pinned.tag, pinned.digest)} → "
                f"{release(outcome.newest_tag, outcome.newest.digest)} (first observed "
                f"{pinning.when(outcome.newest.first_observed_at)}){moved}")
    if isinstance(outcome, pinning.Refused):
        return f"unknown  {safe(outcome.message, 2000)}"
    if isinstance(outcome, ReadFailure):
        return (f"absent   the control plane has no service {safe(outcome.service_id)}"
                f" ({safe(outcome.code or outcome.reason)}): nothing to compare with")
    return "none     the control plane observed no tagged release: nothing to compare with"
