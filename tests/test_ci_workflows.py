"""The ``examples/ci`` workflows, run step by step as a runner would (``tests/ci_runner``),
with only the secrets and variables their header documents, against the real sandbox and
the GitHub stand-in: a pull request ends with a living comment and an uploaded plan; its
merge ends with that plan applied and the desired state converged.

The desired-state repo's Settings name a control plane, gateway and CA that do not work
(``*.invalid``, no CA file): only what the workflows write from the documented secrets
and variables can make the runs succeed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reconciler.sandbox.launcher import Sandbox
from tests.ci_runner import Runner, load
from tests.comment.github_standin import StandIn
from tests.e2e_repo import EXAMPLES, git

ROOT = Path(__file__).resolve().parents[1]
PR_WORKFLOW = ROOT / "examples" / "ci" / "github-pr-plan.yml"
APPLY_WORKFLOW = ROOT / "examples" / "ci" / "github-apply-on-merge.yml"
TOKEN = "ghs_Workfl0wT0kenValue0123456789abcdefXYZ"
PR = 7
SERVER = "https://github.example"


@pytest.fixture
def github() -> Iterator[StandIn]:
    server = StandIn().start()
    server.add_user(TOKEN, "github-actions[bot]", bot=True, installation=True)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Fleet:
    """The repository on a runner's disk, and the secrets/variables its docs name."""

    work: Path
    sandbox: Sandbox
    github: StandIn
    artifacts: dict[tuple[str, str], dict[str, bytes]]

    def sh(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.work), "-c", "user.email=ci@example.net",
                               "-c", "user.name=ci", *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    def secrets(self) -> dict[str, str]:
        return {"RECONCILE_TOKEN": self.sandbox.token,
                "RECONCILE_SIGNER_KEY_PEM": self.sandbox.signer_key_file.read_text().strip(),
                "RECONCILE_CA_PEM": self.sandbox.ca_file.read_text().strip()}

    def vars(self) -> dict[str, str]:
        return {"RECONCILE_CONTROL_PLANE_URL": self.sandbox.control_plane_url,
                "RECONCILE_GATEWAY": self.sandbox.gateway}

    def runner(self, tmp: Path, name: str, **github: Any) -> Runner:
        bindir = tmp / name / "bin"
        bindir.mkdir(parents=True)
        wrapper = bindir / "reconcile"
        wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m reconciler "
                           '"$@"\n')
        wrapper.chmod(0o755)
        event = tmp / name / "event.json"
        event.write_text(json.dumps(github.get("event", {})))
        # ``github.token`` is what GitHub hands every job: here the stand-in's token.
        context = {"server_url": SERVER, "api_url": self.github.api_url,
                   "repository": "acme/fleet", "token": TOKEN, "event_path": str(event),
                   "run_attempt": "1", **github}
        return Runner(workspace=self.work, temp=tmp / name / "temp", bindir=bindir,
                      github=context, secrets=self.secrets(), vars=self.vars(),
                      artifacts=self.artifacts)


@pytest.fixture
def fleet(tmp_path: Path, sandbox: Sandbox, github: StandIn) -> Fleet:
    work = tmp_path / "runner" / "work" / "fleet"
    shutil.copytree(EXAMPLES, work / "desired-state")
    settings = json.loads(sandbox.settings_yaml(interval_seconds=0.2, attempts=40))
    settings["controlPlane"]["url"] = "https://control-plane.invalid"
    settings["mesh"]["gateway"] = "gateway.invalid"
    del settings["controlPlane"]["caFile"], settings["mesh"]["caFile"]
    (work / "desired-state" / "settings.yaml").write_text(json.dumps(settings, indent=2))
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "desired state")
    github.state.pulls.add(PR)
    return Fleet(work, sandbox, github, {})


def _open_pr(fleet: Fleet) -> tuple[str, str, str]:
    """A PR adding an egress destination; returns (base, head, merge preview) commits."""
    base = fleet.sh("rev-parse", "HEAD")
    fleet.sh("checkout", "-q", "-b", "feature")
    _add_egress(fleet.work / "desired-state" / "services" / "search.yaml")
    fleet.sh("commit", "-qam", "search: reach the mail API")
    head = fleet.sh("rev-parse", "HEAD")
    fleet.sh("checkout", "-q", "--detach", base)
    fleet.sh("merge", "-q", "--no-ff", "-m", f"Merge {head} into {base}", head)
    return base, head, fleet.sh("rev-parse", "HEAD")


