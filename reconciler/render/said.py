"""One line a view says, and where it goes. Pure.

Owns ``Said``: the unit the command views in ``render/`` hand back (pin, promote,
revert, freeze, validate, watch-status), so a command only prints what a view worded,
in the view's order. Must not print: the command does (``commands.output.say``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Said:
    """``text`` for stdout, or for stderr (``err``: warnings, refusals, summaries of a
    failure). ``raw``: written as is, no newline added, and flushed (a unified diff, whose
    lines end in their own newlines, goes out before any warning that follows it)."""

    text: str
    err: bool = False
    raw: bool = False


def out(*lines: str) -> list[Said]:
    return [Said(line) for line in lines]


def err(*lines: str) -> list[Said]:
    return [Said(line, err=True) for line in lines]
