"""Repo discovery: from any directory below the desired state, every command finds it
(``reconciler.shell.discovery``); ``validate FILE``; one wording for a missing path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler import cli
from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell import discovery
from tests.e2e_repo import EXAMPLES, Repo, git, make_repo

#: Three depths below the desired-state root: the root itself, one and two levels down.
DEPTHS = ("", "services", "services/deep")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A committed copy of the reference desired state, with an empty deeper directory."""
    root = tmp_path / "work" / "config"
    shutil.copytree(EXAMPLES, root)
    (root / "services" / "deep").mkdir()
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "desired state")
    return root


@pytest.mark.parametrize("below", DEPTHS)
def test_find_root_from_three_depths(config: Path, below: str) -> None:
    found = discovery.find_root(config / below)
    assert found.root.resolve() == config.resolve()
    assert found.repo is not None and found.repo.resolve() == config.resolve()
    assert found.moved == bool(below)


def test_relative_start_gives_a_relative_root(config: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(config / "services" / "deep")
    found = discovery.find_root(Path("."))
    assert found.root == Path("../..") and found.moved


def test_the_walk_stops_at_the_git_work_tree(tmp_path: Path) -> None:
    """A Settings file above the git work tree belongs to something else."""
    shutil.copy(EXAMPLES / "settings.yaml", tmp_path / "settings.yaml")
    inner = tmp_path / "other-repo" / "sub"
    inner.mkdir(parents=True)
    git(tmp_path / "other-repo", "init", "-q")
    found = discovery.find_root(inner)
    assert found.root == inner and not found.moved
    assert found.repo == tmp_path / "other-repo"


def test_outside_git_the_walk_goes_up(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "state")
    start = tmp_path / "state" / "grants"
    found = discovery.find_root(start)
    assert found.root == tmp_path / "state" and found.moved and found.repo is None


def test_a_settings_file_is_recognised_by_its_top_level_kind(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("kind: Service\nnested:\n  kind: Settings\n")
    assert not discovery.holds_settings(tmp_path)
    (tmp_path / ".hidden.yaml").write_text("kind: Settings\n")
    assert not discovery.holds_settings(tmp_path)
    (tmp_path / "b.yml").write_text("---\napiVersion: reconcile/v1\nkind: 'Settings'  # x\n")
    assert discovery.holds_settings(tmp_path)


@pytest.mark.parametrize("below", DEPTHS)
def test_validate_from_three_depths(config: Path, below: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(config / below)
    assert cli.main(["validate"]) == Exit.OK
    captured = capsys.readouterr()
    assert captured.out.strip() == "valid: 5 services, 2 grants, 2 routes, 1 settings in 8 files"
    assert ("using the desired state in" in captured.err) == bool(below)


# --- validate FILE ---------------------------------------------------------------------

def test_validate_a_file_within_its_repo_checks_the_rules_between_files(
        config: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    grant = config / "grants" / "deploy-bot.yaml"
    grant.write_text(grant.read_text().replace("service: search", "service: serch", 1))
    checkout = config / "services" / "checkout.yaml"
    checkout.write_text(checkout.read_text() + "\n---\nkind: Nope\n")  # another file's
    monkeypatch.chdir(config / "grants")
    assert cli.main(["validate", "deploy-bot.yaml"]) == Exit.OK  # checkout.yaml is not asked
    assert "checkout.yaml" not in capsys.readouterr().out
    checkout.write_text((EXAMPLES / "services" / "checkout.yaml").read_text())
    assert cli.main(["validate", "deploy-bot.yaml"]) == Exit.ERROR
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines and all(line.startswith("deploy-bot.yaml:") for line in lines)
    assert "serch" in captured.out  # a rule between files: no service of that name
    assert "checked within the desired state in .." in captured.err


def test_validate_a_service_file_alone(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    lone = tmp_path / "checkout.yaml"
    shutil.copy(EXAMPLES / "services" / "checkout.yaml", lone)
    assert cli.main(["validate", str(lone)]) == Exit.OK
    out = capsys.readouterr().out
    assert "valid:" in out and "1 service" in out and "checked alone" in out
    assert cli.main(["validate", "--format", "json", str(lone)]) == Exit.OK
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and report["scope"] == "file-alone"
    assert report["counts"]["services"] == 1


def test_validate_a_broken_file_alone_names_it_as_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.yaml").write_text(
        "apiVersion: reconcile/v1\nkind: Service\nname: a\n---\n"
        "apiVersion: reconcile/v1\nkind: Service\nname: a\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate", "sub/x.yaml"]) == Exit.ERROR
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines and all(line.startswith("sub/x.yaml:") for line in lines)
    assert any(line.startswith("sub/x.yaml:5:") for line in lines)  # the second document
    assert "required key" in captured.out  # the model's problems, each named
    assert "no Settings" not in captured.out  # not judged: the rest of the repo is not here
    assert "in sub/x.yaml (checked alone" in captured.err


# --- missing paths: one wording -----------------------------------------------------------

@pytest.mark.parametrize("argv", [["validate"], ["plan"], ["apply", "--auto-approve"],
                                  ["show"]])
def test_a_missing_path_is_worded_the_same_everywhere(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert cli.main([*argv, str(missing)]) == Exit.ERROR
    captured = capsys.readouterr()
    assert f"{missing}: does not exist" in captured.out + captured.err
    assert "Traceback" not in captured.err


def test_plan_of_a_file_says_it_wants_the_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(EXAMPLES / "settings.yaml")]) == Exit.ERROR
    assert "settings.yaml: is not a directory" in capsys.readouterr().err


# --- plan, live, from a subdirectory ---------------------------------------------------------

def run_in(repo: Repo, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=cwd,
                          env=repo.env(), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.integration  # starts a process of its own
def test_plan_from_three_depths(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path, sandbox)
    (repo.path / "services" / "deep").mkdir()
    plans = []
    for below in DEPTHS:
        done = run_in(repo, repo.path / below, "plan", "--format", "json")
        assert done.returncode == Exit.OK, done.stderr
        plan = json.loads(done.stdout)
        assert Path(plan["repo_path"]) == repo.path.resolve()
        plans.append(sorted(c["service"] for c in plan["changes"]))
    assert plans[0] and plans[0] == plans[1] == plans[2]


# --- outside any desired state -----------------------------------------------------------

def checkouts(tmp_path: Path) -> Path:
    """A directory holding other checkouts: a desired-state repo, a Kubernetes-like repo
    with many YAML files, and loose YAML; no Settings document of its own."""
    top = tmp_path / "src"
    shutil.copytree(EXAMPLES, top / "deploy-config")
    git(top / "deploy-config", "init", "-q")
    manifests = top / "k8s-manifests"
    for i in range(300):
        folder = manifests / f"app{i % 30}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"m{i}.yaml").write_text(
            f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a{i}\n")
    git(manifests, "init", "-q")
    (top / "notes.yaml").write_text("todo: [x, y]\n")
    (top / "scratch").mkdir()
    (top / "scratch" / "ci.yml").write_text("on: push\n")
    return top


COMMANDS = [["validate"], ["plan"], ["apply", "--auto-approve"], ["watch"],
            ["config"], ["history"], ["pin", "--check"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
def test_outside_any_desired_state_every_command_says_so_and_stops(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    top = checkouts(tmp_path)
    for name in [k for k in os.environ if k.startswith("RECONCILE_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(top)
    code = cli.main(argv)
    captured = capsys.readouterr()
    if code == Exit.USAGE:  # a command without that flag: no PATH check to reach
        pytest.fail(captured.err)
    assert code == Exit.ERROR, captured.err
    err = captured.err
    assert "no desired state here" in err and "no Settings document in ." in err
    assert "deploy-config" in err  # the checkout to give instead
    assert f"reconcile {argv[0]} deploy-config" in err
    assert "m1.yaml" not in captured.out + err and "Traceback" not in err
    assert len((captured.out + err).splitlines()) <= 3


def test_a_plain_directory_of_yaml_is_no_desired_state(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "values.yaml").write_text("replicas: 3\n")
    assert cli.main(["validate", str(tmp_path)]) == Exit.ERROR
    err = capsys.readouterr().err
    assert "no desired state here" in err and "filesystem root" in err
    assert "values.yaml" not in err
    assert cli.main(["validate", "--format", "github", str(tmp_path)]) == Exit.ERROR
    assert capsys.readouterr().out.startswith("::error title=reconcile validate::")


def test_a_repo_whose_settings_live_in_a_subdirectory_still_works_from_its_top(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "repo" / "desired")
    git(tmp_path / "repo", "init", "-q")
    assert cli.main(["validate", str(tmp_path / "repo")]) == Exit.OK, capsys.readouterr()
    assert "valid: 5 services" in capsys.readouterr().out


def test_a_repo_that_lost_its_settings_is_still_validated_and_told_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "repo")
    (tmp_path / "repo" / "settings.yaml").unlink()
    git(tmp_path / "repo", "init", "-q")  # a repository: what is below it is read
    assert cli.main(["validate", str(tmp_path / "repo")]) == Exit.ERROR
    captured = capsys.readouterr()
    assert "no Settings document" in captured.out and "no desired state here" not in \
        captured.err


def test_another_checkout_below_is_not_searched(tmp_path: Path) -> None:
    top = checkouts(tmp_path)
    found = discovery.find_root(top)
    message = discovery.absent(found, command="plan")
    assert message is not None and str(top / "deploy-config") in message
    # Inside the checkout itself it is a desired state, from any depth.
    inner = discovery.find_root(top / "deploy-config" / "services")
    assert discovery.absent(inner, command="plan") is None


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
def test_outside_git_nothing_below_is_read_and_there_is_no_repository(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """No repository, no scan: a directory in no git repository, with unrelated YAML and
    a stray desired-state document deep below it (a copied example, a download), is no
    desired-state repository. Every command that reads desired state says so and exits
    non-zero; none of the YAML below is read or reported."""
    top = tmp_path / "downloads"
    (top / "compose").mkdir(parents=True)
    (top / "compose" / "docker-compose.yaml").write_text("services:\n  web: {image: nginx}\n")
    (top / "old" / "example").mkdir(parents=True)
    (top / "old" / "example" / "checkout.yaml").write_text(
        "apiVersion: reconcile/v1\nkind: Service\nmetadata: {name: checkout}\nspec: [\n")
    for name in [k for k in os.environ if k.startswith("RECONCILE_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(top)
    code = cli.main(argv)
    captured = capsys.readouterr()
    if code == Exit.USAGE:
        pytest.fail(captured.err)
    assert code == Exit.ERROR, captured.out + captured.err
    shown = captured.out + captured.err
    assert "no desired-state repository here" in shown and "in no git repository" in shown
    assert "checkout.yaml" not in shown and "docker-compose" not in shown
    assert "Traceback" not in shown and len(shown.splitlines()) <= 3
