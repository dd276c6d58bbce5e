"""A sandbox shared by the tests of one module.

Starting a sandbox costs about a second (four processes), so a module whose tests only
read, or clear their own faults, starts one for all of them. The fixture that yields it
is one line: ``yield from sandboxes.for_module(tmp_path_factory, "name", ...)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.core.desired import DesiredState, Service, Settings
from reconciler.sandbox import launcher
from reconciler.sandbox.launcher import Sandbox

#: the apps every sandbox cluster runs (its seed)
APPS = ("checkout", "catalog", "search", "notifications")


def for_module(factory: pytest.TempPathFactory, name: str, **start: Any) -> Iterator[Sandbox]:
    """Start a sandbox in a fresh directory named after ``name``, yield it, and stop it
    even when a test failed (a sandbox left running holds its ports for the next module).
    ``start`` goes to ``launcher.start`` as it is (e.g. ``converge_delay_ms``)."""
    sandbox = launcher.start(factory.mktemp(name) / "sandbox", **start)
    try:
        yield sandbox
    finally:
        sandbox.stop()


def desired(sb: Sandbox) -> DesiredState:
    """A desired state naming the sandbox's apps, with its own settings: what the live-side
    readers are asked about (the digest is not one the sandbox runs; these tests read)."""
    settings = Settings.model_validate(json.loads(sb.settings_yaml()))
    services = tuple(Service.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Service", "name": name,
        "serviceId": f"svc-{name}", "appId": name,
        "release": {"registryHost": "registry.sandbox.test", "repository": f"shop/{name}",
                    "digest": "sha256:" + "a" * 64}}) for name in APPS)
    return DesiredState(settings=settings, services=services, grants=())
