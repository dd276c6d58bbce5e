"""The suite's scheduling hint names modules that exist (a renamed one would silently go
back to running last)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_collected_first_exists() -> None:
    assert [m for m in LONG_FIRST if not (ROOT / m).is_file()] == []
    assert len(set(LONG_FIRST)) == len(LONG_FIRST)