def _add_egress(path: Path) -> None:
    lines = path.read_text().splitlines()
    if any(line.startswith("egress:") for line in lines):
        at = next(i for i, line in enumerate(lines) if line.startswith("egress:"))
        if lines[at].strip() == "egress: []":
            lines[at] = "egress:"
        lines.insert(at + 1, "  - host: api.sendgrid.com")
    else:
        lines += ["egress:", "  - host: api.sendgrid.com"]
    path.write_text("\n".join(lines) + "\n")


def _plan_on_pr(fleet: Fleet, tmp: Path, base: str, head: str, preview: str) -> Runner:
    runner = fleet.runner(tmp, "pr", sha=preview, run_id="101", event_name="pull_request",
                          ref=f"refs/pull/{PR}/merge",
                          event={"pull_request": {"number": PR, "base": {"sha": base},
                                                  "head": {"sha": head}}})
    runner.github["event"] = {"pull_request": {"number": PR, "base": {"sha": base},
                                               "head": {"sha": head}}}
    steps = runner.run_job(load(PR_WORKFLOW), "plan")
    assert not runner.failed, "\n".join(runner.log)
    assert steps["reconcile"]["outputs"]["verdict"] == "go", "\n".join(runner.log)
    fleet.github.state.runs.append({
        "id": 101, "path": ".github/workflows/reconcile-plan.yml", "event": "pull_request",
        "head_sha": head, "status": "completed", "conclusion": "success"})
    return runner


def _merge(fleet: Fleet, head: str, *, preview: str | None) -> str:
    fleet.sh("checkout", "-q", "main")
    if preview is not None:  # main becomes exactly the reviewed commit
        fleet.sh("merge", "-q", "--ff-only", preview)
    else:
        fleet.sh("merge", "-q", "--no-ff", "-m", f"Merge pull request #{PR} from feature", head)
    merged = fleet.sh("rev-parse", "HEAD")
    fleet.github.state.pull_info[PR] = {
        "head": {"sha": head}, "merge_commit_sha": merged, "merged_at": "2026-12-01T23:00:00Z",
        "state": "closed"}
    return merged


def _apply_on_merge(fleet: Fleet, tmp: Path, merged: str) -> Runner:
    runner = fleet.runner(tmp, "apply", sha=merged, run_id="102", event_name="push",
                          ref="refs/heads/main", event={"after": merged})
    runner.run_job(load(APPLY_WORKFLOW), "apply")
    return runner


@pytest.mark.integration  # starts a process of its own
def test_a_pull_request_ends_with_a_comment_and_an_uploaded_plan(
        fleet: Fleet, tmp_path: Path) -> None:
    base, head, preview = _open_pr(fleet)
    runner = _plan_on_pr(fleet, tmp_path, base, head, preview)
    [comment] = fleet.github.comments_on(PR)
    body = str(comment["body"])
    assert body.startswith("<!-- reconcile:plan path=production part=1/1 -->\n"
                           f"<!-- reconcile:result outcome=plan commit={preview} -->\n")
    assert "## reconcile plan: **GO**" in body and "`search`" in body
    assert "[workflow run 101](https://github.example/acme/fleet/actions/runs/101)" in body
    assert "`gh run download 101 -n reconcile-plan-production`" in body
    assert str(runner.temp) not in body  # no path on the runner
    saved = runner.artifacts[("101", "reconcile-plan-production")]
    assert json.loads(saved["plan.json"])["commit"] == preview
    assert "## reconcile plan" in runner.summary.read_text()


@pytest.mark.integration  # starts a process of its own
def test_the_merge_applies_the_reviewed_plan_and_converges(fleet: Fleet, tmp_path: Path) -> None:
    """main moves to exactly the reviewed commit: the steps find, download and apply it."""
    base, head, preview = _open_pr(fleet)
    _plan_on_pr(fleet, tmp_path, base, head, preview)
    merged = _merge(fleet, head, preview=preview)
    runner = _apply_on_merge(fleet, tmp_path, merged)
    assert not runner.failed, "\n".join(runner.log)
    assert any(f"applied the plan reviewed on #{PR}" in line for line in runner.log)
    _assert_converged(fleet, runner)


