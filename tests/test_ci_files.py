"""The CI files: ``action.yml``, ``examples/ci/github-pr-plan.yml``, ``.pre-commit-hooks.yaml``.

Each parses as YAML and has what GitHub / pre-commit require; the action and the workflow
also validate against the SchemaStore schemas check-jsonschema ships (its vendored copies,
no network). The action's scripts are run with bash as GitHub runs them (``bash
--noprofile --norc -eo pipefail``), with a stand-in ``reconcile`` on PATH: the exit-code
mapping (0 and 2 pass, 3 NO-GO fails, anything else fails) and the plan step's plumbing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ruamel.yaml import YAML

from reconciler import cli

ROOT = Path(__file__).resolve().parents[1]
ACTION = ROOT / "action.yml"
WORKFLOW = ROOT / "examples" / "ci" / "github-pr-plan.yml"
APPLY_WORKFLOW = ROOT / "examples" / "ci" / "github-apply-on-merge.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def _load(path: Path) -> Any:
    return YAML(typ="safe", pure=True).load(path.read_text())


def _vendored_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(
        files("check_jsonschema.builtin_schemas.vendor").joinpath(name).read_text())
    return schema


@pytest.fixture(scope="module")
def action() -> dict[str, Any]:
    loaded: dict[str, Any] = _load(ACTION)
    return loaded


def _step(action: dict[str, Any], step_id: str) -> dict[str, Any]:
    (found,) = [s for s in action["runs"]["steps"] if s.get("id") == step_id]
    return dict(found)


# --- action.yml -------------------------------------------------------------------------

def test_the_action_has_what_github_requires(action: dict[str, Any]) -> None:
    assert isinstance(action["name"], str) and action["name"]
    assert isinstance(action["description"], str) and action["description"]
    assert action["runs"]["using"] == "composite"
    for step in action["runs"]["steps"]:
        assert ("run" in step) != ("uses" in step), step
        if "run" in step:
            assert step["shell"] == "bash", step
    assert set(action["inputs"]) == {"path", "base", "python-version", "args", "comment",
                                     "github-token", "key", "artifact-name"}
    assert all(spec.get("description") for spec in action["inputs"].values())
    assert action["inputs"]["base"]["default"] == "${{ github.event.pull_request.base.sha }}"
    assert set(action["outputs"]) == {"verdict", "exit-code", "plan-path", "result-path",
                                      "artifact-url"}
    assert all(spec["value"].startswith("${{ steps.") for spec in action["outputs"].values())
    jsonschema.validate(action, _vendored_schema("github-actions.json"))


def test_the_action_installs_itself_and_runs_the_commands_in_order(
        action: dict[str, Any]) -> None:
    steps = action["runs"]["steps"]
    assert steps[0]["uses"].startswith("actions/setup-python@")
    assert steps[0]["with"]["python-version"] == "${{ inputs.python-version }}"
    assert steps[1]["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert 'pip install' in steps[1]["run"] and '"$ACTION_PATH"' in steps[1]["run"]
    commands = [re.findall(r"^\s*(reconcile \w+)", s.get("run", ""), re.M) for s in steps]
    assert [c for cs in commands for c in cs] == ["reconcile validate", "reconcile plan",
                                                  "reconcile comment"]
    assert "--format github" in _step(action, "validate")["run"]
    plan = _step(action, "plan")["run"]
    for flag in ("--out", "--result", "--format markdown", "--detailed-exitcode",
                 '"${base[@]}"'):
        assert flag in plan


def test_the_comment_step_runs_whatever_the_plan_said(action: dict[str, Any]) -> None:
    """A stale comment next to a red check is what this prevents: the plan step runs after
    a failed validate, and the comment step after a failed (or NO-GO) plan."""
    (comment,) = [s for s in action["runs"]["steps"] if "reconcile comment" in s.get("run", "")]
    assert comment["if"].split()[0] == "always()"
    assert "steps.plan.outputs.result-path != ''" in comment["if"]
    assert "validate" not in _step(action, "plan").get("if", "")
    upload = _step(action, "upload")
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["path"] == "${{ steps.plan.outputs.plan-path }}"


def test_no_input_is_spliced_into_a_script(action: dict[str, Any]) -> None:
    """Expressions reach scripts through env only: a crafted input cannot become code."""
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")


def test_the_action_command_lines_parse_with_the_real_cli() -> None:
    parser = cli.build_parser()
    validate = parser.parse_args(["validate", "--format", "github", "--", "ds"])
    assert (validate.format, validate.path) == ("github", "ds")
    plan = parser.parse_args(["plan", "--base", "abc123", "--out", "/tmp/p.json", "--format",
                              "markdown", "--detailed-exitcode", "--gateway", "gw", "--",
                              "ds"])
    assert (plan.base, plan.out, plan.format, plan.detailed_exitcode, plan.path) == (
        "abc123", "/tmp/p.json", "markdown", True, "ds")
    try:
        comment = parser.parse_args(["comment", "--", "/tmp/p.json"])
    except cli.UsageError:  # no `comment` command in this build
        pytest.skip("reconcile comment is not registered")
    assert comment.command == "comment"


# --- running the action's scripts -------------------------------------------------------

FAKE_RECONCILE = """\
#!/usr/bin/env bash
# Stand-in for the CLI: records its arguments, writes --out, exits with $FAKE_EXIT.
printf '%s\\n' "$@" > "$FAKE_LOG"
out=""
result=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--out" ]; then out="$2"; fi
  if [ "$1" = "--result" ]; then result="$2"; fi
  shift
