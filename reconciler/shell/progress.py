"""Progress reporting for long reads: a protocol, a silent default and a stderr bar.

Owns how "n of m done" reaches a human. The observer and prober only call ``add`` (more
work discovered) and ``advance`` (work finished); they never print. The stderr
implementation draws only when stderr is a terminal -- a CI log or a pipe gets nothing,
not a stream of carriage returns -- and throttles redraws so 6,000 completions do not
mean 6,000 writes.

It must not write to stdout (that belongs to the rendered plan) and must not block.
"""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO


class Progress(Protocol):
    """What long-running reads report; implementations must be cheap and never raise."""

    def add(self, total: int) -> None:
        """``total`` more units of work are now known."""

    def advance(self, done: int = 1) -> None:
        """``done`` units finished."""

    def close(self) -> None:
        """The work is over; leave the terminal clean."""


class NullProgress:
    """Reports nothing."""

    def add(self, total: int) -> None:
        pass

    def advance(self, done: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class StderrProgress:
    """``label: done/total`` on one line of stderr, only when it is a terminal."""

    def __init__(self, label: str, *, stream: TextIO | None = None,
                 min_interval: float = 0.1) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._label = label
        self._total = 0
        self._done = 0
        self._interval = min_interval
        self._last = 0.0
        self._drawn = False
        isatty = getattr(self._stream, "isatty", None)
        self._enabled = bool(isatty and isatty())

    @property
    def enabled(self) -> bool:
        return self._enabled

    def add(self, total: int) -> None:
        self._total += total
        self._draw()

    def advance(self, done: int = 1) -> None:
        self._done += done
        self._draw()

    def close(self) -> None:
        if self._enabled and self._drawn:
            self._draw(force=True)
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False

    def _draw(self, *, force: bool = False) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self._interval and self._done < self._total:
            return
        self._last = now
        self._stream.write(f"\r\x1b[2K{self._label}: {self._done}/{self._total}")
        self._stream.flush()
        self._drawn = True
