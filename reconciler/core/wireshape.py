"""Wire shapes as pydantic models: the one way a reply from elsewhere is checked.

Owns ``WireModel`` -- the base of every model of a reply's shape (the control plane's
services, releases, grants and preflight report; a cluster's health, status and batch
page) -- and ``problem``, the one wording of what is wrong with a reply that does not
fit its model (``runtime.replicaCounts.required is not an integer``).

A wire model is *narrow*: it names only the fields ``reconcile`` reads, and every other
field of the reply is skipped while decoding (``extra="ignore"``), so a reply is never
held whole. It is *strict*: a JSON ``true`` is no integer, ``2.0`` is no count, ``"1"`` is
no port -- nothing is coerced, as the hand-written checks this replaces refused them. It
names fields in snake case and reads them in the wire's camel case (``app_id`` is
``appId``). It is *frozen*, so equal shapes hash equal (a pass shares one parsed value per distinct
body). Decoding from bytes (``model_validate_json``) runs in pydantic-core's compiled
JSON parser and never builds the skipped fields at all.

Strings are kept as sent: the shell sanitizes (``core.sanitize.safe``) each string it
keeps when it turns a wire model into a ``core`` value.

Pure: no I/O.
"""

from __future__ import annotations

import json
import re
import typing
from typing import Final, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from reconciler.core.lean import LeanModel
from reconciler.core.modelpaths import annotation_at
from reconciler.core.sanitize import safe

M = TypeVar("M", bound=BaseModel)

#: A reply's bytes as read: ``bytearray`` where they were gathered as they arrived.
Body = bytes | bytearray


class WireModel(LeanModel):
    """A reply's shape: the fields read, strict, frozen; every other field ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True,
                              alias_generator=to_camel, populate_by_name=True)


#: What a value of the wrong type is said not to be, by pydantic's error type.
_NOT: Final[dict[str, str]] = {
    "model_type": "an object", "model_attributes_type": "an object",
    "dict_type": "an object", "typed_dict_type": "an object",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
    "string_type": "a string", "int_type": "an integer", "int_from_float": "an integer",
    "int_parsing": "an integer", "bool_type": "a boolean", "bool_parsing": "a boolean",
    "float_type": "a number", "float_parsing": "a number",
}


def where(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """A pydantic location as the field path a reply's reader says: ``a.b[0].c``."""
    text = prefix
    for part in loc:
        if isinstance(part, str) and _is_union_tag(part):
            continue  # which member of a union was tried, not a field of the reply
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "the reply"


def _is_union_tag(part: str) -> bool:
    if any(c in part for c in "[]-,"):
        return True
    pending: list[type[BaseModel]] = [WireModel]
    while pending:
        model = pending.pop()
        if model.__name__ == part:
            return True
        pending.extend(model.__subclasses__())
    return False


def _expected(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> str | None:
    """What the field at ``loc`` of ``model`` must be (``a string``), for a missing one."""
    current = annotation_at(model, loc, skip=_is_union_tag)
    origin = typing.get_origin(current) or current
    if isinstance(origin, type):
        if issubclass(origin, BaseModel) or issubclass(origin, dict):
            return "an object"
        if issubclass(origin, tuple | list):
            return "a list"
        for kind, words in ((bool, "a boolean"), (str, "a string"), (int, "an integer")):
            if issubclass(origin, kind):
                return words
    return None


def describe(error: ErrorDetails, prefix: str = "",
             model: type[BaseModel] | None = None) -> str:
    """One validation error as a phrase: ``<field> is not <kind>`` (a missing field too,
    when ``model`` says what it must be: a reply that leaves it out has not sent one),
    ``<field> is missing``, or pydantic's own sentence after the field for anything else."""
    loc = tuple(error["loc"])
    field = where(loc, prefix)
    kind = error["type"]
    if kind in _NOT:
        return f"{field} is not {_NOT[kind]}"
    if kind == "missing":
        expected = _expected(model, loc)
        return f"{field} is not {expected}" if expected else f"{field} is missing"
    if kind in ("string_too_short", "too_short"):
        return f"{field} is empty"
    if kind in ("string_too_long", "too_long"):
        return f"{field} is too long"
    message = str(error.get("msg", "is invalid"))
    return f"{field}: {message[:1].lower()}{message[1:]}"


def problem(exc: ValidationError, prefix: str = "", limit: int = 200,
            model: type[BaseModel] | None = None) -> str:
    """The first thing wrong with a reply, sanitized and bounded (see ``describe``); a
    body that is not JSON at all is ``malformed JSON``."""
    errors = exc.errors(include_url=False)
    if not errors:
        return "malformed JSON"
    first = errors[0]
    if first["type"] == "json_invalid":
        return "malformed JSON"
    return safe(describe(first, prefix, model), limit)


#: A lone surrogate: valid in JSON text (``"\\ud800"``), not in a Python ``str`` that
#: pydantic-core's parser builds.
_SURROGATE = re.compile("[\ud800-\udfff]")


def decode(model: type[M], content: Body | str) -> M:
    """``content`` decoded straight into ``model``; ``ValidationError`` when it does not
    fit. JSON text that only the standard library's parser reads (a lone surrogate
    escape, which pydantic-core refuses) is read as that parser reads it, each lone
    surrogate kept visible as its escape (``\\ud800``, as ``safe`` shows it): what was
    readable before stays readable."""
    try:
        return model.model_validate_json(content)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if not errors or errors[0]["type"] != "json_invalid":
            raise
        try:
            value = json.loads(content)
        except ValueError:
            raise exc from None
        text = _SURROGATE.sub(lambda m: f"\\\\u{ord(m.group()):04x}",
                              json.dumps(value, ensure_ascii=False))
        return model.model_validate_json(text.encode("utf-8"))


def decode_value(model: type[M], value: object) -> M:
    """A JSON value already decoded (``json.loads``) read as ``model`` reads JSON text:
    the same strict rules as ``decode`` (a list fills a tuple, nothing is coerced)."""
    text = _SURROGATE.sub(lambda m: f"\\\\u{ord(m.group()):04x}",
                          json.dumps(value, ensure_ascii=False))
    return model.model_validate_json(text.encode("utf-8"))
