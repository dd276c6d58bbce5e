"""Lean values: the frozen, slotted dataclasses a fleet-scale run holds by the 100,000.

Owns ``LeanValue``, the base of the values a snapshot and a plan hold once per (service,
cluster) -- ``core.live.Observation`` and ``ClusterRuntime``, ``core.evidence.
ClusterProof`` -- and ``lean_config``, how pydantic reads and writes them as fields of
the plan's models. A pydantic model instance costs about 350 bytes (the instance and its
``__dict__``) and a validation to build; such a value 80 bytes (five fields) and its plain
``__init__``, never validated: whoever builds one holds values already checked (the
shell's strict wire models, the judge's own vocabulary), and mypy checks the types.

Read from JSON (a saved plan), pydantic validates them as strictly as the models --
unknown fields refused, types checked, ``exclude`` and ``exclude_if`` honoured when
written -- because the plan's models name them as fields (pydantic accepts standard
dataclasses there: ``__pydantic_config__`` is their config). ``model_copy``,
``model_dump`` and ``model_validate`` keep the models' spelling so their callers need
not know which they hold. What a value does not keep is pydantic's record of which
fields were given (``model_fields_set``): nothing reads it for these.

Must not: validate on construction, hold a ``__dict__`` (every subclass is a
``@dataclass(frozen=True, slots=True, kw_only=True)``), or do I/O.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self, cast

from pydantic import ConfigDict, TypeAdapter


def _own_description(schema: dict[str, Any], cls: type) -> None:
    """The class's docstring as its schema's description, as pydantic does for a model
    (for a standard dataclass it does not: its ``__doc__`` may be the generated
    signature, which is left out here too)."""
    doc = cls.__doc__
    if doc and not doc.startswith(f"{cls.__name__}("):
        schema["description"] = inspect.cleandoc(doc)


def lean_config(*, strict: bool) -> ConfigDict:
    """pydantic's config for a lean value: unknown fields refused, like the models."""
    return ConfigDict(strict=strict, extra="forbid", json_schema_extra=_own_description)


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


class LeanValue:
    """The base of a lean value (see the module): no slots of its own, and the models'
    spelling of copy, dump and validate."""

    __slots__ = ()
    __pydantic_config__: ClassVar[ConfigDict] = lean_config(strict=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A copy with ``update`` applied, not validated (as ``BaseModel.model_copy``)."""
        return cast(Self, dataclasses.replace(cast(Any, self), **(update or {})))

    def model_dump(self, *, mode: Literal["python", "json"] = "python",
                   **options: Any) -> dict[str, Any]:
        """The value as its plan fields are written (``exclude`` honoured)."""
        dumped: dict[str, Any] = _adapter(type(self)).dump_python(self, mode=mode, **options)
        return dumped

    @classmethod
    def model_validate(cls, data: object) -> Self:
        """``data`` validated as a saved plan's field is (strict, no unknown field)."""
        made: Self = _adapter(cls).validate_python(data)
        return made
