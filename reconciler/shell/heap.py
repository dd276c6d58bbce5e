"""The cyclic garbage collector during a bulk build: paused, then as it was.

Owns ``bulk``: a context in which CPython's cyclic collector does not run. A snapshot of
10,000 services × 10 clusters, and the plan made from it, allocate millions of
objects that all stay alive (pydantic models, tuples, strings), and every few thousand
allocations the collector walks the young ones and, now and then, the whole heap --
about a third of the process's CPU time at that size, for no garbage at all (measured
in ``docs/scaling.md``). Reference counting still frees everything that is not in a
cycle at once; the few cycles made meanwhile (asyncio's futures and tracebacks) are
collected at the first collection after the context ends, as they would have been.

Nested uses are one pause; the collector is enabled again only when the outermost
context ends, and only if it was enabled when it began. Must not be used around a
loop that runs for longer than one pass (a watcher's whole life).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0
_was_enabled = False


@contextmanager
def bulk() -> Iterator[None]:
    """No cyclic collection inside; the collector as it was after the outermost exit."""
    global _depth, _was_enabled
    if _depth == 0:
        _was_enabled = gc.isenabled()
        gc.disable()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _was_enabled:
            gc.enable()