@pytest.mark.integration  # starts a process of its own
def test_a_real_merge_commit_applies_the_plan_reviewed_on_the_preview(
        fleet: Fleet, tmp_path: Path) -> None:
    base, head, preview = _open_pr(fleet)
    _plan_on_pr(fleet, tmp_path, base, head, preview)
    merged = _merge(fleet, head, preview=None)
    assert merged != preview
    runner = _apply_on_merge(fleet, tmp_path, merged)
    assert not runner.failed, "\n".join(runner.log)
    _assert_converged(fleet, runner)


def _merge_that_changed_what_was_reviewed(fleet: Fleet, tmp: Path) -> tuple[str, Runner]:
    base, head, preview = _open_pr(fleet)
    _plan_on_pr(fleet, tmp, base, head, preview)
    # Another PR lands on main first, touching a service file.
    fleet.sh("checkout", "-q", "main")
    service = fleet.work / "desired-state" / "services" / "checkout.yaml"
    service.write_text(service.read_text() + "# reviewed elsewhere\n")
    fleet.sh("commit", "-qam", "checkout: a comment")
    merged = _merge(fleet, head, preview=None)
    return merged, _apply_on_merge(fleet, tmp, merged)


def test_a_merge_that_changes_the_desired_state_is_posted_for_approval(
        fleet: Fleet, tmp_path: Path) -> None:
    merged, runner = _merge_that_changed_what_was_reviewed(fleet, tmp_path)
    assert runner.failed  # red: nothing was applied
    text = "\n".join(runner.log)
    assert "services/checkout.yaml" in text  # apply's exit 18 names the file
    assert "needs approval: the merge changed what was reviewed" in text
    assert "## reconcile plan" in runner.summary.read_text()
    # The merged commit's plan, saved in this run for its approval.
    saved = runner.artifacts[("102", "reconcile-plan-production")]
    assert json.loads(saved["plan.json"])["commit"] == merged
    # The merged PR's living comment now shows that plan, marked, with the one action.
    [comment] = fleet.github.comments_on(PR)
    body = str(comment["body"])
    assert body.startswith("<!-- reconcile:plan path=production part=1/1 -->\n"
                           f"<!-- reconcile:result outcome=plan commit={merged} -->\n"), body
    assert "## ⚠️ needs approval: the merge changed what was reviewed · reconcile plan: " \
        "**GO**" in body, body
    approve = (f"gh workflow run reconcile-apply.yml --ref main -f commit={merged} "
               "-f plan-run=102")
    assert f"`{approve}`" in body, body
    assert "the apply-on-merge workflow applies exactly this plan" not in body
    _assert_not_applied(fleet, runner)


def test_the_approval_applies_exactly_the_plan_posted_and_converges(
        fleet: Fleet, tmp_path: Path) -> None:
    merged, _ = _merge_that_changed_what_was_reviewed(fleet, tmp_path)
    body = str(fleet.github.comments_on(PR)[0]["body"])
    printed = body.split("approve it with `")[1].split("`")[0]
    # As printed: gh workflow run WORKFLOW --ref BRANCH -f commit=SHA -f plan-run=ID
    argv = printed.split()
    assert argv[:4] == ["gh", "workflow", "run", "reconcile-apply.yml"], printed
    inputs = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-f")
    assert inputs == {"commit": merged, "plan-run": "102"}
    runner = fleet.runner(tmp_path, "approve", sha=fleet.sh("rev-parse", "main"),
                          run_id="103", event_name="workflow_dispatch", ref="refs/heads/main",
                          event={"inputs": inputs})
    runner.inputs = inputs
    runner.run_job(load(APPLY_WORKFLOW), "apply")
    assert not runner.failed, "\n".join(runner.log)
    assert any(f"applied the plan approved for {merged}" in line for line in runner.log)
    _assert_converged(fleet, runner)


