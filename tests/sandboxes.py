"""A sandbox shared by the tests of one module.

Starting a sandbox costs about a second (four processes), so a module whose tests only
read, or clear their own faults, starts one for all of them. The fixture that yields it
is one line: ``yield from sandboxes.for_module(tmp_path_factory, "name", ...)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.sandbox import launcher
from reconciler.sandbox.launcher import Sandbox


def for_module(factory: pytest.TempPathFactory, name: str, **start: Any) -> Iterator[Sandbox]:
    """Start a sandbox in a fresh directory named after ``name``, yield it, and stop it
    even when a test failed (a sandbox left running holds its ports for the next module).
    ``start`` goes to ``launcher.start`` as it is (e.g. ``converge_delay_ms``)."""
    sandbox = launcher.start(factory.mktemp(name) / "sandbox", **start)
    try:
        yield sandbox
    finally:
        sandbox.stop()
