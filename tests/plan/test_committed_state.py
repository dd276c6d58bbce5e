"""The desired state is the commit: files in no commit are never planned or applied.

Scenario: a file matched by ``.gitignore`` (``grants/mine.local.yaml``) declared a grant;
``git status`` stayed clean, so the plan said "from commit X, clean" while it carried a
grant no commit holds. ``committed.load`` reads the commit's tree instead, lists such
files as untracked, and reports a tracked file edited on disk as dirty while loading
the committed content. Real git, real files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from reconciler.sandbox.launcher import Sandbox
from reconciler.shell import committed, validating
from tests.e2e_repo import EXAMPLES, git, make_repo

EXTRA_GRANT = """\
apiVersion: reconcile/v1
kind: Grant
userId: intruder
services:
  - service: checkout
    capabilities: [deployment:promote-route]
"""


def head(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def commit_all(root: Path, message: str = "desired state") -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    root = tmp_path / "config"
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q")
    commit_all(root)
    return root


def users(load: committed.CommittedLoad) -> set[str]:
    assert load.result.state is not None, load.result.diagnostics
    return {g.user_id for g in load.result.state.grants}


def test_an_ignored_yaml_file_is_not_desired_state_and_is_listed(config: Path) -> None:
    (config / ".gitignore").write_text("*.local.yaml\n")
    commit_all(config, "ignore local files")
    (config / "grants" / "mine.local.yaml").write_text(EXTRA_GRANT)

    load = committed.load(config)

    assert users(load) == {"deploy-bot", "release-train"}
    assert load.untracked == ("grants/mine.local.yaml",)
    assert load.provenance.commit == head(config)
    assert load.provenance.dirty is False
    assert load.in_git is True
    assert "grants/mine.local.yaml" not in load.result.files
    # The working-tree loader (validate) still sees it: that is its purpose.
    assert "intruder" in {g.user_id for g in validating.load_repo(config).state.grants}  # type: ignore[union-attr]


def test_an_untracked_yaml_file_is_not_desired_state_and_is_listed(config: Path) -> None:
    (config / "grants" / "mine.yaml").write_text(EXTRA_GRANT)

    load = committed.load(config)

    assert users(load) == {"deploy-bot", "release-train"}
    assert load.untracked == ("grants/mine.yaml",)
    assert load.provenance.commit == head(config)
    assert load.provenance.dirty is False  # nothing committed differs; the file is listed


def test_a_staged_but_uncommitted_file_is_dirty_and_not_loaded(config: Path) -> None:
    (config / "grants" / "mine.yaml").write_text(EXTRA_GRANT)
    git(config, "add", "grants/mine.yaml")

    load = committed.load(config)

    assert users(load) == {"deploy-bot", "release-train"}
    assert load.provenance.dirty is True
    assert load.untracked == ("grants/mine.yaml",)


def test_a_modified_tracked_file_is_dirty_and_the_committed_content_is_loaded(
        config: Path) -> None:
    search = config / "services" / "search.yaml"
    search.write_text(search.read_text().replace("egress: []", ""))

    load = committed.load(config)

    assert load.provenance.dirty is True
    assert load.provenance.commit == head(config)
    assert load.result.state is not None
    assert load.result.state.service_by_name("search").egress == ()  # as committed
    assert load.untracked == ()


def test_diagnostics_from_the_commit_name_the_file_and_line(config: Path) -> None:
    checkout = config / "services" / "checkout.yaml"
    lines = checkout.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if line.startswith("appId:"))
    lines[index] = "appId: Not_An_Id\n"
    checkout.write_text("".join(lines))
    commit_all(config, "break it")
    checkout.write_text(checkout.read_text().replace("Not_An_Id", "checkout"))  # fixed on disk

    load = committed.load(config)
    from_disk = validating.load_repo(config)

    assert load.result.state is None and from_disk.state is not None
    [problem] = load.result.diagnostics
    assert (problem.path, problem.line, problem.field) == (
        "services/checkout.yaml", index + 1, "appId")


def test_the_same_diagnostics_as_the_disk_loader_for_a_committed_broken_file(
        config: Path) -> None:
    (config / "services" / "bad.yaml").write_text(
        "apiVersion: reconcile/v1\nkind: Service\nname: x\nname: y\n")
    commit_all(config, "duplicate key")

    assert committed.load(config).result.diagnostics == validating.load_repo(config).diagnostics


def test_a_subdirectory_of_a_repo_reads_its_own_part_of_the_commit(tmp_path: Path) -> None:
    top = tmp_path / "ops"
    shutil.copytree(EXAMPLES, top / "desired")
    (top / "other.yaml").write_text("not: desired state\n")
    git(top, "init", "-q")
    commit_all(top)

    load = committed.load(top / "desired")

    assert load.result.valid, load.result.diagnostics
    assert "settings.yaml" in load.result.files
    assert load.provenance.commit == head(top)


def test_a_directory_outside_git_is_read_from_disk_with_no_commit(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    shutil.copytree(EXAMPLES, root)

    load = committed.load(root)

    assert load.in_git is False
    assert load.provenance.commit is None and load.provenance.dirty is False
    assert load.result.valid


def test_a_repo_with_no_commit_yet_has_no_desired_state(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q")

    load = committed.load(root)

    assert load.in_git is True and load.provenance.commit is None
    assert load.result.state is None
    assert "no commit yet" in load.result.diagnostics[0].message


def test_a_committed_symlink_is_refused_like_on_disk(config: Path) -> None:
    (config / "services" / "link.yaml").symlink_to("checkout.yaml")
    commit_all(config, "a link")

    load = committed.load(config)

    assert load.result.state is None
    assert [(d.path, d.line) for d in load.result.diagnostics] == [("services/link.yaml", 1)]


def test_two_hundred_files_load_fast_and_the_blob_cache_skips_unchanged_ones(
        config: Path) -> None:
    services = config / "services"
    template = (services / "catalog.yaml").read_text()
    before = len(committed.load(config).result.files)  # the reference repo's own files
    for n in range(196):
        (services / f"gen-{n:03}.yaml").write_text(
            template.replace("catalog", f"gen-{n:03}"))
    commit_all(config, "many services")

    started = time.perf_counter()
    load = committed.load(config)
    cold = time.perf_counter() - started
    assert load.result.valid, load.result.diagnostics[:3]
    assert len(load.result.files) == before + 196

    cache = validating.BlobCache()
    committed.load(config, cache=cache)
    started = time.perf_counter()
    again = committed.load(config, cache=cache)
    warm = time.perf_counter() - started
    assert again.result.valid and cache.hits == before + 196
    print(f"{before + 196} files: cold {cold * 1000:.0f} ms, "
          f"warm (blob cache) {warm * 1000:.0f} ms")
    assert cold < 5.0 and warm < 2.0  # generous: CI machines vary


@pytest.mark.integration
def test_plan_leaves_an_ignored_grant_out(tmp_path: Path, sandbox: Sandbox) -> None:
    """Depends on the engine loading through ``committed.load`` (the wiring)."""
    repo = make_repo(tmp_path, sandbox)
    (repo.path / ".gitignore").write_text("*.local.yaml\n")
    repo.commit("ignore local files")
    (repo.path / "grants" / "mine.local.yaml").write_text(EXTRA_GRANT)

    run = repo.run("plan", str(repo.path), "--format", "json")

    assert run.code == 0, run.out + run.err
    data = json.loads(run.out)
    assert data["commit"] == head(repo.path)
    assert not [c for c in data["changes"] if c.get("user_id") == "intruder"]
    assert not [b for b in data["blockers"] if b["code"] == "repo_dirty"]
