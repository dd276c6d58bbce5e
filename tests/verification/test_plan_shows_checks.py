"""The plan shows the checks each service is held to (issue 34): text, JSON (validated
against the published schema, and read back) and Markdown; a plan without Verification
documents carries nothing new (the goldens under tests/plan stay byte-identical)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from reconciler.core.desired import Verification
from reconciler.core.planning import Provenance, plan
from reconciler.render import jsonplan, markdown, text
from tests.plan import builders as b

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "plan.schema.json").read_text())

VERIFICATION = Verification.model_validate({
    "apiVersion": "reconcile/v1", "kind": "Verification", "name": "works",
    "scope": {"services": ["checkout"]},
    "checks": [
        {"name": "answers", "http": {"path": "/healthz", "status": 200}, "count": 3,
         "intervalSeconds": 2.0, "failureLimit": 1},
        {"name": "errors", "prometheus": {
            "query": 'sum(rate(x{cluster="{{cluster}}"}[1m]))',
            "successCondition": "result < 0.01"}},
    ]})


def planned() -> object:
    desired = b.reference_desired().model_copy(update={"verifications": (VERIFICATION,)})
    return plan(desired, b.reference_live(), Provenance(commit="9" * 40))


def test_json_lists_the_checks_and_reads_back() -> None:
    made = planned()
    wire = json.loads(jsonplan.dumps(made))  # type: ignore[arg-type]
    jsonschema.validate(wire, SCHEMA)
    [held] = wire["verifications"]
    assert held["service"] == "checkout"
    assert [c["name"] for c in held["checks"]] == ["works/answers", "works/errors"]
    assert held["checks"][0]["count"] == 3 and held["checks"][0]["failure_limit"] == 1
    assert jsonplan.from_wire(wire).verifications == made.verifications  # type: ignore[attr-defined]


def test_text_and_markdown_name_each_check() -> None:
    made = planned()
    shown = text.render(made)  # type: ignore[arg-type]
    assert "works/answers (http, 3× 2s apart, 1 failure(s) allowed): GET /healthz expects " \
        "HTTP 200" in shown
    assert "works/errors (prometheus, once)" in shown and "result < 0.01" in shown
    md = markdown.render(made)  # type: ignore[arg-type]
    assert "Checks: 2, on every cluster" in md and "works/errors" in md


def test_without_verification_nothing_is_added() -> None:
    made = plan(b.reference_desired(), b.reference_live(), Provenance(commit="9" * 40))
    assert "verifications" not in json.loads(jsonplan.dumps(made))
    assert "checks" not in text.render(made)
