"""Making untrusted strings safe to print: one function, used everywhere.

Owns the rule from seed 000's ``safe()``: every string a server returns (and every
value echoed from a user's file or a saved plan) has its control characters made
visible and its length bounded before it reaches a terminal, a log line or a PR
comment. Pure.

It also owns redaction, the one mechanism every output passes through: the secrets known
to the run (the machine token, the session jwt the control plane hands out, the clusters'
bearer tokens, the GitHub token) are *registered* once, by whoever learns them
(``register_secret``), and ``redact`` removes every registered secret, and the value of
every query parameter of a URL (``https://host/x?token=<redacted>``), from a string.
``safe`` redacts first, so every message, every rendered plan (``render.common.untrusted``)
and every log line is covered; ``safe_json_text`` redacts JSON text (JSON views, history);
``redact_value`` redacts plain JSON values before they are written (the journal), and the
plan's JSON form (the saved plan, ``--format json``) is redacted before its content digest
is taken (``render.jsonplan.to_wire``). The registry is process-wide state on purpose:
a secret learnt anywhere in the run is redacted everywhere in it; it is no I/O.

"Control" means every character of the Unicode categories Cc (C0, DEL, C1: ESC, BEL,
CSI, OSC...), Cf (format: bidi embeddings/overrides/isolates and marks, zero-width
characters, the invisible "tag" characters), Cs (lone surrogates, which cannot even be
encoded for output) and Zl/Zp (line and paragraph separators). A test checks this list
against ``unicodedata`` so a new Python's Unicode tables cannot silently widen the gap.
"""

from __future__ import annotations

import re

DEFAULT_LIMIT = 300

#: What a secret is replaced with, wherever it appears.
REDACTED = "<redacted>"
#: Shorter values are not redacted: replacing a 3-character "secret" everywhere would
#: mangle every output, and nothing that short is a credential worth the name.
MIN_SECRET_LENGTH = 6

#: The secrets known to this run, longest first (a secret containing another is replaced
#: whole). Grows only; ``forget_secrets`` is for tests.
_SECRETS: list[str] = []
#: Finds whether any of ``_SECRETS`` occurs in a text, in one scan (None: no secret yet).
#: Only a detector: the replacing is ``redact``'s loop, so its result is unchanged. A plan
#: of 10,000 × 10 passes about 800,000 strings through ``safe``, and asking ``secret in
#: text`` for each of a run's dozen secrets was a third of ``safe``'s time.
_ANY_SECRET: re.Pattern[str] | None = None

# A URL's query: scheme://... ? then everything up to whitespace, a quote, '<', '>' or '#'.
_URL_QUERY = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s?#'\"<>`]*\?)([^\s#'\"<>`]+)")


def register_secret(secret: object) -> None:
    """Remember ``secret`` (a str of at least ``MIN_SECRET_LENGTH`` characters; anything
    else is ignored) so that every later output of this run shows ``<redacted>`` instead."""
    if not isinstance(secret, str):
        return
    secret = secret.strip()
    if len(secret) < MIN_SECRET_LENGTH or secret in _SECRETS:
        return
    _SECRETS.append(secret)
    _SECRETS.sort(key=len, reverse=True)
    _detect_secrets()


def _detect_secrets() -> None:
    global _ANY_SECRET
    _ANY_SECRET = re.compile("|".join(map(re.escape, _SECRETS))) if _SECRETS else None
    _SAFE.clear()  # what was safe before may hold the new secret


def known_secrets() -> tuple[str, ...]:
    return tuple(_SECRETS)


def forget_secrets() -> None:
    """Tests only: start from no registered secret."""
    _SECRETS.clear()
    _detect_secrets()


def _query_values(match: re.Match[str]) -> str:
    params = []
    for param in match.group(2).split("&"):
        name, equals, value = param.partition("=")
        if equals:
            params.append(f"{name}={REDACTED}" if value else param)
        else:
            params.append(REDACTED if name else param)  # a bare value may be the token
    return match.group(1) + "&".join(params)


def redact(text: str) -> str:
    """``text`` with every registered secret and every URL query value replaced by
    ``<redacted>``. Nothing else changes (no escaping, no bound)."""
    if _ANY_SECRET is not None and _ANY_SECRET.search(text) is not None:
        for secret in _SECRETS:
            if secret in text:
                text = text.replace(secret, REDACTED)
    if "?" in text and "://" in text:
        text = _URL_QUERY.sub(_query_values, text)
    return text


def redact_value(value: object) -> object:
    """A plain JSON value (dicts, lists, strings, numbers) with every string redacted,
    keys included; for what is written as JSON (the journal's lines)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value

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


#: ``safe``'s answers by bound, then by string: a 10,000 × 10 plan asks about 800,000
#: times, mostly of a few thousand strings (cluster ids, states, digests). Cleared when a
#: secret is registered (``_detect_secrets``) and when it grows past ``_SAFE_MAX``
#: strings, so a long-running watcher holds at most that many.
_SAFE: dict[int, dict[str, str]] = {}
_SAFE_MAX = 50_000
_safe_size = 0


def safe(text: object, limit: int = DEFAULT_LIMIT) -> str:
    """Return ``text`` redacted (``redact``), with controls escaped (``\\x1b``) and at
    most ``limit`` characters."""
    global _safe_size
    if type(text) is not str:
        return _safe(str(text), limit)
    known = _SAFE.get(limit)
    if known is None:
        known = _SAFE[limit] = {}
    made = known.get(text)
    if made is None:
        if _safe_size >= _SAFE_MAX:
            _SAFE.clear()
            _safe_size = 0
            known = _SAFE[limit] = {}
        made = known[text] = _safe(text, limit)
        _safe_size += 1
    return made


def unchanged(text: str, limit: int = DEFAULT_LIMIT) -> bool:
    """Whether ``safe(text, limit)`` is ``text`` itself, decided without building it: no
    registered secret in it, no URL query to redact, only printable ASCII, within the
    bound. False means "ask ``safe``" (it may still come back the same), never "unsafe".
    For a caller that meets many distinct strings once each (a renderer's walk over a
    10,000 × 10 plan meets 150,000), where ``safe``'s memo only churns."""
    return (len(text) <= limit and text.isascii() and text.isprintable()
            and ("?" not in text or "://" not in text)
            and (_ANY_SECRET is None or _ANY_SECRET.search(text) is None))


def _safe(text: str, limit: int) -> str:
    value = redact(text)
    # Printable ASCII has no control to escape (for ASCII, ``isprintable`` is false for
    # exactly C0 and DEL): two scans in C instead of a regex substitution.
    if not (value.isascii() and value.isprintable()):
        value = _UNSAFE.sub(_escape, value)
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
    or lone surrogate is left raw for a terminal (or ``cat``) to act on. Redacted too
    (``redact``): a registered secret is never printed, even inside a JSON string.
    """
    return _UNSAFE_IN_JSON.sub(_json_escape, redact(text))
