"""``core.sanitize.safe`` takes shortcuts at fleet scale (one scan to find whether any
registered secret occurs; printable ASCII skips the escaping regex): its answer must be
the plain rule's answer for every string -- checked here against that rule, written out
the slow way, on generated strings full of controls, secrets and URLs."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import sanitize

SECRETS = ("tok_abcdef123", "abcdef", "Bearer xyz.jwt.sig", "p@ss?w0rd*+")


def reference(text: str, limit: int) -> str:
    """The rule as written before the shortcuts: every secret replaced (longest first),
    URL query values redacted, every control escaped, then bounded."""
    for secret in sorted(SECRETS, key=len, reverse=True):
        text = text.replace(secret, sanitize.REDACTED)
    if "?" in text and "://" in text:
        text = sanitize._URL_QUERY.sub(sanitize._query_values, text)
    value = sanitize._UNSAFE.sub(sanitize._escape, text)
    if len(value) > limit:
        return f"{value[:limit]}…(+{len(value) - limit} chars)"
    return value


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    sanitize.forget_secrets()
    for secret in SECRETS:
        sanitize.register_secret(secret)
    yield
    sanitize.forget_secrets()


pieces = st.sampled_from([*SECRETS, "https://h/x?token=v&a=b", "\x1b[31m", "\t", "\x7f",
                          "\u202e", "\ud800", "é", "plain", " ", "?", "://", "\x9b", "tok_"])
texts = st.lists(st.one_of(pieces, st.text(max_size=8)), max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(texts, st.sampled_from([5, 40, 300]))
def test_safe_is_the_plain_rule(text: str, limit: int) -> None:
    assert sanitize.safe(text, limit) == reference(text, limit)


def test_a_secret_is_found_after_it_is_registered_and_not_after_it_is_forgotten() -> None:
    assert sanitize.safe("x tok_abcdef123 y") == "x <redacted> y"
    sanitize.forget_secrets()
    assert sanitize.safe("x tok_abcdef123 y") == "x tok_abcdef123 y"
    sanitize.register_secret("tok_abcdef123")
    assert sanitize.safe("x tok_abcdef123 y") == "x <redacted> y"
    assert re.fullmatch(r"a\\x1bb", sanitize.safe("a\x1bb"))


def test_remembered_answers_are_per_bound_and_forgotten_past_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``safe`` remembers its answers (a plan asks about the same strings 800,000
    times): one string under two bounds has two answers, and the memory is bounded."""
    long = "x" * 50
    assert sanitize.safe(long, 5) == "xxxxx…(+45 chars)"
    assert sanitize.safe(long, 300) == long
    assert sanitize.safe(long, 5) == "xxxxx…(+45 chars)"
    monkeypatch.setattr(sanitize, "_SAFE_MAX", 3)
    for number in range(10):
        assert sanitize.safe(f"s{number} tok_abcdef123", 40) == f"s{number} <redacted>"
    assert sum(len(known) for known in sanitize._SAFE.values()) <= 3
