"""Shared fixtures: a real sandbox (control plane + clusters as processes) per test.

``sandbox`` starts one with the default seed on free ports in ``tmp_path`` and a short
convergence delay, and stops it at teardown even when the test fails. ``sandbox_factory``
starts sandboxes with custom options (``launcher.start`` keywords) and stops them all.

A test that uses a fixture starting real processes (a sandbox, etcd, the Node server) is
marked ``integration`` here, whatever its module says, so that ``make check``
(``-m "not integration and not node"``) can never start one. Tests that start a
``reconcile`` (or tool) process themselves carry the mark on the test or module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.core import sanitize
from reconciler.sandbox import launcher
from reconciler.sandbox.launcher import Sandbox

TEST_CONVERGE_DELAY_MS = 200

#: ``prometheus``: a real Prometheus scraping the ``sandbox`` fixture's clusters.
pytest_plugins = ["tests.prometheus"]

#: Fixtures that start real processes: a test using any of them (directly or through
#: another fixture) is an integration test.
PROCESS_FIXTURES = frozenset({"sandbox", "sandbox_factory", "etcd", "node_server",
                              "node_tls_server", "run_node_client", "prometheus"})


#: Modules holding the suite's longest tests (soaks, windows and demos that wait on the
#: clock, kill -9 rounds, the 10,000-service split: 20-75 s each, measured 2026-12-05),
#: longest first. They are collected first, so that the workers start them at once
#: instead of one of them running alone at the end: collected in path order they came
#: last (``tests/verification``, ``tests/sharding``) and the run waited for them.
LONG_FIRST = (
    "tests/verification/test_demo_verification_e2e.py",
    "tests/promotion/test_demo_environments_e2e.py",
    "tests/sharding/test_sharded_watch_e2e.py",
    "tests/promotion/test_holds_e2e.py",
    "tests/apply/test_apply_timeout.py",
    "tests/promotion/test_soak_e2e.py",
    "tests/verification/test_verification_e2e.py",
    "tests/plan/test_markdown_comment.py",
    "tests/promotion/test_watch_promote_e2e.py",
    "tests/sharding/test_group_outcome_e2e.py",
    "tests/watch/test_deploy.py",
    "tests/revert/test_protected_branch_e2e.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    rank = {module: at for at, module in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    sb = launcher.start(tmp_path / "sandbox", converge_delay_ms=TEST_CONVERGE_DELAY_MS)
    try:
        yield sb
    finally:
        sb.stop()


@pytest.fixture
def sandbox_factory(tmp_path: Path) -> Iterator[Callable[..., Sandbox]]:
    started: list[Sandbox] = []

    def make(**options: Any) -> Sandbox:
        name = options.pop("name", f"sandbox-{len(started)}")
        options.setdefault("converge_delay_ms", TEST_CONVERGE_DELAY_MS)
        sb = launcher.start(tmp_path / name, **options)
        started.append(sb)
        return sb

    try:
        yield make
    finally:
        for sb in started:
            sb.stop()


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    """Each test starts with no registered secret (``core.sanitize``), as each run does."""
    sanitize.forget_secrets()
    yield
    sanitize.forget_secrets()
