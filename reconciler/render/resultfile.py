"""The result file: what ``plan --result FILE`` writes whatever happens, and what
``reconcile comment`` reads.

Owns the wire form of ``core.results.PlanResult``::

    {"format": "reconcile.plan-result", "format_version": "1.0",
     "outcome": "plan" | "invalid" | "error",
     "commit": "<sha>" | null, "path": "...", "root": "...",
     "plan": <the saved-plan document> (outcome plan only),
     "diagnostics": [{path, line, column, field, message, severity}] (invalid only),
     "error": "sentence", "exit_code": 1}

The plan inside is the same document ``plan --out`` saves (``render.jsonplan``, with its
content digest, checked on reading), so a comment made from a result file says exactly
what the saved plan says. A saved plan file is also accepted where a result file is
(``read``): it is a result whose outcome is ``plan``.

Pure (no I/O): text in, values out. ``WireError`` names what is wrong.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.core.diagnostics import Diagnostic, Severity
from reconciler.core.results import PlanResult, ResultKind
from reconciler.render import jsonplan

FORMAT = "reconcile.plan-result"
FORMAT_VERSION = "1.0"
MAJOR = FORMAT_VERSION.split(".")[0]
SCHEMA_ID = "https://reconcile.dev/schemas/plan-result.schema.json"


class WireError(ValueError):
    """A result document that cannot be read."""


def to_wire(result: PlanResult) -> dict[str, Any]:
    document: dict[str, Any] = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "outcome": result.outcome.value, "commit": result.commit, "path": result.path,
        "root": result.root}
    if result.plan is not None:
        document["plan"] = jsonplan.to_wire(result.plan)
    if result.diagnostics:
        document["diagnostics"] = [d.to_json() for d in result.diagnostics]
    if result.outcome is not ResultKind.PLAN:
        document["error"] = result.error
        document["exit_code"] = result.exit_code
    return document


def dumps(result: PlanResult) -> str:
    return json.dumps(to_wire(result), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise WireError(f"{key} must be a string or null")
    return value


def _diagnostic(index: int, raw: object) -> Diagnostic:
    if not isinstance(raw, dict):
        raise WireError(f"diagnostics[{index}] is not an object")
    try:
        return Diagnostic(path=str(raw["path"]), line=int(raw.get("line") or 0),
                          column=int(raw.get("column") or 0), field=str(raw.get("field") or ""),
                          message=str(raw["message"]),
                          severity=Severity(raw.get("severity") or "error"))
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"diagnostics[{index}]: {exc}") from None


def from_wire(data: object) -> PlanResult:
    """A result document, or a saved plan document (a result whose outcome is plan)."""
    if not isinstance(data, dict):
        raise WireError("a result document is a JSON object")
    if data.get("format") != FORMAT:
        if "format" not in data and "content_digest" in data:  # a saved plan file
            return PlanResult.of_plan(jsonplan.from_wire(data))
        raise WireError(f"format is not {FORMAT!r}: neither a result file nor a saved plan")
    version = data.get("format_version")
    if not isinstance(version, str) or version.split(".")[0] != MAJOR:
        raise WireError(f"format_version {version!r}: this reconcile reads {MAJOR}.x only")
    try:
        outcome = ResultKind(str(data.get("outcome")))
    except ValueError:
        raise WireError(f"outcome {data.get('outcome')!r} is not plan, invalid or error") \
            from None
    commit, path, root = _text(data, "commit"), _text(data, "path"), _text(data, "root")
    if outcome is ResultKind.PLAN:
        plan = jsonplan.from_wire(data.get("plan"))
        return PlanResult(outcome, commit=commit, path=path, root=root, plan=plan)
    raw = data.get("diagnostics") or []
    if not isinstance(raw, list):
        raise WireError("diagnostics must be a list")
    exit_code = data.get("exit_code", 1)
    if not isinstance(exit_code, int):
        raise WireError("exit_code must be an integer")
    try:
        return PlanResult(outcome, commit=commit, path=path, root=root,
                          diagnostics=tuple(_diagnostic(i, d) for i, d in enumerate(raw)),
                          error=_text(data, "error") or "", exit_code=exit_code)
    except ValueError as exc:
        raise WireError(str(exc)) from None


def wire_schema() -> dict[str, Any]:
    """JSON Schema 2020-12 of the result file (``schemas/plan-result.schema.json``); the
    plan inside is ``plan.schema.json``'s."""
    text = {"type": ["string", "null"]}
    diagnostic = {"type": "object", "additionalProperties": False,
                  "required": ["path", "line", "column", "field", "message", "severity"],
                  "properties": {"path": {"type": "string"},
                                 "line": {"type": "integer", "minimum": 0},
                                 "column": {"type": "integer", "minimum": 0},
                                 "field": {"type": "string"}, "message": {"type": "string"},
                                 "severity": {"enum": ["error", "warning"]}}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
        "title": "reconcile plan result", "type": "object", "additionalProperties": False,
        "required": ["format", "format_version", "outcome", "commit", "path", "root"],
        "properties": {
            "format": {"const": FORMAT},
            "format_version": {"type": "string", "pattern": rf"^{MAJOR}\.[0-9]+$"},
            "outcome": {"enum": [k.value for k in ResultKind]},
            "commit": text, "path": text, "root": text,
            "plan": {"$ref": jsonplan.SCHEMA_ID},
            "diagnostics": {"type": "array", "items": diagnostic, "minItems": 1},
            "error": {"type": "string"}, "exit_code": {"type": "integer"}},
        "allOf": [
            {"if": {"properties": {"outcome": {"const": "plan"}}},
             "then": {"required": ["plan"], "not": {"required": ["error"]}}},
            {"if": {"properties": {"outcome": {"const": "invalid"}}},
             "then": {"required": ["diagnostics", "error", "exit_code"]}},
            {"if": {"properties": {"outcome": {"const": "error"}}},
             "then": {"required": ["error", "exit_code"]}},
        ],
    }


if __name__ == "__main__":
    print(json.dumps(wire_schema(), indent=2, sort_keys=True))
