"""Documents are validated on the JSON text of their loaded values (``shell.validating``):
msgspec writes it, ``json.dumps`` where msgspec cannot. Either way a value reads back as
itself -- a float stays a float, a big integer an integer -- so what the models say about
it is what they said when ``json.dumps`` wrote every text."""

from __future__ import annotations

import json

import pytest

from reconciler.core.desired import Hold
from reconciler.shell import loading, validating

HOLD = """\
apiVersion: reconcile/v1
kind: Hold
service: checkout
digest: sha256:{digest}
reason: {reason}
since: "2026-01-01T00:00:00Z"
"""


def _validate(text: str) -> tuple[object, list[str]]:
    (document,), problems = loading.parse_bytes(text.encode(), "h.yaml")
    assert not problems
    model, found = validating.validate_document(document)
    return model, [f"{d.line}:{d.field}: {d.message}" for d in found]


@pytest.mark.parametrize(("reason", "said"), [
    ("1.0", "5:reason: must be a string (got the number 1.0)"),
    ("1e16", "5:reason: must be a string (got the number 1e+16)"),
    ("123456789012345678901234567890",
     "5:reason: must be a string (got the number 123456789012345678901234567890)"),
    ("-0.0", "5:reason: must be a string (got the number -0.0)"),
    ("[1, 2.5, true, null]", "5:reason: must be a string (got a list)"),
])
def test_numbers_reach_the_model_as_they_were_loaded(reason: str, said: str) -> None:
    model, found = _validate(HOLD.format(digest="a" * 64, reason=reason))
    assert model is None and found == [said]


@pytest.mark.parametrize("reason", ['"caf\\u00e9 \\U0001F600"', '"\\ud800 lone"', "'tab\there'"])
def test_strings_msgspec_cannot_write_are_read_as_json_dumps_wrote_them(reason: str) -> None:
    text = HOLD.format(digest="a" * 64, reason=reason)
    model, found = _validate(text)
    (document,), _ = loading.parse_bytes(text.encode(), "h.yaml")
    try:
        expected: object = Hold.model_validate_json(json.dumps(document.value))
    except ValueError as exc:  # what json.dumps's text always gave
        expected = type(exc)
    if isinstance(expected, Hold):
        assert model == expected and not found
    else:
        assert model is None and found
