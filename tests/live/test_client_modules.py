"""The client packages keep their public surface and their seams (httpx's
``tests/test_exported_members.py`` pins the public API the same way)."""

from __future__ import annotations

import importlib

import pytest

from reconciler.shell import controlplane, probing

#: The modules the import-linter contracts ``controlplane-modules`` and
#: ``probing-modules`` layer (optional there, so pinned here).
MODULES = [
    "reconciler.shell.controlplane.fleet", "reconciler.shell.controlplane.client",
    "reconciler.shell.controlplane.session",
    "reconciler.shell.controlplane.envelope", "reconciler.shell.controlplane.identity",
    "reconciler.shell.controlplane.wire", "reconciler.shell.controlplane.errors",
    "reconciler.shell.probing.prober", "reconciler.shell.probing.reading",
    "reconciler.shell.probing.batching",
    "reconciler.shell.probing.authenticating", "reconciler.shell.probing.resolving",
    "reconciler.shell.probing.dialing", "reconciler.shell.probing.parsing",
]


@pytest.mark.parametrize("name", MODULES)
def test_each_layered_module_exists_and_says_what_it_owns(name: str) -> None:
    module = importlib.import_module(name)
    doc = module.__doc__ or ""
    assert "Owns" in doc or "Policy" in doc, name


def test_the_packages_export_what_callers_import() -> None:
    assert {"ControlPlaneClient", "ControlPlaneError", "TransportError", "ProtocolError",
            "DomainError", "CasMismatch", "UnknownMethod", "parse_service", "parse_grants",
            "parse_egress", "token_from_env", "Written"} <= set(controlplane.__all__)
    assert {"Prober", "HEALTH_PATH", "STATUS_PATH", "parse_runtime",
            "system_resolver"} <= set(probing.__all__)
    for package in (controlplane, probing):
        for name in package.__all__:
            assert hasattr(package, name), f"{package.__name__}.{name}"
