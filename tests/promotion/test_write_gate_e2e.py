"""The one gate before every write, against two sandboxes (staging → prod): ``promote``
asks the verdict of prod's plan of the rewritten pin before it writes -- a denying
policy or a hold on the digest refuses it with no file changed and no commit -- and
``revert`` / ``release-hold --env staging`` read and write staging's journal and files
only."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.core import holds
from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.promotion.pipeline_repo import NEW, OLD, PipelineRepo, make_pipeline_repo
from tests.promotion.test_holds_e2e import POLICY
from tests.promotion.test_soak_e2e import apply

pytestmark = pytest.mark.integration


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


def files(root: Path) -> dict[str, bytes]:
    """Every file of the work tree (not .git), by path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


@pytest.fixture
def soaked(tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> PipelineRepo:
    """Staging proves NEW for longer than prod's soak (1s); prod pins and runs OLD."""
    repo = make_pipeline_repo(tmp_path, sandbox_factory(name="staging"),
                              sandbox_factory(name="prod"), soak="1s")
    repo.pin("prod", OLD, "v2.3.0")
    apply(repo, "staging")
    time.sleep(1.1)
    return repo


def promote_refused(repo: PipelineRepo, *extra: str, **env: str) -> str:
    """``promote --commit`` refused by the gate: exit 10, nothing written or committed;
    its stderr."""
    before, head = files(repo.path), git(repo.path, "rev-parse", "HEAD")
    result = repo.run("promote", "checkout", "--to", "prod", "-C", str(repo.path),
                      "--commit", *extra, **env)
    assert result.code == Exit.REFUSED_NO_GO, result.out + result.err
    assert "promoted checkout" not in result.out and "committed" not in result.out
    assert "Traceback" not in result.err
    assert files(repo.path) == before
    assert git(repo.path, "rev-parse", "HEAD") == head
    assert git(repo.path, "status", "--porcelain") == ""
    return result.err


def test_promote_commit_refuses_a_change_a_policy_denies_writing_nothing(
        soaked: PipelineRepo) -> None:
    (soaked.path / "policies").mkdir()
    (soaked.path / "policies" / "registries.yaml").write_text(POLICY)
    soaked.commit("prod policy")
    said = promote_refused(soaked)
    assert "checkout: not promoted to prod" in said
    assert 'policy_denied: checkout: policy "registries" rule "internal-registry-only"' in said
    assert "eligible: when the rule allows it" in said
    # --override-window lifts windows and freezes, never a policy.
    said = promote_refused(soaked, "--override-window", "incident 4711")
    assert "policy_denied" in said


def test_promote_commit_refuses_a_held_digest_writing_nothing(soaked: PipelineRepo) -> None:
    hold = soaked.path / "environments" / "prod" / holds.file_name("checkout", NEW)
    hold.parent.mkdir()
    hold.write_text(holds.document("checkout", NEW, "refused by sn3 in prod", (),
                                   "2026-01-01T00:00:00Z"))
    soaked.commit("hold NEW in prod")
    said = promote_refused(soaked)
    assert f"held: checkout: the pinned release {NEW} is held" in said
    assert "eligible: when the hold is released" in said
    said = promote_refused(soaked, "--override-window", "incident 4711")
    assert "held:" in said
    # --pr asks the same gate before any branch or pull request.
    said = promote_refused(soaked, "--pr", "--repo", "acme/fleet", GITHUB_TOKEN="t")
    assert "held:" in said and "pull request" not in said


def test_promote_commit_then_its_plan_is_headed_by_the_commit_it_made(
        soaked: PipelineRepo) -> None:
    result = soaked.run("promote", "checkout", "--to", "prod", "-C", str(soaked.path),
                        "--commit")
    assert result.code == Exit.OK, result.out + result.err
    head = git(soaked.path, "rev-parse", "HEAD").strip()
    assert f"committed {head[:12]}" in result.out
    assert f"reconcile plan · commit {head[:12]}" in result.out, result.out
    assert "<no commit>" not in result.out


def test_revert_and_release_hold_with_env_staging_use_staging_only(
        tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> None:
    staging = sandbox_factory(name="staging")
    repo = make_pipeline_repo(tmp_path, staging, sandbox_factory(name="prod"), soak="1h")
    repo.pin("staging", OLD, "v2.3.0")
    apply(repo, "staging")  # staging's journal now proves OLD
    repo.state.joinpath("journal.jsonl").unlink(missing_ok=True)
    staging.fault("sn3", "refuse-digest", digest=NEW)
    repo.pin("staging", NEW, "v2.4.0")
    failed = repo.run("apply", str(repo.path), "--env", "staging", "--auto-approve",
                      timeout=240)
    assert failed.code == Exit.NOT_CONVERGED, failed.out + failed.err
    prod_before = {k: v for k, v in files(repo.path).items()
                   if k.startswith("environments/prod/")}
    state_before = sorted(str(p.relative_to(repo.state)) for p in repo.state.rglob("*"))
    assert "journal.jsonl" not in state_before  # only staging/ and prod/ hold journals

    # Staging is frozen for the incident: a rollback goes through a freeze.
    frozen = repo.run("freeze", str(repo.path), "--env", "staging", "--reason", "incident",
                      "--until", "2d")
    assert frozen.code == Exit.OK, frozen.err
    # A path inside the repo but no environment's: --env chooses; the journal is staging's.
    done = repo.run("revert", "checkout", "--env", "staging", "-C", str(repo.path))
    assert done.code == Exit.OK, done.out + done.err
    assert "refusing to guess" not in done.err
    assert f"pinned back to v2.3.0 ({OLD})" in done.out
    changed = git(repo.path, "show", "--name-only", "--format=", "HEAD").split()
    hold_rel = "environments/staging/" + holds.file_name("checkout", NEW)
    assert sorted(changed) == sorted(["environments/staging/services/checkout.yaml",
                                      hold_rel]), changed
    assert (repo.path / hold_rel).is_file()
    assert {k: v for k, v in files(repo.path).items()
            if k.startswith("environments/prod/")} == prod_before
    state_after = sorted(str(p.relative_to(repo.state)) for p in repo.state.rglob("*"))
    assert all(p.startswith(("staging", "prod")) for p in state_after), state_after

    # release-hold --env staging, with the digest as the error message and the hold file
    # name show it (a prefix): the file under environments/staging/holds/ is removed.
    short = NEW.removeprefix("sha256:")[:12]
    released = repo.run("release-hold", "checkout", short, "--env", "staging",
                        "-C", str(repo.path))
    assert released.code == Exit.OK, released.out + released.err
    assert "released in staging" in released.out
    assert not (repo.path / hold_rel).exists()
    assert git(repo.path, "show", "--name-only", "--format=", "HEAD").split() == [hold_rel]
    assert git(repo.path, "status", "--porcelain") == ""
    assert {k: v for k, v in files(repo.path).items()
            if k.startswith("environments/prod/")} == prod_before


def test_status_shows_a_policy_refusing_the_digest_prod_already_pins(
        tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> None:
    """Prod pins NEW (a merged pull request) while it runs OLD, and a policy denies NEW:
    status says the pin is refused and by which rule, as prod's plan does."""
    repo = make_pipeline_repo(tmp_path, sandbox_factory(name="staging"),
                              sandbox_factory(name="prod"), soak="1s")
    apply(repo, "staging")
    (repo.path / "policies").mkdir()
    (repo.path / "policies" / "registries.yaml").write_text(POLICY)
    repo.commit("prod policy")
    result = repo.run("status", str(repo.path), "--format", "json")
    assert result.code == Exit.OK, result.out + result.err
    staging, prod = json.loads(result.out)["services"]
    assert prod["pinned"] == NEW and staging["refused"] == []
    [refused] = prod["refused"]
    assert refused.startswith('policy_denied: checkout: policy "registries" rule '
                              '"internal-registry-only"'), refused
    text = repo.run("status", str(repo.path), "--env", "prod")
    assert "REFUSED" in text.out and "pinned but refused" in text.out, text.out
