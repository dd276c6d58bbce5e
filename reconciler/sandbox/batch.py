"""The [ext] batch-read rules both sandbox servers share: cursors, page sizes and ETags.

Owns ``docs/extensions.md`` §1's paging and conditional-read rules in one place, so the
cluster's batch status route and the control plane's ``getServicesReleases`` page and
compare ETags the same way:

- a page is a slice of a sorted id list after the cursor's id (keyset paging: an item
  added or removed between two pages shifts nothing else);
- a cursor is opaque to clients: URL-safe base64 of ``{"a": last id, "p": page index}``
  (the index lets the ``batch-page-error`` fault name a page); anything else is refused;
- ``limit`` absent means :data:`DEFAULT_PAGE`; larger than :data:`MAX_PAGE` is clamped;
- ``If-None-Match`` holds one or more entity tags (or ``*``) and matches weakly
  (RFC 9110 §13.1.2: ``W/`` is ignored).

Pure: values in, values out; no I/O, no HTTP, no database.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

#: Page size when a request names none, and the most one page carries.
DEFAULT_PAGE = 500
MAX_PAGE = 1000
#: The cluster's batch status route, advertised in its health reply (``extensions``).
BATCH_STATUS_PATH = "/host/api/v3/baas/deployment/apps/status"
#: The control plane's batch method (listed by ``getCapabilities`` when on).
SERVICES_RELEASES = "getServicesReleases"


class PageRequestError(ValueError):
    """A cursor or limit this module does not accept; the text names which."""


@dataclass(frozen=True)
class Cursor:
    """Where a page starts: after ``after`` (None: from the first id); ``page`` 0-based."""

    after: str | None = None
    page: int = 0


def encode_cursor(after: str, page: int) -> str:
    raw = json.dumps({"a": after, "p": page}, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(value: object) -> Cursor:
    """``None`` or ``""`` start at the beginning; else a cursor this module issued."""
    if value is None or value == "":
        return Cursor()
    if not isinstance(value, str) or len(value) > 2048:
        raise PageRequestError("cursor must be a string this server returned as nextCursor")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        data = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise PageRequestError("cursor is not one this server returned") from exc
    after = data.get("a") if isinstance(data, dict) else None
    page = data.get("p") if isinstance(data, dict) else None
    if not isinstance(after, str) or not isinstance(page, int) or isinstance(page, bool) \
            or page < 1:
        raise PageRequestError("cursor is not one this server returned")
    return Cursor(after=after, page=page)


def page_size(value: object) -> int:
    """A request's ``limit`` (an int, or its decimal text from a query string)."""
    if value is None or value == "":
        return DEFAULT_PAGE
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PageRequestError(f"limit must be a positive integer (at most {MAX_PAGE} are "
                               "returned per page)")
    return min(value, MAX_PAGE)


def bisect_after(ids: Sequence[str], after: str) -> int:
    """The index of the first of the sorted ``ids`` greater than ``after``."""
    return bisect.bisect_right(ids, after)


def paginate(ids: Sequence[str], cursor: Cursor, limit: int
             ) -> tuple[list[str], str | None]:
    """The ids of this page from the sorted ``ids``, and the cursor of the next (or None)."""
    start = 0 if cursor.after is None else bisect_after(ids, cursor.after)
    page = list(ids[start:start + limit])
    return page, next_cursor(page, cursor, start + limit < len(ids))


def next_cursor(page: Sequence[str], cursor: Cursor, more: bool) -> str | None:
    """The cursor after ``page`` when more items follow it."""
    return encode_cursor(page[-1], cursor.page + 1) if more and page else None


def query_digest(*parts: object) -> str:
    """A short digest of what a request asked for: part of its page's ETag."""
    text = json.dumps(parts, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def strong(opaque: str) -> str:
    """An entity tag as it goes on the wire: the opaque value in double quotes."""
    return f'"{opaque}"'


def none_match_hits(header: str | None, etag: str) -> bool:
    """Whether ``If-None-Match: header`` matches the current ``etag`` (weak comparison)."""
    if header is None:
        return False
    candidates = [c.strip() for c in header.split(",")]
    if "*" in candidates:
        return True
    bare = etag.removeprefix("W/")
    return any(c.removeprefix("W/") == bare for c in candidates if c)
