"""``reconcile validate --format github|sarif``: CI annotations and SARIF 2.1.0.

Golden-ish runs of the real CLI over a copy of the reference repo broken several ways
(one file name and one key holding ``%``, ``:`` and ``,``), then the renderers alone for
what a repo cannot easily produce (newlines, terminal escapes, repo-level problems).

SARIF: the log is checked against a focused schema written here from the SARIF 2.1.0
specification (the parts GitHub code scanning reads: version, one run, tool.driver with
name/version/rules, results with ruleId/ruleIndex/level/message and a physicalLocation
with a relative uri, uriBaseId and a 1-based region). The official OASIS schema is not
shipped by any installed package; set ``RECONCILE_SARIF_SCHEMA`` to a local copy of
``sarif-schema-2.1.0.json`` to also validate against it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reconciler import __version__
from reconciler.core.diagnostics import NO_POSITION, Diagnostic
from reconciler.render.diagnostics_formats import (
    artifact_path,
    escape_data,
    escape_property,
    github_annotation,
    sarif_log,
    uri,
)
from tests.validation.conftest import Run

ODD_FILE = "grants/odd,na:me%.yaml"
ODD_GRANT = """\
apiVersion: reconcile/v1
kind: Grant
userId: ops-bot
services:
  - service: checkout
    capabilities: [deploy]
    "we%ird:key,x": 1
