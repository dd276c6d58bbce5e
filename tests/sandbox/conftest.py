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


@pytest.fixture
def bot(sandbox: Sandbox) -> Iterator[ControlPlaneClient]:
    """A client holding the deploy bot's token (not the admin's): what it may not do."""
    assert sandbox.deploy_bot_token_file is not None
    client = ControlPlaneClient(sandbox, token=sandbox.deploy_bot_token_file.read_text().strip())
    yield client
    client.close()
