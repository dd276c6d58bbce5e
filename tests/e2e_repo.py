"""A config repo (git, committed) pointing at a live sandbox, and a CLI runner for it.

Shared by the plan and apply end-to-end tests; their conftest files re-export the fixtures.
The runner runs the CLI in this process (``tests.inprocess``) unless the test is about the
process: ``watch`` and ``sandbox`` (long-lived, signalled) always run as one, and a test
asks for one with ``process=True``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.sandbox.launcher import Sandbox
from tests import inprocess

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "desired-state"
PROJECT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    code: int
    out: str
    err: str


class Cli:
    """The CLI run against a committed config repo (``path``) with the repo's variables
    (``env``): shared by the one-sandbox ``Repo`` and the two-environment repos."""

    path: Path

    def env(self, **extra: str) -> dict[str, str]:
        raise NotImplementedError

    def run(self, *args: str, timeout: float = 120, cwd: Path | None = None,
            process: bool = False, **extra: str) -> Result:
        """``cwd``: where it runs (default: this project, outside the config repo; a saved
        plan is applied to the checkout it runs in, so its tests run it in one).
        ``timeout`` bounds a process; in this process pytest's own timeout does."""
        if not process and not inprocess.needs_process(args, extra):
            code, out, err = inprocess.run_cli(args, cwd=cwd or PROJECT, env=self.env(**extra))
            return Result(code, out, err)
        proc = subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=cwd or PROJECT,
                              env=self.env(**extra), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def commit(self, message: str = "change") -> None:
        git(self.path, "add", "-A")
        git(self.path, "commit", "-qm", message)


@dataclass
class Repo(Cli):
    path: Path
    sandbox: Sandbox
    state: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
        env.update(self.sandbox.env())
        env["RECONCILE_STATE_DIR"] = str(self.state)
        env["NO_COLOR"] = "1"
        env.update(extra)
        return env



def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.email=ci@example.net",
                    "-c", "user.name=ci", *args], check=True, capture_output=True)


def make_repo(tmp: Path, sandbox: Sandbox, *, mesh_timeout: float | None = None,
              **policy: object) -> Repo:
    path = tmp / "config"
    shutil.copytree(EXAMPLES, path)
    policy = {"interval_seconds": 0.2, "attempts": 40, **policy}
    settings = json.loads(sandbox.settings_yaml(**policy))
    if mesh_timeout is not None:
        settings["mesh"]["timeoutSeconds"] = mesh_timeout
    (path / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")
    git(path, "init", "-q")
    repo = Repo(path, sandbox, tmp / "apply-state")
    repo.commit("desired state")
    return repo


@pytest.fixture
def repo(tmp_path: Path, sandbox: Sandbox) -> Repo:
    return make_repo(tmp_path, sandbox)


@pytest.fixture
def repo_factory(tmp_path: Path) -> Callable[..., Repo]:
    def make(sandbox: Sandbox, **options: object) -> Repo:
        return make_repo(tmp_path, sandbox, **options)  # type: ignore[arg-type]
    return make
