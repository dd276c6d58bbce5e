"""Making untrusted strings safe to print: one function, used everywhere.

Owns the rule from seed 000's ``safe()``: every string a server returns (and every
value echoed from a user's file) has its control characters made visible and its
length bounded before it reaches a terminal, a log line or a PR comment. Pure.
"""

from __future__ import annotations

import re

DEFAULT_LIMIT = 300

# C0, DEL and C1 controls, plus the Unicode line/paragraph separators and bidi
# overrides that can reorder or hide text on a terminal or in a rendered comment.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: object, limit: int = DEFAULT_LIMIT) -> str:
    """Return ``text`` with controls escaped (``\\x1b``) and at most ``limit`` characters."""
    value = _UNSAFE.sub(_escape, str(text))
    if len(value) > limit:
        return f"{value[:limit]}…(+{len(value) - limit} chars)"
    return value
