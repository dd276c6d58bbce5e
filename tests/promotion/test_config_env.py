"""``reconcile config --env NAME`` names the journal that environment's apply and watch
use: ``RECONCILE_STATE_DIR`` holds one directory per environment, and the default is per
environment root -- two control planes' applies never share a journal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e_repo import EXAMPLES, PROJECT
from tests.repo_copy import committed_copy

PIPELINE_EXAMPLE = EXAMPLES.parent / "environments"


def config(repo: Path, env_name: str, **extra: str) -> dict[str, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")} | extra
    done = subprocess.run([sys.executable, "-m", "reconciler", "config", str(repo), "--env",
                           env_name, "--format", "json"], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout, done.stderr  # exit 1 only for the example's missing CA files
    values: dict[str, dict[str, object]] = json.loads(done.stdout)["values"]
    return values


@pytest.mark.integration  # starts a process of its own
def test_config_names_each_environments_own_journal(tmp_path: Path) -> None:
    repo = committed_copy(PIPELINE_EXAMPLE, tmp_path / "config", "two environments")
    state = tmp_path / "state"
    for name in ("staging", "prod"):
        values = config(repo, name, RECONCILE_STATE_DIR=str(state))
        assert values["journal"]["value"] == str(state / name / "journal.jsonl")
        assert f"its {name}/ directory" in str(values["journal"]["source"])
    by_default = {name: config(repo, name, XDG_STATE_HOME=str(tmp_path / "xdg"))["journal"]
                  for name in ("staging", "prod")}
    assert by_default["staging"]["value"] != by_default["prod"]["value"]
    assert "(prod)" in str(by_default["prod"]["source"])