def test_an_approval_of_a_plan_that_is_not_the_commits_is_refused(
        fleet: Fleet, tmp_path: Path) -> None:
    merged, _ = _merge_that_changed_what_was_reviewed(fleet, tmp_path)
    # The plan run 101 saved is the PR's (the reviewed tree), not the merged commit's.
    runner = fleet.runner(tmp_path, "approve", sha=merged, run_id="104",
                          event_name="workflow_dispatch", ref="refs/heads/main")
    runner.inputs = {"commit": merged, "plan-run": "101"}
    runner.run_job(load(APPLY_WORKFLOW), "apply")
    assert runner.failed
    assert "needs approval: the merge changed what was reviewed" in "\n".join(runner.log)
    _assert_not_applied(fleet, runner)


def _assert_not_applied(fleet: Fleet, runner: Runner) -> None:
    done = subprocess.run([sys.executable, "-m", "reconciler", "plan", "--detailed-exitcode",
                           str(fleet.work / "desired-state")], cwd=ROOT,
                          env=runner.process_env(fleet_env(fleet)), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "api.sendgrid.com" in done.stdout


@pytest.mark.integration  # starts a process of its own
def test_a_push_without_a_reviewed_plan_applies_nothing(fleet: Fleet, tmp_path: Path) -> None:
    service = fleet.work / "desired-state" / "services" / "search.yaml"
    _add_egress(service)
    fleet.sh("commit", "-qam", "pushed straight to main")
    runner = _apply_on_merge(fleet, tmp_path, fleet.sh("rev-parse", "HEAD"))
    text = "\n".join(runner.log)
    assert runner.failed, text
    # Every step's own output is in the message: a step that failed is seen, not guessed.
    assert "no merged pull request has" in text and "nothing was applied" in text, text
    assert "## reconcile plan: **GO**" in runner.summary.read_text()
    # Nothing was sent: the same changes are still to be made.
    done = subprocess.run([sys.executable, "-m", "reconciler", "plan", "--detailed-exitcode",
                           str(fleet.work / "desired-state")], cwd=ROOT,
                          env=runner.process_env(fleet_env(fleet)), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "api.sendgrid.com" in done.stdout


def fleet_env(fleet: Fleet) -> dict[str, str]:
    return {"RECONCILE_TOKEN": fleet.sandbox.token,
            "RECONCILE_CONTROL_PLANE_URL": fleet.sandbox.control_plane_url,
            "RECONCILE_GATEWAY": fleet.sandbox.gateway, "PYTHONPATH": str(ROOT)}


def _assert_converged(fleet: Fleet, runner: Runner) -> None:
    env = runner.process_env({**fleet_env(fleet)})
    done = subprocess.run([sys.executable, "-m", "reconciler", "plan", "--detailed-exitcode",
                           str(fleet.work / "desired-state")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.integration  # starts a process of its own
def test_a_read_only_token_puts_the_comment_in_the_job_summary(
        fleet: Fleet, tmp_path: Path) -> None:
    """A fork's pull request: GitHub hands the job a read-only token. The comment step
    warns and writes the job summary; the job's result is the plan's (GO passes)."""
    fleet.github.add_user("ghs_ReadOnlyForkToken0123456789", "github-actions[bot]", bot=True,
                          installation=True, read_only=True)
    base, head, preview = _open_pr(fleet)
    runner = fleet.runner(tmp_path, "fork", sha=preview, run_id="103",
                          event_name="pull_request", ref=f"refs/pull/{PR}/merge",
                          token="ghs_ReadOnlyForkToken0123456789",
                          event={"pull_request": {"number": PR, "base": {"sha": base},
                                                  "head": {"sha": head}}})
    steps = runner.run_job(load(PR_WORKFLOW), "plan")
    assert not runner.failed, "\n".join(runner.log)
    assert steps["reconcile"]["outputs"]["verdict"] == "go"
    text = "\n".join(runner.log)
    assert "::warning title=reconcile comment::could not comment on acme/fleet#7" in text
    assert "Resource not accessible by integration" in text
    summary = runner.summary.read_text()
    assert "<!-- reconcile:plan path=production part=1/1 -->" in summary
    assert fleet.github.comments_on(PR) == []
