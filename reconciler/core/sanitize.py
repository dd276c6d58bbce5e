"""Making untrusted strings safe to print: one function, used everywhere.

Owns the rule from seed 000's ``safe()``: every string a server returns (and every
value echoed from a user's file or a saved plan) has its control characters made
visible and its length bounded before it reaches a terminal, a log line or a PR
comment. Pure.

"Control" means every character of the Unicode categories Cc (C0, DEL, C1: ESC, BEL,
CSI, OSC...), Cf (format: bidi embeddings/overrides/isolates and marks, zero-width
characters, the invisible "tag" characters), Cs (lone surrogates, which cannot even be
encoded for output) and Zl/Zp (line and paragraph separators). A test checks this list
against ``unicodedata`` so a new Python's Unicode tables cannot silently widen the gap.
"""

from __future__ import annotations

import re

DEFAULT_LIMIT = 300

# Regex escapes, not raw characters. C0 apart: JSON text uses newlines structurally.
_C0 = r"\x00-\x1f"
_OTHER_CONTROLS = (
    r"\x7f-\x9f"  # Cc: DEL, C1 (CSI \x9b, ST \x9c, OSC \x9d...)
    r"\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"  # Cf, incl. ALM
    r"\u200b-\u200f"  # zero-width space and joiners, LRM, RLM
    r"\u2028-\u202e"  # Zl, Zp; bidi embeddings and overrides (LRE..RLO)
    r"\u2060-\u2064\u2066-\u206f"  # word joiner, invisible operators; bidi isolates
    r"\ufeff\ufff9-\ufffb"  # zero-width no-break space (BOM); interlinear annotations
    r"\ud800-\udfff"  # Cs: lone surrogates (a JSON "\ud800" decodes to one)
    r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    r"\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"  # ...and tag characters
)
_UNSAFE = re.compile(f"[{_C0}{_OTHER_CONTROLS}]")
# In JSON text from json.dumps every raw C0 character is structural whitespace (it
# escapes those inside strings itself), so only the other controls need escaping there.
_UNSAFE_IN_JSON = re.compile(f"[{_OTHER_CONTROLS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def safe(text: object, limit: int = DEFAULT_LIMIT) -> str:
    """Return ``text`` with controls escaped (``\\x1b``) and at most ``limit`` characters."""
    value = _UNSAFE.sub(_escape, str(text))
    if len(value) > limit:
        return f"{value[:limit]}…(+{len(value) - limit} chars)"
    return value


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xd800 + (code >> 10):04x}\\u{0xdc00 + (code & 0x3ff):04x}"


def safe_json_text(text: str) -> str:
    """JSON text (from ``json.dumps``) with every control inside a string as a ``\\u`` escape.

    Lossless: the document decodes to the same value, but no C1 control, bidi override
    or lone surrogate is left raw for a terminal (or ``cat``) to act on.
    """
    return _UNSAFE_IN_JSON.sub(_json_escape, text)
