"""The pipeline root's documents (pipeline.yaml, freezes/, policies/) are validated with
file:line like the desired state: a CEL rule that does not compile, a soak on the first
environment, an unknown environment in a freeze -- ``validate`` exits 1 naming each, and
``plan --env`` refuses before reading anything live. Choosing the environment: --env,
the one PATH lies in, or the only one; a repo without pipeline.yaml is untouched."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.core import policy
from reconciler.exitcodes import Exit
from reconciler.shell import environments
from tests.e2e_repo import EXAMPLES, PROJECT, git
from tests.promotion import pipeline_repo

# the scenario repos' pipeline, with a 30m soak and a weekend deny window on prod
PIPELINE = pipeline_repo.PIPELINE.format(soak="30m", windows=(
    "    windows:\n"
    '      - {kind: deny, name: weekend, schedule: "0 18 * * 5", duration: 61h, '
    "timezone: Europe/Berlin}\n"))

POLICY = """apiVersion: reconcile/v1
kind: Policy
name: prod-rules
environments: [prod]
timezone: Europe/Berlin
rules:
  - name: evidence
    expression: release.evidenceComplete
    message: production promotions need complete release evidence
  - name: broken
    expression: change.registryHost ==
    message: never compiles
"""


def run(*args: str, cwd: Path = PROJECT) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "config"
    for env in ("staging", "prod"):
        shutil.copytree(EXAMPLES, root / "environments" / env)
    (root / "pipeline.yaml").write_text(PIPELINE)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "two environments")
    return root


@pytest.mark.integration  # starts a process of its own
def test_a_valid_pipeline_validates_every_environment(repo: Path) -> None:
    code, out, err = run("validate", str(repo))
    assert code == Exit.OK, out + err
    assert "valid: 2 environments (staging, prod)" in out
    code, out, _ = run("validate", str(repo / "environments" / "prod" / "services"))
    assert code == Exit.OK and "valid: 1 environment (prod)" in out


@pytest.mark.integration  # starts a process of its own
def test_a_rule_that_does_not_compile_is_a_problem_at_its_line(repo: Path) -> None:
    (repo / "policies").mkdir()
    (repo / "policies" / "prod.yaml").write_text(POLICY)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "policy")
    code, out, err = run("validate", str(repo))
    assert code == Exit.ERROR
    assert "policies/prod.yaml:11:17: rules[1].expression: rule 'broken' does not compile: " \
        "Failed to parse expression" in out, out
    assert "invalid: 1 problem" in err
    # plan refuses before anything live is read, with the same problem
    code, out, err = run("plan", str(repo), "--env", "prod")
    assert code == Exit.ERROR and "policies/prod.yaml:11:17" in out + err


def _invalid_with_qa_freeze(repo: Path, *, until: str, message: str) -> set[tuple[str, int, str]]:
    """Commit freezes/x.yaml (of an environment ``qa`` the pipeline lacks, until ``until``)
    with what the test wrote before; ``validate`` refuses: the (path, line, field) named."""
    (repo / "freezes" / "x.yaml").write_text(
        f'apiVersion: reconcile/v1\nkind: Freeze\nreason: "x"\nuntil: "{until}"\n'
        "environments: [qa]\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    code, out, _ = run("validate", str(repo), "--format", "json")
    assert code == Exit.ERROR
    return {(d["path"], d["line"], d["field"]) for d in json.loads(out)["diagnostics"]}


@pytest.mark.integration  # starts a process of its own
def test_pipeline_mistakes_name_file_and_line(repo: Path) -> None:
    (repo / "pipeline.yaml").write_text(PIPELINE.replace(
        "    path: environments/staging\n", "    path: environments/staging\n    soak: 1h\n")
        .replace("duration: 61h", "duration: forever"))
    (repo / "freezes").mkdir()
    found = _invalid_with_qa_freeze(repo, until="tomorrow", message="mistakes")
    assert ("pipeline.yaml", 11, "environments[1].windows[0].duration") in found
    assert ("freezes/x.yaml", 4, "until") in found
    # Once each field is well formed, the rules between them: no soak on the first one,
    # a freeze of an environment the pipeline does not have.
    (repo / "pipeline.yaml").write_text(PIPELINE.replace(
        "    path: environments/staging\n", "    path: environments/staging\n    soak: 1h\n"))
    found = _invalid_with_qa_freeze(repo, until="2030-01-01T00:00:00Z",
                                    message="mistakes between fields")
    assert ("pipeline.yaml", 6, "environments[0].soak") in found, found


@pytest.mark.integration  # starts a process of its own
def test_the_environment_is_chosen_by_flag_by_place_or_alone(repo: Path) -> None:
    assert environments.select(repo, "prod") is not None
    inside = environments.select(repo / "environments" / "staging" / "services", None)
    assert inside is not None and inside.name == "staging" and inside.upstream is None
    prod = environments.select(repo / "environments" / "prod", None)
    assert prod is not None and prod.upstream is not None and prod.upstream.name == "staging"
    with pytest.raises(environments.PipelineError, match="choose one with --env"):
        environments.select(repo, None)
    with pytest.raises(environments.PipelineError, match="no such environment"):
        environments.select(repo, "qa")
    code, _, err = run("plan", str(repo), "--env", "qa")
    assert code == Exit.USAGE and "the pipeline has: staging, prod" in err


@pytest.mark.integration  # starts a process of its own
def test_a_repo_without_a_pipeline_needs_no_env(tmp_path: Path) -> None:
    root = tmp_path / "single"
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q")
    assert environments.select(root, None) is None
    code, out, _ = run("validate", str(root))
    assert code == Exit.OK and "valid: 5 services" in out
    code, _, err = run("plan", str(root), "--env", "prod")
    assert code == Exit.USAGE and "no pipeline.yaml" in err


@pytest.mark.parametrize(("expression", "ok"), [
    ('change.registryHost == "registry.sandbox.test"', True),
    ('environment != "prod" || release.evidenceComplete', False),
    ("!(local.weekday == 5 && local.hour >= 12)", False),  # Friday 13:00 Berlin
    ("upstream.provenSeconds >= soak.requiredSeconds", True),
    ("change.nosuchkey == 1", False),  # an error never passes
])
def test_rules_see_the_promotion_context(expression: str, ok: bool) -> None:
    variables = {"environment": "prod", "service": "checkout",
                 "change": {"registryHost": "registry.sandbox.test"},
                 "release": {"evidenceComplete": False}, "upstream": {"provenSeconds": 3600},
                 "soak": {"requiredSeconds": 1800},
                 "local": {"weekday": 5, "hour": 13, "minute": 0}}
    assert policy.compile_error(expression) is None
    passed, _ = policy.evaluate(expression, variables)
    assert passed is ok


EXAMPLES_ROOT = PROJECT / "examples"


@pytest.mark.integration  # starts a process of its own
def test_the_shipped_examples_validate(tmp_path: Path) -> None:
    root = tmp_path / "environments"
    shutil.copytree(EXAMPLES_ROOT / "environments", root)
    shutil.copytree(EXAMPLES_ROOT / "policies", root / "policies", dirs_exist_ok=True)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "examples")
    rules = environments.read_rules(root)
    assert rules.diagnostics == () and rules.pipeline is not None
    assert {p.name for p, _, _ in rules.policies} == {
        "prod-registry", "registry", "release-evidence", "no-friday-afternoon"}
    code, out, err = run("validate", str(root))
    assert code == Exit.OK, out + err
