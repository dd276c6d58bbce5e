"""The code stays ruff-clean and mypy --strict clean: checked in the suite, not on trust."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.integration  # starts a process of its own
def test_ruff_is_clean() -> None:
    result = subprocess.run([str(BIN / "ruff"), "check", "reconciler", "tests", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-4000:]


@pytest.mark.integration  # starts a process of its own
def test_mypy_strict_is_clean() -> None:
    result = subprocess.run([str(BIN / "mypy"), "reconciler"], cwd=ROOT, capture_output=True,
                            text=True, check=False, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:]
