"""Route paths compared in whole segments: the one rule for which request paths a
route's ``match.path`` takes, asked by ``core.routing`` (overlap, cover, union),
``core.routedocs`` (the challenge-route rule) and ``core.desired`` (a challenge route
is specific to the ACME path).

As Gateway API's ``PathPrefix``: ``/api`` takes ``/api``, ``/api/`` and ``/api/v1``,
never ``/apix``; trailing slashes on the route's path are ignored (``/api/`` takes
exactly what ``/api`` takes); ``/`` takes every path. A request path is compared as
sent: no decoding, no folding of ``//`` or case.

Pure: no I/O.
"""

from __future__ import annotations


def path_stem(path: str) -> str:
    """A route path without its trailing slashes: ``/api/`` and ``/api`` match alike,
    ``/`` is ``""`` (every path)."""
    return path.rstrip("/")


def path_matches(route_path: str, request_path: str) -> bool:
    """Does a route with path ``route_path`` take ``request_path``? In whole segments:
    the request path is the route's path, or continues it after a ``/``."""
    stem = path_stem(route_path)
    return request_path == stem or request_path.startswith(stem + "/")


def _path_example(route_path: str) -> str:
    """The shortest request path the route takes: every request path it takes continues
    this one in whole segments, so a route that takes it takes them all."""
    return path_stem(route_path) or "/"


def path_covers(outer: str, inner: str) -> bool:
    """Every request path ``inner`` takes, ``outer`` takes too."""
    return path_matches(outer, _path_example(inner))


def paths_meet(left: str, right: str) -> str | None:
    """A request path both route paths take, or None. Segment prefixes form a tree:
    two of them share a path only when one is under the other, and then the deeper
    one's own path is shared."""
    if path_covers(left, right):
        return right
    if path_covers(right, left):
        return left
    return None
