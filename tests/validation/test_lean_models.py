"""Every pydantic model of the core shares its fields set per shape (``core.lean``): the
desired state and the plan hold tens of thousands of models at fleet scale."""

from __future__ import annotations

import importlib
import pkgutil

from pydantic import BaseModel

import reconciler.core
from reconciler.core.desired import Service
from reconciler.core.kinds.base import Preconditions, ReleaseRef
from reconciler.core.lean import LeanModel
from reconciler.core.live import LeanModel as ReExported
from reconciler.shell import loading, validating


def _core_models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    for info in pkgutil.walk_packages(reconciler.core.__path__, "reconciler.core."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseModel)
                    and value.__module__ == info.name):
                found.append(value)
    return found


def test_every_core_model_is_lean_and_there_is_one_base() -> None:
    models = _core_models()
    assert len(models) > 60
    assert [m.__qualname__ for m in models if not issubclass(m, LeanModel)] == []
    # A shared set is safe only because no instance adds to it: every one is frozen.
    assert [m.__qualname__ for m in models if m is not LeanModel
            and not m.model_config.get("frozen")] == []
    assert ReExported is LeanModel


def _service(name: str) -> Service:
    text = f"""\
apiVersion: reconcile/v1
kind: Service
name: {name}
serviceId: svc-{name}
appId: {name}
release:
  registryHost: registry.example.net
  repository: shop/{name}
  digest: sha256:{"a" * 64}
"""
    (document,), problems = loading.parse_bytes(text.encode(), f"{name}.yaml")
    assert not problems
    model, found = validating.validate_document(document)
    assert isinstance(model, Service), found
    return model


def test_desired_and_plan_models_of_one_shape_share_one_set() -> None:
    one, two = _service("cart"), _service("shop")
    assert one.model_fields_set is two.model_fields_set
    assert one.release.model_fields_set is two.release.model_fields_set
    first, second = ReleaseRef(digest="sha256:1"), ReleaseRef(digest="sha256:2")
    assert first.model_fields_set is second.model_fields_set == {"digest"}
    other = ReleaseRef(digest="sha256:3", tags=("v1",))
    assert other.model_fields_set == {"digest", "tags"}
    assert Preconditions(rollout_generation=1).model_fields_set is Preconditions(
        rollout_generation=2).model_fields_set


def test_a_copy_never_adds_to_the_shared_set() -> None:
    first, second = ReleaseRef(digest="sha256:1"), ReleaseRef(digest="sha256:2")
    copied = first.model_copy(update={"reference": "r"})
    assert copied.model_fields_set == {"digest", "reference"}
    assert first.model_fields_set == second.model_fields_set == {"digest"}
    assert first.model_dump(exclude_unset=True) == {"digest": "sha256:1"}
