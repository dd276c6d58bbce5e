"""The cyclic garbage collector during a bulk build: what it may skip, then as it was.

A snapshot of 10,000 services × 10 clusters, and the plan made from it, allocate
millions of objects that all stay alive (pydantic models, tuples, strings), and every
few thousand allocations CPython's cyclic collector walks the young ones and, now and
then, the whole heap -- a fifth to a third of the process's CPU time at that size, for
little garbage (measured in ``docs/scaling.md``). Reference counting frees everything
that is not in a cycle at once either way.

Two contexts, and one rule for HTTP responses:

- ``bulk`` (loading, a snapshot, planning): no cyclic collection inside. The few cycles
  they make are collected at the first collection after it, as they would have been.
  ``bulk(keep=True)`` (loading, planning: what they build is kept) also freezes it out
  of the collector's walks until the next pass begins.
- ``settled``: the collector keeps running, but everything alive when the context begins
  (the desired state, the loaded modules) is frozen out of its walks (``gc.freeze``), so
  a full collection walks only what was built inside.
- ``release(response)``: every HTTP response httpx returns sits in a reference cycle (the
  response and its bound stream), so with the collector paused each response -- and
  its body: 120 MB of pages at 10,000 × 10 -- would stay alive to the end of the pass.
  Every reader of a reply (``shell.probing.dialing``, ``shell.controlplane.session``)
  releases it once its body is read: the stream is swapped for an empty one, the cycle
  is gone, and the response is freed when its last reference goes (checked with a weak
  reference in ``tests/live/test_wire_models.py``).

- ``sweep()``: the youngest generation collected now. Everything a paused pass built is
  still in it, so this is the walk the first collection after the pass would make
  anyway -- made at a chosen moment: ``observe_async`` sweeps before it returns, while
  the event loop still runs. A request cancelled at its deadline leaves its connection
  in a cycle; left to the collection at interpreter exit, after the loop closed, it cost
  a failing ``plan`` two more seconds (``tests/live/test_call_deadline.py``).

- Large buffers mapped: glibc serves an allocation above its mmap threshold (128 KiB)
  by a mapping of its own, given back to the system when freed -- but freeing one raises
  the threshold to its size, so after the first few 1 MB batch pages every page, and the
  pieces of a 47 MB ``getServices`` reply, came from the heap between objects that stay,
  and the heap could not shrink. The threshold is fixed at 128 KiB when this module is
  loaded (``mallopt(M_MMAP_THRESHOLD)``, which also stops the dynamic raise): a 10,000 ×
  10 snapshot's peak resident set 250 -> 231 MB (``docs/scaling.md``, round 8). A few
  hundred such buffers a pass cost a mapping each, microseconds.
- ``trim()``: the C allocator's free pages given back to the system. A snapshot's
  transient allocations (each status text cut and compared, pages, the wire models of a
  chunk) are freed, but between the ones it keeps, so glibc holds the freed pages: at
  10,000 × 10 the resident set after a snapshot was 39 MB above what ``malloc_trim``
  leaves (``docs/scaling.md``, round 8), the peak 11 MB higher, and a watcher kept it
  between resyncs. ``observe_async`` trims when the clusters have answered and when the
  snapshot is made (about 2 ms each). Where the C library has no ``malloc_trim`` (not
  glibc), nothing is done.

Nested uses are one context; the collector is restored only when the outermost ends,
and only to what it was when it began. Neither may span more than one pass (a
watcher's whole life).
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx

_paused = 0
_was_enabled = False
_frozen = 0


@contextmanager
def bulk(*, keep: bool = False) -> Iterator[None]:
    """No cyclic collection inside; the collector as it was after the outermost exit.

    ``keep``: what was built inside is kept (the desired state, a plan), so it is frozen
    out of the collector's walks at the outermost exit (``gc.freeze``: a constant-time
    move of the generations' lists). Otherwise the first collections after the context
    walk everything built inside once or twice more to promote it -- about a second for
    the 10,000-file desired state, two for a 10,000 × 10 plan, and no garbage found. The
    next pass hands it back: the outermost entry of any ``bulk`` unfreezes (constant
    time too), so a cycle that became garbage meanwhile is collected as usual, never
    kept frozen past one pass. Inside ``settled`` neither happens (its freeze rules)."""
    global _paused, _was_enabled
    if _paused == 0:
        _was_enabled = gc.isenabled()
        if _frozen == 0 and gc.get_freeze_count():
            gc.unfreeze()
        gc.disable()
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0 and _was_enabled:
            if keep and _frozen == 0:
                gc.freeze()
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


def release(response: httpx.Response) -> httpx.Response:
    """``response``, its body read, no longer in a reference cycle (see the module
    docstring): its bound stream -- which refers back to it -- swapped for an empty one.
    Nothing reads the stream of a response whose body was read; ``content`` stays."""
    response.stream = httpx.ByteStream(b"")
    return response


def trim() -> None:
    """Give the C allocator's free pages back to the system (see the module docstring)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _libc_function(name: str) -> Callable[..., int] | None:
    """A function of the C library this process runs on, or None where it has none
    (``malloc_trim`` and ``mallopt`` are glibc's)."""
    try:
        found: Callable[..., int] = getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return None
    return found


_MALLOC_TRIM = _libc_function("malloc_trim")

#: glibc's ``mallopt`` parameter for the mmap threshold (``malloc.h``)
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 128 * 1024


def _map_large() -> bool:
    """Fix glibc's mmap threshold (see the module docstring); False where there is no
    ``mallopt`` (not glibc) or it refused."""
    mallopt = _libc_function("mallopt")
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD))


LARGE_MAPPED = _map_large()


def sweep() -> None:
    """Collect the youngest generation now (see the module docstring)."""
    gc.collect(0)
