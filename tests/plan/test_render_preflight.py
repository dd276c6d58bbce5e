"""A creation and its preflight report in every renderer (issue 12, item 2).

Plans are built in-process: the reference repo plus ``ledger`` (a greenfield service
with complete evidence), the control plane's preflight answer handed over as the engine
would (``tests.plan.test_greenfield_plan.planned``). The report's strings come from the
live side, so each renderer must show them -- upstream codes verbatim -- and keep them
inert: no escape sequence for a terminal, no link, mention or tag for GitHub.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reconciler.core.plans import Action, Plan
from reconciler.core.review import review
from reconciler.render import common, jsonplan, markdown, text
from tests.plan.test_greenfield_plan import desired_with, ledger_doc, planned
from tests.plan.test_output_safety import (
    HOSTILE,
    _assert_no_raw_controls,
    _markdown_it,
    _outside_code,
    _taint,
)

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "plan.schema.json").read_text())
COLLISION = {"code": "NAMESPACE_COLLISION", "message": "namespace ledger belongs to svc-books"}
#: Every code the sandbox can say at once, and one this version does not know.
MANY = [{"code": c, "message": f"the control plane says {c.lower()} ({i})"} for i, c in
        enumerate(["AUTHORIZATION_MISSING", "SOURCE_WORKTREE_DIRTY", "VERSION_COLLISION",
                   "NAMESPACE_COLLISION", "NAMESPACE_NOT_PROVEN_BLANK", "OCI_INDEX_NOT_FOUND",
                   "OCI_PLATFORM_MANIFEST_MISSING", "RELEASE_EVIDENCE_MISSING",
                   "RELEASE_EVIDENCE_INVALID", "RELEASE_NOT_AUTHORIZED",
                   "A_CODE_FROM_A_NEWER_CONTROL_PLANE"])]


def _hostile(p: Plan) -> Plan:
    """Every string of ``p`` with HOSTILE appended, but for each preflight's ``purpose``
    (a closed vocabulary: a saved plan with another value does not load)."""
    tainted: Plan = _taint(p)
    return tainted.model_copy(update={"preflights": tuple(
        t.model_copy(update={"purpose": o.purpose})
        for t, o in zip(tainted.preflights, p.preflights, strict=True))})


def _section(out: str, name: str) -> str:
    """The text renderer's block for one service (its header to the next blank line)."""
    start = out.index(f"● {name}\n")
    return out[start:out.index("\n\n", start)]


def _md_section(md: str, name: str) -> str:
    start = md.index(f"`{name}`** ·")
    end = md.find("\n**", start + 1)
    return md[start:end if end != -1 else len(md)]


def _html(md: str) -> str:
    return str(_markdown_it().MarkdownIt("gfm-like").render(md))


# -- terminal -----------------------------------------------------------------------------


def test_a_go_create_reads_like_a_promotion_with_its_report_under_it() -> None:
    p = planned()
    assert p.verdict.value == "go"
    block = _section(text.render(p), "ledger")
    lines = block.splitlines()
    digest = next(c for c in p.changes if c.action is Action.CREATE).release_after
    assert digest is not None and digest.digest is not None
    assert lines[1] == f"  + create  ledger → {digest.digest[:19]}… (v1.0.0)"
    assert "      preflight: GO — the control plane's report says GO · generated " \
        "2026-09-21 14:13:20Z" in lines
    facts = {line.split()[0]: line for line in lines if line.startswith("        ")
             and not line.startswith("         ")}
    assert facts.keys() >= {"source", "authorization", "platforms", "namespace", "version",
                            "execution"}
    assert "cccccccccccc clean ✓" in facts["source"]
    assert "✓ deployment:preflight · ✓ deployment:create-greenfield" in facts["authorization"]
    assert "linux/amd64 runnable ✓ manifest ✓ · linux/arm64 runnable ✓ manifest ✓" \
        in facts["platforms"]
    assert "ledger: reserved ✓ · blank ✓ · no collision ✓" in facts["namespace"]
    assert "createGreenfieldDeployment offered ✓" in facts["execution"]
    assert "✗" not in block
    assert text.render(p).rstrip().splitlines()[-1].startswith("Plan: 1 to create, ")


