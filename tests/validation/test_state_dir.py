"""``stateDir`` inside the config repo is refused at validation time.

Scenario: ``stateDir: state`` in the Settings document was accepted; the first apply
wrote its journal into the repo, and every later plan was NO-GO (repo_dirty). Now the
Settings document is refused with the file, line and field, and
``gitrepo.state_dir_inside_repo`` answers the question on disk (links, absolute paths,
a ``..`` back into the git work tree) for the engine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.core.desired import state_dir_is_inside
from reconciler.shell import gitrepo
from reconciler.shell.validating import load_repo
from tests.e2e_repo import EXAMPLES, git

PROJECT = Path(__file__).resolve().parents[2]


def set_state_dir(root: Path, value: str) -> int:
    """Append ``stateDir`` to the Settings document; the 1-based line it is written on."""
    settings = root / "settings.yaml"
    text = settings.read_text()
    if not text.endswith("\n"):
        text += "\n"
    settings.write_text(text + f"stateDir: {value}\n")
    return text.count("\n") + 1


def cli_validate(root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
    return subprocess.run([sys.executable, "-m", "reconciler", "validate", str(root)],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("value", ["state", "./state", ".reconcile", "a/../state", "~/state",
                                   "."])
def test_a_relative_state_dir_inside_the_repo_is_refused_with_file_line_and_field(
        repo: Path, value: str) -> None:
    line = set_state_dir(repo, value)

    result = load_repo(repo)

    assert result.state is None
    [problem] = result.diagnostics
    assert (problem.path, problem.line, problem.field) == ("settings.yaml", line, "stateDir")
    assert "inside the config repo" in problem.message and "repo_dirty" in problem.message


@pytest.mark.parametrize("value", ["../state", "../../var/reconcile", "/var/lib/reconcile"])
def test_a_state_dir_outside_the_repo_is_accepted(repo: Path, value: str) -> None:
    set_state_dir(repo, value)
    assert load_repo(repo).valid


def test_an_absolute_state_dir_into_the_repo_is_refused(repo: Path) -> None:
    line = set_state_dir(repo, str(repo / "journal"))
    [problem] = load_repo(repo).diagnostics
    assert (problem.path, problem.line, problem.field) == ("settings.yaml", line, "stateDir")


def test_a_state_dir_climbing_back_into_the_git_work_tree_is_refused(tmp_path: Path,
                                                                      repo: Path) -> None:
    top = tmp_path / "ops"
    desired = top / "desired"
    top.mkdir()
    repo.rename(desired)
    git(top, "init", "-q")
    line = set_state_dir(desired, "../journal")  # outside desired/, inside the git repo

    [problem] = load_repo(desired).diagnostics
    assert (problem.line, problem.field) == (line, "stateDir")
    assert gitrepo.state_dir_inside_repo(desired, Path("../journal"))


def test_a_link_leading_back_into_the_repo_is_refused(tmp_path: Path, repo: Path) -> None:
    (tmp_path / "elsewhere").symlink_to(repo)
    set_state_dir(repo, "../elsewhere/journal")
    [problem] = load_repo(repo).diagnostics
    assert problem.field == "stateDir"


def test_the_helper_answers_for_any_path(tmp_path: Path, repo: Path) -> None:
    assert gitrepo.state_dir_inside_repo(repo, Path("state"))
    assert gitrepo.state_dir_inside_repo(repo, repo)
    assert not gitrepo.state_dir_inside_repo(repo, tmp_path / "outside")
    assert not gitrepo.state_dir_inside_repo(repo, Path("../outside"))


def test_the_lexical_rule() -> None:
    assert state_dir_is_inside("state") and state_dir_is_inside("x/..")
    assert not state_dir_is_inside("..") and not state_dir_is_inside("../x")
    assert not state_dir_is_inside("/abs")


@pytest.mark.integration  # starts a process of its own
def test_reconcile_validate_refuses_it_naming_file_line_and_field(repo: Path) -> None:
    line = set_state_dir(repo, "state")

    run = cli_validate(repo)

    assert run.returncode == 1, run.stdout + run.stderr
    assert f"settings.yaml:{line}:11: stateDir: 'state' is inside the config repo" in run.stdout


@pytest.mark.integration  # starts a process of its own
def test_reconcile_validate_accepts_a_state_dir_outside(repo: Path) -> None:
    set_state_dir(repo, "../reconcile-state")
    run = cli_validate(repo)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.integration  # starts a process of its own
def test_a_control_plane_url_with_credentials_is_refused_without_echoing_them(
        tmp_path: Path) -> None:
    # Scenario 20 at validation time: the pattern's message used to echo the URL.
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    settings = repo / "settings.yaml"
    settings.write_text(settings.read_text().replace("url: https://",
                                                     "url: https://admin:SECRETPW@"))
    proc = subprocess.run([sys.executable, "-m", "reconciler", "validate", str(repo)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "settings.yaml:7:" in proc.stdout + proc.stderr
    assert "must not carry credentials" in proc.stdout + proc.stderr
    assert "SECRETPW" not in proc.stdout + proc.stderr
