"""The living comment always describes the newest commit: a plan, an invalid desired
state, or what could not be read; one comment per key; what next names the run and the
artifact; a read-only token degrades to the job summary. Against the real sandbox (plan)
and the GitHub stand-in (comment), over HTTP on loopback."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.diagnostics import Diagnostic
from reconciler.core.results import PlanResult, ResultKind
from reconciler.exitcodes import Exit
from reconciler.render import jsonplan, resultfile
from reconciler.sandbox import launcher
from reconciler.sandbox.launcher import Sandbox
from tests.comment.conftest import PR, TOKEN, Result
from tests.comment.github_standin import StandIn
from tests.e2e_repo import git, make_repo

Run = Callable[..., Result]


def living(server: StandIn, key: str = "") -> list[dict[str, object]]:
    prefix = "<!-- reconcile:plan path=" + (key + " " if key else "")
    return [c for c in server.comments_on(PR) if str(c["body"]).startswith(prefix)]


def test_the_comment_follows_the_newest_commit_go_invalid_error(
        tmp_path: Path, sandbox: Sandbox, standin: StandIn, actions_env: object,
        run: Run) -> None:
    repo = make_repo(tmp_path, sandbox)
    result = tmp_path / "result.json"

    def plan() -> int:
        return repo.run("plan", "--result", str(result), "--out", str(tmp_path / "plan.json"),
                        "--detailed-exitcode", str(repo.path)).code

    # 1. A GO plan is posted.
    assert plan() == Exit.CHANGES
    go_commit = json.loads(result.read_text())["commit"]
    posted = run(str(result), "--key", "production")
    assert posted.code == Exit.OK, posted.err
    [comment] = living(standin)
    cid, body = comment["id"], str(comment["body"])
    assert "## reconcile plan: **GO**" in body
    assert f"<!-- reconcile:result outcome=plan commit={go_commit} -->" in body

    # 2. The PR pushes invalid YAML: the same comment now says invalid, with file:line.
    service = repo.path / "services" / "checkout.yaml"
    lines = service.read_text().splitlines()
    lines.insert(3, "  egress: [unclosed")
    service.write_text("\n".join(lines) + "\n")
    repo.commit("break checkout")
    assert plan() == Exit.ERROR
    invalid = json.loads(result.read_text())
    assert invalid["outcome"] == "invalid" and invalid["commit"] != go_commit
    assert run(str(result), "--key", "production").code == Exit.OK
    [comment] = living(standin)
    body = str(comment["body"])
    assert comment["id"] == cid
    assert "❌ **invalid desired state**" in body.split("\n")[2]
    assert "no plan exists for this commit" in body
    assert re.search(r"`services/checkout\.yaml:\d+:\d+`", body), body
    assert invalid["commit"][:12] in body
    assert f"superseded: plan for <code>{go_commit[:12]}</code>" in body
    assert "**GO**" not in body.split("<!-- reconcile:superseded -->")[0]

    # 3. Fixed, but the control plane is down: it could not plan this commit.
    git(repo.path, "revert", "--no-edit", "HEAD")
    sandbox.kill(launcher.CONTROL_PLANE)
    assert plan() == Exit.ERROR
    error = json.loads(result.read_text())
    assert error["outcome"] == "error" and "control plane" in error["error"]
    assert run(str(result), "--key", "production").code == Exit.OK
    [comment] = living(standin)
    body = str(comment["body"])
    assert comment["id"] == cid
    headline = body.split("\n")[2]
    assert f"could not plan commit `{error['commit'][:12]}`" in headline
    assert re.search(r"— `control plane https://[^`]+` could not be read$", headline), headline
    assert "control plane" in headline and sandbox.control_plane_url.split("//")[1] in headline
    assert "No plan exists for this commit" in body
    # The plan of the GO commit is still only the superseded block, carried over once.
    assert body.count("superseded: plan for") == 1
    assert f"superseded: plan for <code>{go_commit[:12]}</code>" in body
    assert len([e for e in standin.requests() if e.method == "POST"]) == 1


def test_two_keys_keep_two_living_comments(standin: StandIn, actions_env: object, run: Run,
                                           planfile: Path, tmp_path: Path) -> None:
    assert run(str(planfile), "--key", "production").code == Exit.OK
    assert run(str(planfile), "--key", "staging").code == Exit.OK
    [prod] = living(standin, "production")
    [staging] = living(standin, "staging")
    failed = tmp_path / "failed.json"
    failed.write_text(resultfile.dumps(PlanResult(
        ResultKind.ERROR, commit="c" * 40, error="control plane https://cp.example: down")))
    assert run(str(failed), "--key", "staging").code == Exit.OK
    assert living(standin, "production") == [prod]  # untouched, byte for byte
    [now] = living(standin, "staging")
    assert now["id"] == staging["id"] and "could not plan" in str(now["body"])


def test_what_next_names_the_run_and_the_artifact(standin: StandIn, actions_env: object,
                                                  run: Run, planfile: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.example")
    monkeypatch.setenv("GITHUB_RUN_ID", "4242")
    url = "https://github.example/acme/fleet/actions/runs/4242/artifacts/77"
    assert run(str(planfile), "--artifact", "reconcile-plan-production",
               "--artifact-url", url).code == Exit.OK
    [comment] = living(standin)
    body = str(comment["body"])
    assert "[workflow run 4242](https://github.example/acme/fleet/actions/runs/4242)" in body
    assert f"[`reconcile-plan-production`]({url})" in body
    assert "`gh run download 4242 -n reconcile-plan-production`" in body
    assert "`reconcile apply plan.json`" in body
    assert str(planfile) not in body  # never a path on the runner


def test_a_link_that_could_break_out_is_not_rendered(standin: StandIn, actions_env: object,
                                                     run: Run, planfile: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.example")
    monkeypatch.setenv("GITHUB_RUN_ID", "5")
    bad = "https://evil.example/x)[click](https://evil.example"
    assert run(str(planfile), "--artifact", "a b", "--artifact-url", bad).code == Exit.OK
    body = str(living(standin)[0]["body"])
    assert "evil.example" not in body and "a b" not in body


def test_a_read_only_token_writes_the_job_summary_and_warns(
        standin: StandIn, actions_env: Callable[..., None], run: Run, planfile: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    standin.add_user("ghs_forkreadonly", "github-actions[bot]", bot=True, installation=True,
                     read_only=True)
    actions_env(token="ghs_forkreadonly")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(str(planfile))
    assert result.code == Exit.OK, result.err
    assert result.out.startswith("::warning title=reconcile comment::")
    assert "403" in result.out and "Resource not accessible by integration" in result.out
    assert "## reconcile plan: **GO**" in summary.read_text()
    assert living(standin) == []
    # Outside Actions (no summary file) the same refusal is an error, not silence.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert run(str(planfile)).code == Exit.ERROR


def _invalid(count: int) -> PlanResult:
    return PlanResult(ResultKind.INVALID, commit="d" * 40, path="/w/fleet/desired",
                      root="/w/fleet", error="invalid", exit_code=1, diagnostics=tuple(
                          Diagnostic(f"services/s{i:03d}.yaml", i + 1, 3, "egress[0].host",
                                     f"problem {i}") for i in range(count)))


def test_many_problems_collapse_past_a_few(standin: StandIn, actions_env: object, run: Run,
                                           tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(resultfile.dumps(_invalid(40)))
    assert run(str(path)).code == Exit.OK
    body = str(living(standin, "desired")[0]["body"])
    head, collapsed = body.split("<details><summary>35 more problems</summary>")
    assert head.count("`desired/services/s") == 5  # repo-relative file:line
    assert "`desired/services/s000.yaml:1:3`" in head
    assert collapsed.count("`desired/services/s") == 35


def test_the_result_file_round_trips_and_a_plan_file_is_a_result(planfile: Path) -> None:
    invalid = _invalid(3)
    assert resultfile.from_wire(json.loads(resultfile.dumps(invalid))) == invalid
    as_result = resultfile.from_wire(json.loads(planfile.read_text()))
    assert as_result.outcome is ResultKind.PLAN and as_result.plan is not None
    with pytest.raises(resultfile.WireError):
        resultfile.from_wire({"format": "reconcile.plan-result", "format_version": "1.0",
                              "outcome": "invalid", "diagnostics": []})


def test_comment_needs_no_token_to_print_an_error_result(run: Run, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITHUB_TOKEN", "GITHUB_REPOSITORY", "GITHUB_EVENT_PATH", "GITHUB_REF"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "r.json"
    path.write_text(resultfile.dumps(PlanResult(
        ResultKind.ERROR, commit="e" * 40, error="control plane https://cp: down\n```\nx")))
    dry = run(str(path), "--dry-run")
    assert dry.code == Exit.OK
    assert "could not plan commit `eeeeeeeeeeee`" in dry.out
    assert "````text" in dry.out  # a fence longer than any backtick run inside
    assert TOKEN not in dry.out


SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _validator() -> Any:
    import jsonschema
    from referencing import Registry, Resource

    plan_schema = json.loads((SCHEMAS / "plan.schema.json").read_text())
    registry = Registry().with_resource(jsonplan.SCHEMA_ID, Resource.from_contents(plan_schema))
    schema = json.loads((SCHEMAS / "plan-result.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def test_the_committed_result_schema_is_the_generated_one() -> None:
    committed = json.loads((SCHEMAS / "plan-result.schema.json").read_text())
    assert committed == resultfile.wire_schema(), (
        "regenerate: python -m reconciler.render.resultfile > schemas/plan-result.schema.json")


def test_every_outcome_validates_against_the_schema(planfile: Path) -> None:
    validator = _validator()
    plan_result = resultfile.from_wire(json.loads(planfile.read_text()))
    for result in (plan_result, _invalid(2), PlanResult(ResultKind.ERROR, error="down",
                                                         exit_code=1)):
        validator.validate(json.loads(resultfile.dumps(result)))
    broken = json.loads(resultfile.dumps(_invalid(1)))
    del broken["diagnostics"]
    assert list(validator.iter_errors(broken))