def test_a_no_go_report_names_each_upstream_code_where_blockers_are() -> None:
    p = planned(blockers=MANY, create_granted=False)
    assert p.verdict.value == "no_go"
    block = _section(text.render(p), "ledger")
    assert "preflight: NO-GO — the control plane's report says NO-GO (11 blocker(s), below)" \
        in block
    assert "✗ deployment:create-greenfield" in block
    shown = [line for line in block.splitlines() if line.startswith("  ✗ ")]
    for item in MANY:  # verbatim code, then the message without the repeated lead
        assert f"  ✗ {item['code']}  {item['message']} (the control plane's preflight)  " \
            "[preflight_no_go]" in shown
    # The blockers come after the change and its report, as every service's blockers do.
    assert block.index("planned against:") < block.index("  ✗ AUTHORIZATION_MISSING")


def test_what_stops_a_creation_before_any_report_is_said_honestly() -> None:
    # Not sent: the repo's own checks failed (a dirty worktree, no evidence).
    doc = ledger_doc()
    doc["release"]["evidence"] = []
    local = _section(text.render(planned(desired_with(doc))), "ledger")
    assert "preflight: NO-GO — not sent: the repo's own checks failed first" in local
    assert "  ✗ RELEASE_EVIDENCE_MISSING  " in local
    # The control plane does not offer the creation request at all.
    missing = _section(text.render(planned(execution=False)), "ledger")
    assert "preflight: GO — the control plane's report says GO; reconcile blocks it" not in \
        missing  # the line says NO-GO: reconcile's word is the decision
    assert "preflight: NO-GO — the control plane's report says GO; reconcile blocks it" \
        in missing
    assert "createGreenfieldDeployment not offered ✗" in missing
    assert "  ✗ GREENFIELD_EXECUTION_UNAVAILABLE  " in missing
    # A reply that is not a report (it says it changed something).
    invalid = _section(text.render(planned(mutationPerformed=True)), "ledger")
    assert "preflight: NO-GO — the preflight reply is not a valid report: " \
        "report.mutationPerformed is true" in invalid
    assert "  ✗ preflight_report_invalid  " in invalid
    # The call failed.
    failed = _section(text.render(planned(error="connection reset")), "ledger")
    assert "the preflight call failed: connection reset" in failed


def test_a_promotion_under_the_evidence_policy_shows_its_local_check() -> None:
    p = planned(desired_with(releaseEvidence="every-promotion"))
    block = _section(text.render(p), "checkout")
    assert "      release evidence: NO-GO — checked locally against the pinned digest" in block
    assert "  ✗ RELEASE_EVIDENCE_MISSING  " in block and "[release_evidence_required]" in block


def test_hostile_report_strings_reach_the_terminal_inert() -> None:
    clean = planned(blockers=[COLLISION])
    hostile = _hostile(clean)
    assert any(HOSTILE in b.message for b in hostile.blockers)  # the test's premise
    out = text.render(hostile)
    _assert_no_raw_controls(out)
    assert "\\x1b]8;;" in out and "\\u202e" in out  # shown, not acted on
    assert len(out.splitlines()) == len(text.render(clean).splitlines())  # none forged
    coloured = text.render(hostile, color=True)
    assert not re.findall(r"\x1b(?!\[[0-9;]*m)", coloured)


# -- Markdown -----------------------------------------------------------------------------


def test_the_comment_has_a_create_row_and_a_collapsed_report() -> None:
    md = markdown.render(planned())
    assert md.startswith("## reconcile plan: **GO** — creates `ledger`")
    assert "**Plan:** 1 create · 1 promote" in md
    section = _md_section(md, "ledger")
    assert "- ➕ **create** — `ledger` → `sha256:" in section
    assert "<details><summary>Preflight report: GO · 2 platforms</summary>" in section
    assert "- ✅ **authorization:** ✓ `deployment:preflight` · ✓ " \
        "`deployment:create-greenfield`" in section
    assert "- ✅ **namespace:** `ledger`: reserved ✓ · blank ✓ · no collision ✓" in section
    html = _html(md)
    assert html.count("<details>") == html.count("</details>") == md.count("<details>")


def test_a_no_go_comment_leads_with_the_upstream_codes_in_code_spans() -> None:
    md = markdown.render(planned(blockers=MANY))
    assert md.startswith("## reconcile plan: **NO-GO** — `AUTHORIZATION_MISSING` on `ledger`")
    why = md[md.index("### ❌ Why NO-GO"):md.index("### ", md.index("### ❌ Why NO-GO") + 4)]
    for item in MANY:
        assert f"- ❌ `{item['code']}` on `ledger`: `{item['message']} (the control " \
            "plane's preflight)`" in why
    section = _md_section(md, "ledger")
    assert "<summary>Preflight report: NO-GO · 11 blockers · 2 platforms</summary>" in section
    details = section[section.index("<summary>Preflight report"):]
    for item in MANY:  # the report as the control plane said it
        assert f"- ❌ `{item['code']}` `{item['message']}` · _the control plane's_" in details
    assert "- ❌ **namespace:** `ledger`: reserved ✓ · blank ✓ · collision ✗" in details