"""


@pytest.fixture
def broken(repo: Path) -> Path:
    """The reference repo with five problems in three files."""
    (repo / ODD_FILE).write_text(ODD_GRANT)
    (repo / "services" / "a.yaml").write_text("kind: Nope\n")
    search = repo / "services" / "search.yaml"
    text = search.read_text()
    digest = re.search(r"digest: (sha256:[0-9a-f]{64})", text)
    assert digest is not None
    search.write_text(text.replace(digest.group(1), "sha256:zz" + digest.group(1)[9:]))
    return repo


GOLDEN_GITHUB = [
    "::error file=repo/grants/odd%2Cna%3Ame%25.yaml,line=6,col=20,"
    "title=services[0].capabilities[0]::'deploy' is not a deployment capability; expected "
    "one of deployment:preflight, deployment:create-greenfield, deployment:promote-route, "
    "deployment:rollback-route",
    "::error file=repo/grants/odd%2Cna%3Ame%25.yaml,line=7,col=5,"
    "title=services[0].we%25ird%3Akey%2Cx::unknown key `we%25ird:key,x` (expected one of: "
    "capabilities, service)",
    "::error file=repo/services/a.yaml,line=1,col=1,title=apiVersion::required key "
    "`apiVersion` is missing (expected reconcile/v1)",
    "::error file=repo/services/a.yaml,line=1,col=7,title=kind::unknown kind 'Nope'; "
    "expected one of Settings, Service, Grant, Hold, Route, Verification",
    "::error file=repo/services/search.yaml,line=11,col=11,title=release.digest::"
    "'sha256:zz",  # ...the rest of the digest and the rule
]


def test_github_annotations_over_a_broken_repo(broken: Path, validate: Callable[..., Run],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WORKSPACE", str(broken.parent))
    run = validate("--format", "github", str(broken))
    assert run.code == 1
    assert run.lines[:4] == GOLDEN_GITHUB[:4]
    assert run.lines[4].startswith(GOLDEN_GITHUB[4])
    assert len(run.lines) == 5
    assert run.err.strip() == "invalid: 5 problems in 10 files"


def test_github_paths_without_a_workspace_join_the_validated_path(
        broken: Path, validate: Callable[..., Run], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    monkeypatch.chdir(broken.parent)
    run = validate("--format", "github", "repo")
    assert [line.split(",")[0] for line in run.lines] == [
        "::error file=repo/grants/odd%2Cna%3Ame%25.yaml"] * 2 + [
        "::error file=repo/services/a.yaml"] * 2 + ["::error file=repo/services/search.yaml"]
    # Every annotated file exists where the annotation says, from the workspace.
    for line in run.lines:
        shown = line.split(",")[0].removeprefix("::error file=")
        real = shown.replace("%2C", ",").replace("%3A", ":").replace("%25", "%")
        assert (broken.parent / real).is_file()


def test_a_repo_outside_the_workspace_keeps_its_path(broken: Path, tmp_path: Path,
                                                      validate: Callable[..., Run],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "elsewhere"
    workspace.mkdir()
    monkeypatch.setenv("GITHUB_WORKSPACE", str(workspace))
    run = validate("--format", "github", str(broken))
    assert run.lines[2].startswith(f"::error file={broken.as_posix()}/services/a.yaml,line=1,")


def test_a_valid_repo_prints_no_annotation(repo: Path, validate: Callable[..., Run]) -> None:
    run = validate("--format", "github", str(repo))
    assert run.code == 0
    assert run.lines == ["valid: 5 services, 2 grants, 2 routes, 1 settings in 8 files"]
    sarif = validate("--format", "sarif", str(repo))
    assert sarif.code == 0
    log = json.loads(sarif.out)
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []


def test_a_missing_repo_is_one_annotation_on_its_path(tmp_path: Path,
                                                      validate: Callable[..., Run],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    run = validate("--format", "github", str(tmp_path / "nope"))
    assert run.code == 1
    assert run.lines == ["::error file=nope::does not exist"]


# --- escaping -------------------------------------------------------------------------

def test_workflow_command_escaping() -> None:
    assert escape_data("100% a:b,c\r\nd") == "100%25 a:b,c%0D%0Ad"
    assert escape_property("100% a:b,c\r\nd") == "100%25 a%3Ab%2Cc%0D%0Ad"
    # % first: an already-encoded sequence in the data is not decoded by GitHub.
    assert escape_data("%0A") == "%250A"


def test_a_message_cannot_end_the_command_or_start_another() -> None:
    evil = "x\n::stop-commands::tok\n::add-mask::secret\r\x1b[31mred\u202egnp.exe"
    line = github_annotation(Diagnostic(
        "services/a.yaml", 3, 4, "egress[0].host\n::warning::", evil))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "\u202e" not in line
    assert line == (
        "::error file=services/a.yaml,line=3,col=4,title=egress[0].host%0A%3A%3Awarning%3A%3A"
        "::x%0A::stop-commands::tok%0A::add-mask::secret%0D\\x1b[31mred\\u202egnp.exe")


def test_annotations_leave_out_what_a_diagnostic_has_not() -> None:
    assert github_annotation(Diagnostic("x.yaml", NO_POSITION, NO_POSITION, "", "m")) == \
        "::error file=x.yaml::m"
    assert github_annotation(Diagnostic("x.yaml", 2, NO_POSITION, "", "m")) == \
        "::error file=x.yaml,line=2::m"


def test_artifact_paths() -> None:
    def at(path: str, line: int = 1) -> Diagnostic:
        return Diagnostic(path, line, 1 if line else 0, "", "m")

    assert artifact_path(at("services/a.yaml"), root="ds", base="ds") == "ds/services/a.yaml"
    assert artifact_path(at("a.yaml"), root="./ds/", base="ds") == "ds/a.yaml"
    assert artifact_path(at("a.yaml")) == "a.yaml"
    # A repo-level problem carries the repo path as given: it names the repo itself.
    assert artifact_path(at("/abs/ds", 0), root="/abs/ds", base="ds") == "ds"
    assert artifact_path(at(".", 0), root=".", base="ds") == "ds"


def test_long_messages_are_bounded_after_escaping_once() -> None:
    line = escape_data("%" * 5000)
    assert line.startswith("%25%25") and line.endswith("…(+4000 chars)")
    assert len(line) == 3 * 1000 + len("…(+4000 chars)")


# --- SARIF ----------------------------------------------------------------------------

_LOCATION = {
    "type": "object",
    "required": ["physicalLocation"],
    "properties": {"physicalLocation": {
        "type": "object",
        "required": ["artifactLocation"],
        "properties": {
            "artifactLocation": {
                "type": "object",
                "required": ["uri", "uriBaseId"],
                "properties": {
                    # A relative reference: no scheme, no leading "/", nothing unencoded.
                    "uri": {"type": "string", "pattern": r"^(?![A-Za-z][A-Za-z0-9+.-]*:)"
                            r"(?!/)[A-Za-z0-9\-._~/%]+$"},
                    "uriBaseId": {"const": "%SRCROOT%"},
                },
            },
            "region": {
                "type": "object",
                "required": ["startLine"],
                "properties": {"startLine": {"type": "integer", "minimum": 1},
                               "startColumn": {"type": "integer", "minimum": 1}},
                "additionalProperties": False,
            },
        },
    }},
}

#: The parts of SARIF 2.1.0 (OASIS standard, sections 3.13-3.30) this log must get right.
SARIF_STRUCTURE: dict[str, Any] = {
    "type": "object",
    "required": ["version", "$schema", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "runs": {"type": "array", "minItems": 1, "maxItems": 1, "items": {
            "type": "object",
            "required": ["tool", "results"],
            "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                    "type": "object",
                    "required": ["name", "version", "rules"],
                    "properties": {
                        "name": {"const": "reconcile"},
                        "version": {"type": "string", "minLength": 1},
                        "rules": {"type": "array", "uniqueItems": True, "items": {
                            "type": "object",
                            "required": ["id", "shortDescription"],
                            "properties": {
                                "id": {"type": "string", "minLength": 1},
                                "shortDescription": {
                                    "type": "object", "required": ["text"],
                                    "properties": {"text": {"type": "string"}}},
                                "defaultConfiguration": {"type": "object", "properties": {
                                    "level": {"enum": ["none", "note", "warning", "error"]}}},
                            },
                        }},
                    },
                }}},
                "columnKind": {"enum": ["utf16CodeUnits", "unicodeCodePoints"]},
                "results": {"type": "array", "items": {
                    "type": "object",
                    "required": ["ruleId", "ruleIndex", "level", "message", "locations"],
                    "properties": {
                        "ruleId": {"type": "string"},
                        "ruleIndex": {"type": "integer", "minimum": 0},
                        "level": {"const": "error"},
                        "message": {"type": "object", "required": ["text"],
                                    "properties": {"text": {"type": "string",
                                                            "minLength": 1}}},
                        "locations": {"type": "array", "minItems": 1, "items": _LOCATION},
                    },
                }},
            },
        }},
    },
}


def _check(log: dict[str, Any]) -> None:
    jsonschema.validate(log, SARIF_STRUCTURE)
    official = os.environ.get("RECONCILE_SARIF_SCHEMA")
    if official:
        schema = json.loads(Path(official).read_text())
        jsonschema.Draft4Validator(schema).validate(log)


def _sarif(run: Run) -> dict[str, Any]:
    log: dict[str, Any] = json.loads(run.out)
    _check(log)
    return log


def test_sarif_over_a_broken_repo(broken: Path, validate: Callable[..., Run],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WORKSPACE", str(broken.parent))
    run = validate("--format", "sarif", str(broken))
    assert run.code == 1
    assert run.err == ""
    log = _sarif(run)
    (sarif_run,) = log["runs"]
    driver = sarif_run["tool"]["driver"]
    assert driver["version"] == __version__
    rules = [rule["id"] for rule in driver["rules"]]
    assert rules == ["services[].capabilities[]", "services[].we%ird:key,x", "apiVersion",
                     "kind", "release.digest"]
    results = sarif_run["results"]
    assert [(r["ruleId"], rules[r["ruleIndex"]]) for r in results] == [(r, r) for r in rules]
    where = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
              r["locations"][0]["physicalLocation"]["region"]) for r in results]
    assert where == [
        ("repo/grants/odd%2Cna%3Ame%25.yaml", {"startLine": 6, "startColumn": 20}),
        ("repo/grants/odd%2Cna%3Ame%25.yaml", {"startLine": 7, "startColumn": 5}),
        ("repo/services/a.yaml", {"startLine": 1, "startColumn": 1}),
        ("repo/services/a.yaml", {"startLine": 1, "startColumn": 7}),
        ("repo/services/search.yaml", {"startLine": 11, "startColumn": 11}),
    ]
    assert results[3]["message"]["text"] == \
        "unknown kind 'Nope'; expected one of Settings, Service, Grant, Hold, Route, Verification"
    assert results[1]["properties"] == {"field": "services[0].we%ird:key,x"}


def test_sarif_rules_are_one_per_kind_and_results_point_at_them() -> None:
    log = sarif_log([
        Diagnostic("a.yaml", 3, 3, "egress[0].host", "bad host"),
        Diagnostic("a.yaml", 4, 3, "egress[1].host", "bad host"),
        Diagnostic("b.yaml", 1, 1, "", "not YAML"),
        Diagnostic("/r", NO_POSITION, NO_POSITION, "", "no Settings document"),
    ], version="9.9.9", root="/r", base="ds")
    (run,) = log["runs"]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["egress[].host", "document"]
    assert [r["ruleIndex"] for r in run["results"]] == [0, 0, 1, 1]
    repo_level = run["results"][3]["locations"][0]["physicalLocation"]
    assert repo_level == {"artifactLocation": {"uri": "ds", "uriBaseId": "%SRCROOT%"}}
    _check(log)


def test_sarif_strings_carry_no_control_character() -> None:
    log = sarif_log([Diagnostic("a b#\x1b.yaml", 1, 1, "k\u202e", "m\x1b]8;;http://x\x07\n")],
                    version="1")
    _check(log)
    text = json.dumps(log, ensure_ascii=False)
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202e]", text)
    (result,) = log["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        "a%20b%23%1B.yaml"
    assert result["message"]["text"] == "m\\x1b]8;;http://x\\x07\\x0a"
    assert uri("dir/ü.yaml") == "dir/%C3%BC.yaml"
