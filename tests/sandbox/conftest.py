"""Clients of a running sandbox for the sandbox's own tests, closed at teardown."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reconciler.sandbox.launcher import Sandbox
from tests.sandbox.wire import ControlPlaneClient, MeshClient


@pytest.fixture
def cp(sandbox: Sandbox) -> Iterator[ControlPlaneClient]:
    client = ControlPlaneClient(sandbox)
    yield client
    client.close()


@pytest.fixture
def mesh(sandbox: Sandbox) -> Iterator[MeshClient]:
    client = MeshClient(sandbox)
    yield client
    client.close()
