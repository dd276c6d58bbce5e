"""A policy rule is read before it is trusted (core.celcheck): ``validate`` names an
unknown variable, field or function, a type error, a non-boolean answer, a duplicate
rule name and an environment the pipeline lacks at the rule's file:line; a rule whose
cost bound is over the budget is refused at validate and, met by a plan, denied without
being run -- in bounded time, whatever its nesting."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from reconciler.core import celcheck, policy
from reconciler.exitcodes import Exit
from tests.e2e_repo import git
from tests.promotion.test_pipeline_files import repo, run  # noqa: F401 - the fixture

TEN = "[0,1,2,3,4,5,6,7,8,9]"


def nested(depth: int, macro: str) -> str:
    """``depth`` nested ``.all``/``.map`` over ten-item lists (the runaway rules)."""
    body = f"x{depth} >= 0" if macro == "all" else f"x{depth}"
    for level in range(depth, 0, -1):
        body = f"{TEN}.{macro}(x{level}, {body})"
    return body if macro == "all" else f"size({body}) > 0"


@pytest.mark.parametrize(("expression", "said"), [
    ('chnage.digest == ""', "unknown variable 'chnage'"),
    ('change.digst == ""', "unknown field 'digst'"),
    ("lower(change.tag) == \"x\"", "unknown function 'lower'"),
    ('change.tag.lower() == "x"', "unknown function 'lower' on string"),
    ('upstream.provenSeconds + "s" == "1s"', "no overload of + for (int, string)"),
    ('upstream.provenSeconds == "1"', "no overload of == for (int, string)"),
    ("upstream.provenSeconds", "the rule answers int, not a bool"),
    ('release.evidence.map(e, e + "!")', "the rule answers list(string), not a bool"),
    ("local.hour > 9 ? 1 : 2", "the rule answers int"),
    ("release.evidence.all(e, e)", "condition must be a bool"),
    ("change{x: 1}", "message construction"),
])
def test_a_rule_that_cannot_answer_is_named(expression: str, said: str) -> None:
    found = policy.check_error(expression)
    assert found is not None and said in found, found
    # and a plan meeting it anyway denies, never lets it through
    passed, why = policy.evaluate(expression, {})
    assert not passed and why is not None and said in why


@pytest.mark.parametrize("expression", [
    "release.evidenceComplete",
    'change.registryHost == "registry.sandbox.test" && change.digest.startsWith("sha256:")',
    "!(local.weekday == 5 && local.hour >= 12)",
    "upstream.provenSeconds >= soak.requiredSeconds || !upstream.proven",
    '"sbom" in release.evidence && release.evidence.exists(e, e == "provenance")',
    'has(change.tag) && change.tag.matches("^v[0-9]+")',
    'now - timestamp("2026-01-01T00:00:00Z") > duration("1h") && now.getHours() < 23',
    'environment == "prod" ? release.evidenceComplete : true',
    "size(release.evidence) >= 2 && release.evidence.size() < 6",
    "[1, 2].map(x, x > 1, x * 2) == [4] && -1 < upstream.provenSeconds",
    nested(4, "all"), nested(3, "map"),
    # Comparisons against short literals cost the literal, not the variable's bound.
    "service in [" + ", ".join(f'"svc{i}"' for i in range(25)) + "]",
    'release.evidence.all(e, e in ["sbom", "provenance", "signature", "scan", "tests"])',
    "release.evidence.all(e, release.evidence.exists(f, f == e))",
    'size(change["tag"]) > 0 && size(dyn(service)) > 0',
])
def test_a_sound_rule_passes_the_check(expression: str) -> None:
    assert policy.compile_error(expression) is None
    assert policy.check_error(expression) is None, policy.check_error(expression)
    assert policy.budget_error(expression) is None


@pytest.mark.parametrize(("depth", "macro"), [(9, "all"), (6, "map"), (5, "all"),
                                              (4, "map")])
def test_a_runaway_rule_is_denied_in_bounded_time(depth: int, macro: str) -> None:
    expression = nested(depth, macro)
    assert policy.compile_error(expression) is None  # the engine would run it
    start = time.perf_counter()
    passed, why = policy.evaluate(expression, {})
    took = time.perf_counter() - start
    assert not passed and why is not None and "budget exceeded" in why, why
    assert took < 1.0, took


def test_the_budget_is_what_the_engine_runs_in_well_under_a_second() -> None:
    """The heaviest admitted runaway shapes: the bound is under the budget, and the
    engine answers them within 0.5 s even on a loaded machine (measured ~20 ms)."""
    for expression in (nested(4, "all"), nested(3, "map")):
        assert celcheck.check(expression).cost <= celcheck.BUDGET
        start = time.perf_counter()
        passed, why = policy.evaluate(expression, {})
        assert passed, why
        assert time.perf_counter() - start < 0.5


BAD = """apiVersion: reconcile/v1
kind: Policy
name: prod-rules
environments: [prod, prdo]
rules:
  - name: typo
    expression: chnage.digest != ""
    message: m
  - name: typo
    expression: upstream.provenSeconds
    message: m
  - name: runaway
    expression: {runaway}
    message: m
"""


@pytest.mark.integration  # starts a process of its own
def test_validate_names_each_bad_rule_at_its_line(repo: Path) -> None:  # noqa: F811
    (repo / "policies").mkdir()
    (repo / "policies" / "prod.yaml").write_text(BAD.format(runaway=json.dumps(nested(9, "all"))))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "bad rules")
    code, out, _ = run("validate", str(repo), "--format", "json")
    assert code == Exit.ERROR
    found = {(d["line"], d["field"]): d["message"] for d in json.loads(out)["diagnostics"]
             if d["path"] == "policies/prod.yaml"}
    assert "'prdo' is no environment of the pipeline" in found[(4, "environments[1]")]
    assert "unknown variable 'chnage'" in found[(7, "rules[0].expression")]
    assert "named twice" in found[(9, "rules[1].name")]
    assert "answers int, not a bool" in found[(10, "rules[1].expression")]
    assert "budget exceeded" in found[(13, "rules[2].expression")]
    code, out, _ = run("validate", str(repo))
    assert "policies/prod.yaml:7:17: rules[0].expression: rule 'typo': unknown variable" \
        in out, out


def test_a_freeze_of_an_unknown_environment_is_named_at_its_line(tmp_path: Path) -> None:
    from reconciler.shell import environments
    from tests.promotion.test_pipeline_files import PIPELINE

    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    (tmp_path / "freezes").mkdir()
    (tmp_path / "freezes" / "x.yaml").write_text(
        'apiVersion: reconcile/v1\nkind: Freeze\nreason: "x"\n'
        "environments: [prod, qa]\n")
    rules = environments.read_rules(tmp_path)
    assert [(d.path, d.line, d.field) for d in rules.diagnostics] == [
        ("freezes/x.yaml", 4, "environments[1]")]
    assert rules.freezes[0][0].until is None  # open-ended
