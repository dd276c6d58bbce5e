"""The base of every pydantic model of the core: one fields set per shape, not per instance.

Owns ``LeanModel``, and ``CoreModel``: a frozen, closed ``LeanModel`` (the base most core
values share). Pydantic keeps, in every instance, the set of field names it was
given (``model_fields_set``): a set object of its own, 216 bytes and more -- often more
than the instance's values. At fleet scale the core holds hundreds of thousands of
models (a desired state of 10,000 services is 40,000 ``Service``/``Release``/
``Destination``/``SourceRef``s; a plan of 10,000 changes 50,000 more), and nearly all of
them were given one of a handful of field combinations. Instances of a class given the
same fields share one such set instead.

It must not hold anything but those sets, nor be used for models that are mutable: a
shared set is safe only because no instance ever adds to it (every model of the core is
frozen, and ``model_copy`` copies the set before adding to it).

Pure: no I/O imports.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict

#: Per class, one set object per distinct set of explicitly given field names; a class
#: built with more shapes than ``_MAX_SHAPES`` keeps a set per instance past those.
_FIELDS_SETS: dict[type, list[set[str]]] = {}
_MAX_SHAPES: Final = 16


class LeanModel(BaseModel):
    """A frozen model that shares its fields set with every instance of its class that
    was given the same fields (see the module docstring)."""

    def model_post_init(self, context: Any, /) -> None:
        given = self.__pydantic_fields_set__
        shapes = _FIELDS_SETS.get(type(self))
        if shapes is None:
            shapes = _FIELDS_SETS[type(self)] = []
        for shared in shapes:  # a class is built with a handful of shapes at most
            if shared == given:
                object.__setattr__(self, "__pydantic_fields_set__", shared)
                return
        if len(shapes) < _MAX_SHAPES:
            shapes.append(given)


class CoreModel(LeanModel):
    """A value of the core: frozen (the shared fields sets rely on it) and closed (a field
    the class does not declare is a mistake, never silently kept)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
