"""Shared helpers for the validation tests: a copy of the reference repo, and a runner.

``repo`` gives a fresh copy of ``examples/desired-state`` in ``tmp_path`` (valid as it
stands); tests break it one way at a time and run the real CLI on it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "desired-state"


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES, root)
    return root


@pytest.fixture
def validate(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    def run(*argv: str) -> Run:
        capsys.readouterr()
        code = cli.main(["validate", *argv])
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run