def test_hostile_report_strings_stay_inert_on_github() -> None:
    evil_code = {"code": "X`](http://evil.example/c) @org/team <b>", "message": HOSTILE}
    hostile = _hostile(planned(blockers=[COLLISION, evil_code]))
    md = markdown.render(hostile)
    _assert_no_raw_controls(md)
    html = _html(md)
    assert not re.search(r"<(a|img)\b|<[^>]*\b(href|src)=", html)
    tags = set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", html))
    assert tags <= {"h2", "h3", "p", "strong", "em", "ul", "li", "code", "table", "thead",
                    "tbody", "tr", "th", "td", "details", "summary", "sub", "br",
                    "blockquote"}, tags
    prose = _outside_code(html)
    for live_text in ("@org/team", "@someone", "#123", "evil.example", "forged", "RED"):
        assert live_text not in prose, live_text
    assert "evil.example" in html  # shown, inside code
    assert html.count("<details>") == html.count("</details>") == md.count("<details>")


def test_a_report_too_long_for_one_comment_splits_between_entries() -> None:
    long = [{"code": f"OCI_PLATFORM_MANIFEST_MISSING_{i}", "message": "m" * 250 + f" {i}"}
            for i in range(120)]
    p = planned(blockers=long)
    parts = markdown.render_parts(p, budget=markdown.MIN_BUDGET)
    assert len(parts) > 2
    assert all(len(part) <= markdown.MIN_BUDGET for part in parts)
    whole = "".join(parts)
    for item in long:  # nothing dropped: each blocker in the root causes and the report
        assert whole.count(f"`{item['code']}`") >= 2, item["code"]
    for part in parts:  # each part valid on its own
        html = _html(part)
        assert html.count("<details>") == html.count("</details>") == part.count("<details>")


def test_a_review_tells_one_preflight_blocker_from_another() -> None:
    base = planned(blockers=[{"code": "RELEASE_EVIDENCE_MISSING", "message": "no sbom"}])
    head = planned(blockers=[COLLISION])
    desired = desired_with()
    found = review(base_ref="main", base_commit="a" * 40, head_commit="b" * 40,
                   base_plan=base, head_plan=head, base=desired, head=desired)
    assert [r.upstream_code for r in found.blockers_introduced] == ["NAMESPACE_COLLISION"]
    assert [r.upstream_code for r in found.blockers_cleared] == ["RELEASE_EVIDENCE_MISSING"]
    shown = head.model_copy(update={"review": found})
    assert "✗ new blocker NAMESPACE_COLLISION" in text.render(shown)
    md = markdown.render(shown)
    assert "- ❌ adds blocker `NAMESPACE_COLLISION`" in md
    assert "- ✅ clears blocker `RELEASE_EVIDENCE_MISSING`" in md


# -- the JSON plan -----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["go", "no_go", "not_sent"])
def test_the_json_plan_carries_the_report_and_reads_back_the_same(case: str) -> None:
    doc = ledger_doc(create={"namespace": "ledger"})
    if case == "not_sent":
        doc["release"]["evidence"] = []
    p = planned(desired_with(doc), blockers=MANY if case == "no_go" else None)
    data = json.loads(jsonplan.dumps(p))
    assert data["format_version"] == jsonplan.FORMAT_VERSION == "2.4"
    jsonschema.validate(data, SCHEMA)
    assert data["counts"]["create"] == 1
    (pre,) = [x for x in data["preflights"] if x["service"] == "ledger"]
    if case == "not_sent":
        assert pre["status"] == "not_sent" and pre["report"] is None
        assert {b["code"] for b in pre["local_blockers"]} >= {"RELEASE_EVIDENCE_MISSING"}
    else:
        report = pre["report"]
        assert report["decision"] == ("GO" if case == "go" else "NO-GO")
        assert [p_["manifest_present"] for p_ in report["platforms"]] == [True, True]
        assert report["namespace_reserved"] is True and report["namespace_blank"] is True
        if case == "no_go":
            assert [b["code"] for b in report["blockers"]] == [m["code"] for m in MANY]
            assert {b["upstream_code"] for b in data["blockers"]} >= {m["code"] for m in MANY}
    assert jsonplan.from_wire(data) == p
    assert jsonplan.dumps(jsonplan.from_wire(json.loads(jsonplan.dumps(p)))) == jsonplan.dumps(p)