done
if [ -n "$out" ] && [ "${FAKE_WRITES:-1}" = "1" ]; then echo '{}' > "$out"; fi
if [ -n "$result" ]; then echo '{}' > "$result"; fi
echo "## plan"
exit "${FAKE_EXIT:-0}"
"""


def _run_step(step: dict[str, Any], tmp_path: Path, env: dict[str, str], *,
              real: bool = False) -> tuple[int, dict[str, str], str]:
    """Run one step's script; ``real``: with this project's CLI as ``reconcile``."""
    assert BASH is not None
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "reconcile"
    fake.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m reconciler "
                    '"$@"\n' if real else FAKE_RECONCILE)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    output = tmp_path / "github_output"
    output.write_text("")
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    full_env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
                "GITHUB_OUTPUT": str(output), "FAKE_LOG": str(tmp_path / "args"), **env}
    done = subprocess.run([BASH, "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          env=full_env, capture_output=True, text=True, cwd=tmp_path,
                          timeout=30, check=False)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return done.returncode, outputs, done.stdout


@needs_bash
@pytest.mark.parametrize(("validate", "plan", "passes", "verdict"), [
    ("0", "0", True, "no-changes"),
    ("0", "2", True, "go"),
    ("0", "3", False, "no-go"),
    ("0", "1", False, "error"),
    ("0", "64", False, "error"),
    ("0", "", False, "error"),  # the plan step did not run or recorded nothing
    ("1", "", False, "invalid"),
])
def test_the_exit_code_mapping(action: dict[str, Any], tmp_path: Path, validate: str,
                               plan: str, passes: bool, verdict: str) -> None:
    code, outputs, stdout = _run_step(_step(action, "verdict"), tmp_path, {
        "VALIDATE_EXIT_CODE": validate, "PLAN_EXIT_CODE": plan})
    assert (code == 0) is passes
    assert outputs["verdict"] == verdict
    assert outputs["exit-code"] == ((plan or "1") if validate == "0" else validate)
    if not passes:
        assert stdout.startswith("::error title=reconcile")


@needs_bash
@pytest.mark.parametrize("exit_code", ["0", "2", "3", "1"])
def test_the_plan_step_records_the_exit_code_and_never_fails_itself(
        action: dict[str, Any], tmp_path: Path, exit_code: str) -> None:
    writes = "0" if exit_code == "1" else "1"
    code, outputs, stdout = _run_step(_step(action, "plan"), tmp_path, {
        "RECONCILE_PATH": "desired state", "RECONCILE_BASE": "abc123",
        "RECONCILE_ARGS": " --gateway gw.example  --ca-file ca.pem ",
        "PLAN_DIR": str(tmp_path / "out"), "FAKE_EXIT": exit_code, "FAKE_WRITES": writes,
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})
    assert code == 0
    assert outputs["exit-code"] == exit_code
    plan_path = str(tmp_path / "out" / "plan.json")
    assert outputs.get("plan-path") == (plan_path if writes == "1" else None)
    result_path = str(tmp_path / "out" / "result.json")
    assert (tmp_path / "args").read_text().splitlines() == [
        "plan", "--base", "abc123", "--out", plan_path, "--result", result_path, "--format",
        "markdown", "--detailed-exitcode", "--gateway", "gw.example", "--ca-file", "ca.pem",
        "--", "desired state"]
    assert outputs.get("result-path") == result_path
    assert "## plan" in stdout and (tmp_path / "summary.md").read_text() == "## plan\n"


@needs_bash
def test_a_typo_in_args_still_leaves_a_result_for_the_comment(
        action: dict[str, Any], tmp_path: Path) -> None:
    """``args: --gatewya x`` is a usage error (64) before ``plan`` writes its result: the
    step writes an error result itself, so the comment step (which needs one) runs and
    replaces the previous GO instead of leaving it beside a red check."""
    from reconciler.commands import output
    from reconciler.core.results import ResultKind
    from reconciler.render import markdown_results

    code, outputs, _ = _run_step(_step(action, "plan"), tmp_path, {
        "RECONCILE_PATH": ".", "RECONCILE_BASE": "", "RECONCILE_ARGS": "--gatewya gw",
        "PLAN_DIR": str(tmp_path / "out")}, real=True)
    assert code == 0 and outputs["exit-code"] == "64"
    result_path = outputs.get("result-path")
    assert result_path == str(tmp_path / "out" / "result.json"), outputs
    result = output.load_result(Path(result_path))
    assert result.outcome is ResultKind.ERROR and result.exit_code == 64
    assert "--gatewya" in result.error and "args" in result.error
    body = markdown_results.render_error(result)
    assert body.startswith("## reconcile: ⚠️ **could not plan") and "--gatewya" in body


@needs_bash
def test_without_a_base_the_plan_is_of_head_alone(action: dict[str, Any],
                                                  tmp_path: Path) -> None:
    code, outputs, _ = _run_step(_step(action, "plan"), tmp_path, {
        "RECONCILE_PATH": ".", "RECONCILE_BASE": "", "RECONCILE_ARGS": "",
        "PLAN_DIR": str(tmp_path / "out"), "FAKE_EXIT": "2"})
    assert code == 0 and outputs["exit-code"] == "2"
    args = (tmp_path / "args").read_text().splitlines()
    assert "--base" not in args and args[-2:] == ["--", "."]


@needs_bash
@pytest.mark.parametrize("exit_code", ["0", "1"])
def test_the_validate_step_records_its_exit_code(action: dict[str, Any], tmp_path: Path,
                                                  exit_code: str) -> None:
    code, outputs, _ = _run_step(_step(action, "validate"), tmp_path, {
        "RECONCILE_PATH": "ds", "FAKE_EXIT": exit_code})
    assert code == 0 and outputs["exit-code"] == exit_code
    assert (tmp_path / "args").read_text().splitlines() == [
        "validate", "--format", "github", "--", "ds"]


# --- the example workflow ---------------------------------------------------------------

def test_the_example_workflows() -> None:
    workflow: dict[str, Any] = _load(WORKFLOW)
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}
    (job,) = workflow["jobs"].values()
    checkout = job["steps"][0]
    (reconcile,) = [s for s in job["steps"] if "reconcile@" in s.get("uses", "")]
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"]["fetch-depth"] == 0
    assert re.fullmatch(r"[\w.-]+/reconcile@[\w.-]+", reconcile["uses"])
    assert reconcile["with"]["key"] and reconcile["with"]["artifact-name"]
    apply = _load(APPLY_WORKFLOW)
    assert apply["on"]["push"]["branches"] == ["main"]
    assert apply["concurrency"]["cancel-in-progress"] is False
    # The artifact the apply workflow downloads is the one the PR workflow uploads.
    assert apply["jobs"]["apply"]["env"]["PLAN_ARTIFACT"] == reconcile["with"]["artifact-name"]
    for each in (workflow, apply):
        assert "production" in each["concurrency"]["group"]  # one group per environment
        text = json.dumps(each)
        for secret in ("RECONCILE_TOKEN", "RECONCILE_SIGNER_KEY_PEM", "RECONCILE_CA_PEM"):
            assert f"secrets.{secret}" in text
        jsonschema.validate(each, _vendored_schema("github-workflows.json"))
    for step in (s for each in (workflow, apply) for j in each["jobs"].values()
                 for s in j["steps"]):
        assert "${{" not in step.get("run", ""), step.get("name")


def test_the_ci_readme_names_the_files() -> None:
    text = (ROOT / "examples" / "ci" / "README.md").read_text()
    for name in ("action.yml", "github-pr-plan.yml", "github-apply-on-merge.yml",
                 ".pre-commit-hooks.yaml", "sarif", "docs/ci.md"):
        assert name in text


# --- .pre-commit-hooks.yaml ---------------------------------------------------------------

def test_the_pre_commit_hook() -> None:
    hooks = _load(HOOKS)
    assert isinstance(hooks, list)
    (hook,) = hooks
    for key in ("id", "name", "entry", "language"):
        assert isinstance(hook[key], str) and hook[key], key
    assert hook["id"] == "reconcile-validate"
    assert hook["language"] == "python"
    assert hook["entry"] == "reconcile validate"
    assert hook["pass_filenames"] is False  # validate takes the repo, not file names
    files_re = re.compile(hook["files"])
    assert files_re.search("services/a.yaml") and files_re.search("b.yml")
    assert not files_re.search("c.json") and not files_re.search("x.yaml.bak")
    # The entry's executable is a console script this package installs.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert hook["entry"].split()[0] in scripts
    assert cli.build_parser().parse_args(hook["entry"].split()[1:]).command == "validate"
