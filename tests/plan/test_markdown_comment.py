"""The PR comment, rebuilt for reviewers: what it says first, and that every part is sound.

Every rendering here is parsed with markdown-it-py (GFM-like: tables, raw HTML, linkify
on, as GitHub renders a comment) and checked part by part: ``<details>`` balanced and
never closed before it opens, every table row with its header's column count, no link
and no ``@mention`` outside code, at most ``budget`` characters.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from benchmarks.comment_bench import fleet_plan
from reconciler.core.desired import DesiredState, Service
from reconciler.core.live import ObservationKind
from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Plan
from reconciler.core.review import review
from reconciler.render import jsonplan, markdown, text
from tests.plan import builders as b
from tests.plan.test_output_safety import _RAW_CONTROL, HOSTILE, _taint

markdown_it = pytest.importorskip("markdown_it")
pytest.importorskip("linkify_it")


# -- well-formedness -------------------------------------------------------------------


def _outside_code(html: str) -> str:
    return re.sub(r"<code>.*?</code>", "", html, flags=re.S)


def assert_sound(part: str, budget: int = markdown.BUDGET) -> str:
    """One part as GitHub would render it; fails on anything that would render broken."""
    assert len(part) <= budget, len(part)
    parser = markdown_it.MarkdownIt("gfm-like")
    depth = 0
    for line in part.splitlines():  # the renderer's own tags start their lines
        depth += line.startswith("<details>") - (line == "</details>")
        assert depth >= 0, f"</details> before its <details>: {line!r}"
    assert depth == 0, "a <details> left open"
    tokens = parser.parse(part)
    columns: int | None = None
    cells = 0
    for token in tokens:
        if token.type == "table_open":
            columns = None
        elif token.type in ("th_open", "td_open"):
            cells += 1
        elif token.type == "tr_open":
            cells = 0
        elif token.type == "tr_close":
            if columns is None:
                columns = cells
            assert cells == columns, f"a row of {cells} cells under a header of {columns}"
    html = parser.renderer.render(tokens, parser.options, {})
    assert html.count("<details>") == html.count("</details>") == part.count("<details>")
    prose = _outside_code(html)
    assert not re.search(r"<(a|img)\b", html), "a link or an image"
    assert not re.search(r"\b(href|src)=", prose), "a link or an image"
    assert not re.search(r"@\w", prose), "a mention outside code"
    assert not re.search(r"(?<![\w&])#\d", prose), "an issue reference outside code"
    return html


def first_line(md: str) -> str:
    return md.splitlines()[0]


# -- plans -----------------------------------------------------------------------------


def _reference() -> Plan:
    return plan(b.reference_desired(), b.reference_live(), Provenance(commit="1" * 40))


def _unreachable() -> Plan:
    """sn2 at 127.0.0.3 refuses connections: one root cause blocking every service."""
    live = b.sn2_down_live()
    return plan(b.reference_desired(), live, Provenance(commit="2" * 40))


def _with(desired: DesiredState, **docs: dict[str, Any]) -> DesiredState:
    services = tuple(Service.model_validate(docs[s.name]) if s.name in docs else s
                     for s in desired.services)
    return desired.model_copy(update={"services": services})


def _reviewed(base: DesiredState, head: DesiredState) -> Plan:
    live = b.reference_live()
    base_plan, head_plan = plan(base, live), plan(head, live)
    made = review(base_ref="main", base_commit="b" * 40, head_commit="c" * 40,
                  base_plan=base_plan, head_plan=head_plan, base=base, head=head)
    return head_plan.model_copy(update={"review": made})


STEADY_CHECKOUT = b.service_doc("checkout", "v2.3.0", [{"host": "api.stripe.com"}])


# -- the first line --------------------------------------------------------------------


def test_go_says_what_the_plan_does_in_words() -> None:
    p = _reference()
    two = p.model_copy(update={"changes": tuple(
        c for c in p.changes if (c.action.value, c.service) in {("promote", "checkout"),
                                                                 ("set_egress", "search")})})
    md = markdown.render(two)
    assert first_line(md) == ("## reconcile plan: **GO** — promotes `checkout` `v2.3.0` → "
                              "`v2.4.0` on `sn1`–`sn3`; revokes all 2 egress destinations of "
                              "`search` ⚠️")
    assert_sound(md)


def test_many_changes_are_named_by_kind_then_counted() -> None:
    md = markdown.render(_reference())
    assert first_line(md) == (
        "## reconcile plan: **GO** — promotes `checkout`; rolls back `catalog` ⚠️; changes "
        "the egress of `checkout`, `search` (1 revoking ⚠️); changes the grants on `search` "
        "(1 removing capabilities ⚠️)")
    assert_sound(md)


def test_no_go_leads_with_its_root_cause() -> None:
    md = markdown.render(_unreachable())
    assert first_line(md).startswith(
        "## reconcile plan: **NO-GO** — cluster `sn2` unreachable, blocking 4 services · "
        "planned: promotes `checkout`")
    assert_sound(md)


def test_no_changes_says_so_in_one_line() -> None:
    converged = _with(b.reference_desired(), checkout=STEADY_CHECKOUT,
                      catalog=b.service_doc("catalog", "v5.1.0"),
                      search=b.service_doc("search", "v1.9.2"))
    p = plan(converged, b.reference_live())
    p = p.model_copy(update={"changes": tuple(c for c in p.changes
                                              if c.action.value != "set_grant")})
    md = markdown.render(p)
    assert first_line(md) == ("## reconcile plan: **no changes** — nothing to change: every "
                              "service is proven converged on every expected cluster")
    assert "- Nothing to apply." in md
    assert_sound(md)


def test_a_review_leads_with_what_the_pr_introduces_only() -> None:
    base = _with(b.reference_desired(), checkout=STEADY_CHECKOUT)
    p = _reviewed(base, b.reference_desired())
    md = markdown.render(p)
    assert first_line(md) == (
        "## reconcile plan: **GO** — this PR promotes `checkout` `v2.3.0` → `v2.4.0` on "
        "`sn1`–`sn3`; opens egress to `hooks.slack.com:443` for `checkout`")
    assert "commits `bbbbbbbbbbbb`..`cccccccccccc` (base `main`)" in md
    sections = re.split(r"^### ", md, flags=re.M)
    titles = [s.splitlines()[0] for s in sections[1:]]
    assert titles == ["This PR", "⚠️ Destructive changes", "Apply", "Introduced by this PR",
                      "Already pending on the base", "Not touched by this PR"]
    introduced = sections[titles.index("Introduced by this PR") + 1]
    assert "**🔁 `checkout`**" in introduced and "`search`" not in introduced
    pending = sections[titles.index("Already pending on the base") + 1]
    assert pending.count("\n- 🔁 ") == 2  # catalog and search, one line each
    untouched = sections[titles.index("Not touched by this PR") + 1]
    assert "- ✅ `notifications` — 3/3 clusters run `sha256:" in untouched
    assert "the 2 introduced by this PR and the 3 already pending on the base" in md
    assert_sound(md)


def test_a_pr_that_changes_nothing_managed_says_so() -> None:
    p = _reviewed(b.reference_desired(), b.reference_desired())
    md = markdown.render(p)
    assert first_line(md) == ("## reconcile plan: **GO** — this PR changes nothing reconcile "
                              "manages (5 changes already pending on the base)")
    assert "Introduced by this PR" not in md
    assert_sound(md)


def test_a_review_lists_removed_changes_and_blockers_introduced_and_cleared() -> None:
    base = b.reference_desired()
    head = _with(base, checkout=STEADY_CHECKOUT)  # undoes the base's pending promotion
    live = b.reference_live()
    obs = tuple(o.model_copy(update={"kind": ObservationKind.SILENT, "runtime": None,
                                     "reason": "timed out"}) if o.cluster_id == "sn3" else o
                for o in live.observations["catalog"])
    live = live.model_copy(update={"observations": {**live.observations, "catalog": obs}})
    base_plan, head_plan = plan(base, live), plan(head, live)
    made = review(base_ref="main", base_commit="b" * 40, head_commit="c" * 40,
                  base_plan=base_plan, head_plan=head_plan, base=base, head=head)
    p = head_plan.model_copy(update={"review": made})
    md = markdown.render(p)
    assert "### Removed by this PR" in md
    assert "- ↩️ **promote** `checkout` — `promote checkout to v2.4.0" in md
    assert "**Blocked, not touched by this PR**" not in md  # a heading, not bold text
    assert "### Blocked, not touched by this PR" in md and "**❌ `catalog`**" in md
    assert_sound(md)


# -- root causes, destructive changes, apply -------------------------------------------


def test_a_down_cluster_is_said_once_with_its_address_why_and_what_it_blocks() -> None:
    md = markdown.render(_unreachable())
    why = md.split("### ❌ Why NO-GO", 1)[1].split("\n### ", 1)[0]
    assert "**cluster `sn2` unreachable** — `cluster sn2 gave no evidence: no address " \
        "answered as it (127.0.0.3: health: connection refused)" in why
    assert "blocks 4 services: `catalog`, `checkout`, `notifications`, `search`" in why
    assert md.count("no address answered as it (127.0.0.3") == 1  # the root cause, once
    assert md.count("- ⛔ blocked by cluster `sn2` unreachable (root cause, above)") == 4
    assert "cluster_silent" not in md
    assert "refuses a NO-GO plan" in md
    assert_sound(md)


def test_destructive_changes_are_flagged_and_promotions_are_not() -> None:
    desired = _with(b.reference_desired(), search=b.service_doc(
        "search", "v1.9.2", [{"host": "api.openai.com"}]))  # revokes one, keeps one
    md = markdown.render(plan(desired, b.reference_live()))
    top = md.split("### ⚠️ Destructive changes", 1)[1].split("\n### ", 1)[0]
    assert "- ⚠️ `search` — revokes egress to `es.example.net:9200`" in top
    assert "- ⚠️ `search` — `deploy-bot` loses `deployment:promote-route`" in top
    assert "- ⚠️ `catalog` — rolls back `v5.1.0` → `v5.0.1`" in top
    assert "checkout" not in top
    ref = markdown.render(_reference())
    assert "revokes every egress destination (`api.openai.com:443`, `es.example.net:9200`)" \
        in ref
    assert ref.count("⚠️ **destructive:**") == 3  # in the sections, too
    assert "**🔁 `checkout`** · 2 changes\n" in ref  # a promotion is not destructive


def test_the_apply_command_names_the_saved_file_and_its_digest() -> None:
    p = _reference()
    digest = jsonplan.to_wire(p)["content_digest"]
    md = markdown.render(p, plan_file="out/plan.json")
    assert "- Apply exactly this plan: `reconcile apply out/plan.json`" in md
    assert f"digest `{digest}`" in md
    quoted = markdown.render(p, plan_file="my plans/p.json", content_digest="sha256:abc")
    assert "`reconcile apply 'my plans/p.json'`" in quoted and "`sha256:abc`" in quoted
    unsaved = markdown.render(p)
    assert ("Save it with `reconcile plan --out plan.json`, then apply it with "
            "`reconcile apply plan.json`") in unsaved
    assert "digest" not in unsaved.split("### Apply", 1)[1].split("\n### ", 1)[0]


def test_the_control_plane_is_shown_by_host_only() -> None:
    p = _reference().model_copy(update={
        "control_plane_url": "https://user:secret@cp.example.net:8443/api/v1?token=x"})
    md = markdown.render(p)
    assert "control plane `cp.example.net:8443`" in md
    assert "secret" not in md and "token" not in md and "/api/v1" not in md


# -- hostile strings, in every part ----------------------------------------------------


def test_hostile_strings_stay_inert_in_a_review_split_into_parts() -> None:
    base = _with(b.reference_desired(), checkout=STEADY_CHECKOUT)
    hostile = _taint(_reviewed(base, b.reference_desired()))
    assert isinstance(hostile, Plan) and hostile.review is not None
    hostile = hostile.model_copy(update={"review": hostile.review.model_copy(
        update={"base_ref": "main" + HOSTILE})})
    parts = markdown.render_parts(hostile, budget=markdown.MIN_BUDGET,
                                  plan_file="plan.json @team #1 https://evil.example/x")
    assert len(parts) > 1
    for part in parts:
        html = assert_sound(part, markdown.MIN_BUDGET)
        assert "evil.example" not in _outside_code(html)


# -- parts -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet() -> Plan:
    return fleet_plan(10_000)


@pytest.mark.scale  # minutes of CPU: make test runs it, make check leaves it out
def test_a_10000_service_plan_splits_into_sound_parts_dropping_nothing(fleet: Plan) -> None:
    parts = markdown.render_parts(fleet, content_digest="sha256:0")
    assert len(parts) > 1
    total = str(len(parts))
    for number, part in enumerate(parts, start=1):
        assert len(part) <= 65_536
        assert f"part {number}/{total}" in first_line(part)
        assert_sound(part)
    assert first_line(parts[0]).startswith("## reconcile plan: **GO** — promotes 10,000 "
                                           "services")
    assert first_line(parts[1]).startswith(f"## reconcile plan · part 2/{total}: **GO**")
    assert parts[-1].rstrip().endswith("</sub>") and "_Continued in part" not in parts[-1]
    seen = Counter(n for p in parts for n in set(re.findall(r"`(f\d{4})`", p)))
    assert set(seen) == {f"f{i:04d}" for i in range(10_000)}
    assert set(seen.values()) == {1}  # each service in exactly one part
    # ``render`` is part 1 with an honest note on the rest.
    single = markdown.render(fleet, content_digest="sha256:0")
    assert len(single) <= markdown.BUDGET
    assert single.startswith(parts[0].split("_Continued in part")[0])
    shown = len(re.findall(r"^\*\*🔁 ", parts[0], flags=re.M))
    assert (f"**Truncated:** {10_000 - shown:,} of 10,000 service section(s) left out"
            in single)
    assert_sound(single)


def test_a_section_larger_than_a_part_splits_between_rows_with_the_header_again() -> None:
    p = _reference()
    ev = next(e for e in p.evidence if e.service == "checkout")
    row = ev.observations[0]
    clusters = tuple(f"c{i:03d}" for i in range(400))
    big = ev.model_copy(update={"expected_clusters": clusters, "observations": tuple(
        row.model_copy(update={"cluster_id": c}) for c in clusters)})
    p = p.model_copy(update={"evidence": tuple(big if e.service == "checkout" else e
                                               for e in p.evidence)})
    parts = markdown.render_parts(p, budget=markdown.MIN_BUDGET)
    assert len(parts) > 2
    rows = Counter(c for part in parts for c in re.findall(r"^\| `(c\d{3})` \|", part,
                                                           flags=re.M))
    assert set(rows) == set(clusters) and set(rows.values()) == {1}
    continued = [part for part in parts[1:] if "**🔁 `checkout`** (continued)" in part]
    assert continued
    for part in continued:
        assert "<details><summary>Evidence: 400/400 clusters answered (continued)</summary>" \
            in part
        assert "| cluster | address | status |" in part
    for part in parts:
        assert_sound(part, markdown.MIN_BUDGET)


def test_an_entry_no_part_can_hold_is_replaced_by_an_honest_note() -> None:
    section = markdown._Section("Services", "**x**\n\n", [markdown._Seg(
        ["- small\n", "- " + "y" * 5_000 + "\n", "- after\n"])])
    parts = markdown._pack([section], 3_000, 3_000)
    text = "".join(c for part in parts for c in part.chunks)
    assert "y" * 100 not in text
    assert "an entry of 5,003 characters is too large for one comment part" in text
    assert "- small\n" in text and "- after\n" in text


def test_a_budget_too_small_for_any_part_is_refused() -> None:
    with pytest.raises(ValueError):
        markdown.render_parts(_reference(), budget=1_000)


def test_hostile_strings_stay_inert_in_a_modified_change() -> None:
    """What a modified change says (hosts, digests, tags, users from the plan) is embedded
    as code spans in the first line, the This PR list and the service section."""
    def checkout(*hosts: str) -> dict[str, Any]:
        return b.service_doc("checkout", "v2.4.0",
                             [{"host": h} for h in ("api.stripe.com", *hosts)])
    base = _with(b.reference_desired(), checkout=checkout("api.paypal.com"))
    hostile = _taint(_reviewed(base, _with(b.reference_desired(), checkout=checkout(
        "api.paypal.com", "api.sendgrid.com"))))
    assert isinstance(hostile, Plan) and hostile.review is not None
    assert hostile.review.modified and HOSTILE in hostile.review.modified[0].service
    hostile = hostile.model_copy(update={"review": hostile.review.model_copy(update={
        "origins": {k + HOSTILE: o for k, o in hostile.review.origins.items()}})})
    md = markdown.render(hostile)
    html = assert_sound(md)
    assert "evil.example" not in _outside_code(html)
    assert "\x1b" not in md and "modified by this PR" in md
    for part in markdown.render_parts(hostile, budget=markdown.MIN_BUDGET):
        assert_sound(part, markdown.MIN_BUDGET)
    shown = text.render(hostile)
    assert "this PR: adds " in shown and not _RAW_CONTROL.search(shown)
