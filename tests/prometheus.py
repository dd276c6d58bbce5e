"""A real Prometheus scraping a sandbox's clusters, for the tests (issue 34): the
``prometheus`` fixture over ``reconciler.sandbox.prometheus`` (which ``make
demo-verification`` uses too).

The fixture starts one for the ``sandbox`` fixture's sandbox and stops it at teardown. It
is registered by ``tests/conftest.py`` (``pytest_plugins``).

A machine without ``/usr/bin/prometheus`` FAILS the test, saying how to install it: a
missing tool never skips a test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.sandbox import prometheus as server
from reconciler.sandbox.launcher import Sandbox
from reconciler.sandbox.prometheus import INSTALL_HINT, Prometheus, scrape_config

__all__ = ["INSTALL_HINT", "PROMETHEUS_BINARY", "Prometheus", "prometheus", "scrape_config",
           "start_prometheus"]

PROMETHEUS_BINARY = server.PROMETHEUS_BINARY


def start_prometheus(sb: Sandbox, directory: Path) -> Prometheus:
    """A Prometheus scraping every cluster of ``sb``, once all its targets are up."""
    try:
        return server.start(sb, directory, binary=PROMETHEUS_BINARY)
    except server.PrometheusMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def prometheus(sandbox: Sandbox, tmp_path: Path) -> Iterator[Prometheus]:
    """A real Prometheus scraping the ``sandbox`` fixture's clusters (every target up)."""
    prom = start_prometheus(sandbox, tmp_path / "prometheus")
    try:
        yield prom
    finally:
        prom.stop()
