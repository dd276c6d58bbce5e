"""The cyclic garbage collector during a bulk build: what it may skip, then as it was.

A snapshot of 10,000 services × 10 clusters, and the plan made from it, allocate
millions of objects that all stay alive (pydantic models, tuples, strings), and every
few thousand allocations CPython's cyclic collector walks the young ones and, now and
then, the whole heap -- a fifth to a third of the process's CPU time at that size, for
little garbage (measured in ``docs/scaling.md``). Reference counting frees everything
that is not in a cycle at once either way.

Two contexts, because the two phases make different garbage:

- ``bulk`` (planning): no cyclic collection inside. A plan is pure computation; the
  few cycles it makes are collected at the first collection after it, as they would
  have been.
- ``settled`` (a snapshot): the collector keeps running, but everything alive when the
  context begins (the desired state, the loaded modules) is frozen out of its walks
  (``gc.freeze``), so a full collection walks only what the snapshot built. It must
  keep running there: every HTTP response sits in a reference cycle (httpx's response
  and its bound stream), so pausing the collector would keep every page's body -- 120 MB
  at 10,000 × 10 -- alive until the end of the pass.

Nested uses are one context; the collector is restored only when the outermost ends,
and only to what it was when it began. Neither may span more than one pass (a
watcher's whole life).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = 0
_was_enabled = False
_frozen = 0


@contextmanager
def bulk() -> Iterator[None]:
    """No cyclic collection inside; the collector as it was after the outermost exit."""
    global _paused, _was_enabled
    if _paused == 0:
        _was_enabled = gc.isenabled()
        gc.disable()
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0 and _was_enabled:
            gc.enable()


@contextmanager
def settled() -> Iterator[None]:
    """Collections inside walk only the objects made inside (see the module docstring);
    what was frozen is handed back to the collector after the outermost exit."""
    global _frozen
    if _frozen == 0:
        gc.freeze()
    _frozen += 1
    try:
        yield
    finally:
        _frozen -= 1
        if _frozen == 0:
            gc.unfreeze()
