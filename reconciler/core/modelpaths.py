"""What a pydantic model declares at a validation error's location.

Owns the walk from a model down a pydantic location (``("services", 0, "egress")``) to
the annotation declared there, and the unwrapping of ``Annotated[X, ...]`` and
``X | None`` on the way. Both readers that word a validation error ask it: the wire
replies' (``core.wireshape``: "field X is missing, it must be a string") and the
desired state's (``shell.validating``: "unknown key, did you mean ..."). It words
nothing itself.

Pure: no I/O.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel


def strip(annotation: Any) -> Any:
    """``Annotated[X, ...]`` and ``X | None`` -> ``X``."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


def annotation_at(model: type[BaseModel] | None, loc: tuple[int | str, ...], *,
                  skip: Callable[[str], bool] = lambda _part: False) -> Any:
    """The annotation ``model`` declares at ``loc`` (stripped), None when the location
    names no declared field. A list index steps into the item type; a key, into the
    field of that alias (or name); a key ``skip`` says is not a field (pydantic's tag of
    the union member it tried) is passed over."""
    current: Any = model
    for part in loc:
        current = strip(current)
        if isinstance(part, int):
            args = typing.get_args(current)
            current = args[0] if args else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            fields = {f.alias or n: f for n, f in current.model_fields.items()}
            found = fields.get(part)
            current = found.annotation if found is not None else None
        elif not skip(part):
            return None
    return strip(current)
