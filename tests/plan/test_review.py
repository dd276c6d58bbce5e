"""``plan --base``: the head's plan against the base's over ONE snapshot, classified.

In-process over the reference world (every change kind), then end to end over a temp git
repo with a base and a head commit against the sandbox.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from reconciler.core.desired import DesiredState, Service
from reconciler.core.planning import plan
from reconciler.core.plans import Action, Plan, Verdict
from reconciler.core.review import Origin, review
from reconciler.exitcodes import Exit
from reconciler.render import jsonplan, text
from tests.e2e_repo import Repo
from tests.plan.builders import reference_desired, reference_live, service_doc


def _with(desired: DesiredState, **docs: dict[str, Any]) -> DesiredState:
    services = tuple(Service.model_validate(docs[s.name]) if s.name in docs else s
                     for s in desired.services)
    return desired.model_copy(update={"services": services})


def _review(base: DesiredState, head: DesiredState) -> tuple[Plan, Plan]:
    live = reference_live()
    base_plan, head_plan = plan(base, live), plan(head, live)
    made = review(base_ref="main", base_commit="b" * 40, head_commit="h" * 40,
                  base_plan=base_plan, head_plan=head_plan, base=base, head=head)
    return base_plan, head_plan.model_copy(update={"review": made})


def _origins(p: Plan) -> dict[tuple[str, str], Origin]:
    assert p.review is not None
    return {(c.action.value, c.service): p.review.origin(c.idempotency_key) for c in p.changes}


# The reference world: checkout v2.3.0 → pinned v2.4.0 (promote), catalog v5.1.0 → pinned
# v5.0.1 (rollback), egress of checkout and search, a grant of search.
STEADY = {
    "checkout": service_doc("checkout", "v2.3.0", [{"host": "api.stripe.com"}]),
    "catalog": service_doc("catalog", "v5.1.0"),
}


def test_a_pr_that_changes_nothing_managed_says_so_and_keeps_everything_pending() -> None:
    base = reference_desired()
    _, head = _review(base, base)
    assert head.review is not None and head.review.changes_nothing_managed
    assert set(_origins(head).values()) == {Origin.PENDING}
    shown = text.render(head)
    assert "changes nothing reconcile manages" in shown
    assert "not touched by this PR" in shown


@pytest.mark.parametrize(("service", "action"), [("checkout", Action.PROMOTE),
                                                  ("catalog", Action.ROLLBACK)])
def test_a_release_change_the_pr_makes_is_introduced(service: str, action: Action) -> None:
    base = _with(reference_desired(), **{service: STEADY[service]})
    head = reference_desired()
    _, head_plan = _review(base, head)
    origins = _origins(head_plan)
    assert origins[(action.value, service)] is Origin.INTRODUCED
    assert origins[("set_egress", "search")] is Origin.PENDING
    assert head_plan.review is not None and service in head_plan.review.touched
    assert "[introduced by this PR]" in text.render(head_plan)


def test_an_egress_edit_is_introduced_and_an_undone_pin_is_removed() -> None:
    base = reference_desired()
    head = _with(base, checkout=STEADY["checkout"], notifications=service_doc(
        "notifications", "v0.8.0", [{"host": "smtp.mailgun.org", "port": 587},
                                    {"host": "api.example.org"}]))
    _, head_plan = _review(base, head)
    assert _origins(head_plan)[("set_egress", "notifications")] is Origin.INTRODUCED
    assert head_plan.review is not None
    removed = {(r.action, r.service) for r in head_plan.review.removed}
    assert removed == {("promote", "checkout"), ("set_egress", "checkout")}
    assert "removes" in text.render(head_plan)


def test_a_grant_edit_is_introduced() -> None:
    base = reference_desired()
    grants = tuple(g.model_copy(update={"services": tuple(
        s.model_copy(update={"capabilities": ()}) if s.service == "catalog" else s
        for s in g.services)}) for g in base.grants)
    head = base.model_copy(update={"grants": grants})
    _, head_plan = _review(base, head)
    assert _origins(head_plan)[("set_grant", "catalog")] is Origin.INTRODUCED
    assert head_plan.review is not None and "catalog" in head_plan.review.touched


def test_base_no_go_head_go_and_the_reverse() -> None:
    broken = _with(reference_desired(), checkout=service_doc(
        "checkout", "v9.9.9", [{"host": "api.stripe.com"}, {"host": "hooks.slack.com"}]))
    good = reference_desired()
    base_plan, fixed = _review(broken, good)
    assert base_plan.verdict is Verdict.NO_GO and fixed.verdict is Verdict.GO
    assert fixed.review is not None and fixed.review.base_verdict == "no_go"
    assert {b.code for b in fixed.review.blockers_cleared} == {"release_not_observed"}
    assert "verdict: base no_go → head go" in text.render(fixed)
    _, breaks = _review(good, broken)
    assert breaks.verdict is Verdict.NO_GO and breaks.review is not None
    assert {b.code for b in breaks.review.blockers_introduced} == {"release_not_observed"}


def test_the_review_survives_the_saved_plan_round_trip() -> None:
    _, head_plan = _review(_with(reference_desired(), checkout=STEADY["checkout"]),
                           reference_desired())
    assert jsonplan.from_wire(json.loads(jsonplan.dumps(head_plan))) == head_plan


def _git(path: Any, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), "-c", "user.email=ci@example.net",
                           "-c", "user.name=ci", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.integration
def test_plan_base_end_to_end_over_a_base_and_a_head_commit(repo: Repo) -> None:
    base = _git(repo.path, "rev-parse", "HEAD")
    search = repo.path / "services" / "notifications.yaml"
    search.write_text(search.read_text().replace("port: 587", "port: 2525"))
    repo.commit("notifications: submission port")
    out = repo.path.parent / "pr.json"
    result = repo.run("plan", str(repo.path), "--base", base, "--out", str(out),
                      "--detailed-exitcode")
    assert result.code == Exit.CHANGES, result.out + result.err
    data = json.loads(out.read_text())
    assert data["format_version"] == jsonplan.FORMAT_VERSION
    origins = {(c["actions"][0], c["service"]): data["review"]["origins"][c["idempotency_key"]]
               for c in data["changes"]}
    assert origins[("set_egress", "notifications")] == "introduced"
    assert {o for k, o in origins.items() if k[1] != "notifications"} == {"already_pending"}
    assert data["review"]["touched"] == ["notifications"]
    assert "This PR (" in result.out and "introduces 1 change(s)" in result.out
    missing = repo.run("plan", str(repo.path), "--base", "no-such-ref")
    assert missing.code == Exit.ERROR and "no-such-ref" in missing.err
    assert "Traceback" not in missing.err