def _edit(data: dict[str, Any], path: list[str | int], value: object) -> dict[str, Any]:
    copy = json.loads(json.dumps(data))
    target: Any = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


@pytest.mark.parametrize("path", [
    ["fence", "source_revision"], ["fence", "oci_index_digest"],
    ["fence", "configuration_digest"], ["fence", "target_namespace"], ["fence", "version"],
    ["preflight", "proposedNamespace"]])
def test_a_saved_creation_binds_its_fence_and_request(path: list[str | int]) -> None:
    p = planned()
    data = json.loads(jsonplan.dumps(p))
    index = next(i for i, c in enumerate(data["changes"]) if c["actions"] == ["create"])
    assert data["changes"][index]["creation"]["fence"] is not None
    edited = _edit(data, ["changes", index, "creation", *path], "sha256:" + "0" * 64)
    with pytest.raises(jsonplan.DigestMismatch):
        jsonplan.from_wire(edited)


@pytest.mark.parametrize("path", [["report", "decision"], ["status"], ["blocked"],
                                  ["report", "namespace_blank"]])
def test_a_saved_report_cannot_be_edited_to_go(path: list[str | int]) -> None:
    p = planned(blockers=[COLLISION])
    data = json.loads(jsonplan.dumps(p))
    index = next(i for i, x in enumerate(data["preflights"]) if x["service"] == "ledger")
    edited = _edit(data, ["preflights", index, *path],
                   {"decision": "GO", "status": "go", "blocked": False}.get(str(path[-1]), False))
    with pytest.raises(jsonplan.DigestMismatch):
        jsonplan.from_wire(edited)


def test_a_2_1_reader_would_not_half_read_a_create() -> None:
    # A plan with a create is a 2.2 document; the same reconcile still reads 2.1 ones
    # (no preflights, no create), minor versions being additive.
    p = planned()
    data = json.loads(jsonplan.dumps(p))
    assert data["format_version"] == jsonplan.FORMAT_VERSION
    plain = planned(desired_with()).model_copy(update={
        "changes": tuple(c for c in p.changes if c.action is not Action.CREATE),
        "preflights": (), "blockers": ()})
    old = {k: v for k, v in json.loads(jsonplan.dumps(plain)).items() if k != "content_digest"}
    old["format_version"] = "2.1"
    old["counts"] = {k: v for k, v in old["counts"].items() if k != "create"}
    old["content_digest"] = jsonplan.content_digest(old)
    read: Plan = jsonplan.from_wire(old)
    assert read.preflights == () and not any(c.action is Action.CREATE for c in read.changes)


def test_blocker_text_cuts_only_the_lead_it_repeats() -> None:
    p = planned(blockers=[COLLISION])
    (blocker,) = [b for b in p.blockers if b.service == "ledger"]
    assert common.blocker_code(blocker) == "NAMESPACE_COLLISION"
    assert common.blocker_text(blocker) == "namespace ledger belongs to svc-books (the " \
        "control plane's preflight)"
    other = blocker.model_copy(update={"message": "something else entirely"})
    assert common.blocker_text(other) == "something else entirely"


# -- the apply view -----------------------------------------------------------------------


def test_apply_progress_names_what_a_creation_brings_into_being() -> None:
    from reconciler.core.events import PostApply
    from reconciler.core.outcomes import ChangeResult, Outcome
    from reconciler.render import applyview

    change = next(c for c in planned().changes if c.action is Action.CREATE)
    assert change.creation is not None
    done = applyview.text(PostApply(result=ChangeResult(
        change=change, outcome=Outcome.APPLIED, detail="operation op-1 reserved")))
    assert done == [f"  ✓ create ledger → {change.creation.digest[:19]}… (v1.0.0) "
                    "(operation op-1 reserved)"]
    refused = applyview.text(PostApply(result=ChangeResult(
        change=change, outcome=Outcome.REFUSED, code="PREFLIGHT_NO_GO",
        detail="PREFLIGHT_NO_GO: NAMESPACE_COLLISION" + HOSTILE)))
    (line,) = refused
    assert line.startswith("  ✗ create ledger → ") and ": refused: PREFLIGHT_NO_GO: " in line
    _assert_no_raw_controls(line)
    record = json.loads(applyview.json_line(PostApply(result=ChangeResult(
        change=change, outcome=Outcome.APPLIED, detail="operation op-1 reserved"))))
    assert record["action"] == "create" and record["service"] == "ledger"
