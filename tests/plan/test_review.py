"""``plan --base``: the head's plan against the base's over ONE snapshot, classified.

In-process over the reference world (every change kind, every origin: introduced,
modified, already pending, removed), properties of the classification (hypothesis), then
end to end over a temp git repo with a base and a head commit against the sandbox.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.desired import DesiredState, Service
from reconciler.core.live import LiveService, LiveSnapshot
from reconciler.core.names import Capability
from reconciler.core.planning import plan
from reconciler.core.plans import Action, Plan, Verdict
from reconciler.core.review import Origin, review, target_of
from reconciler.exitcodes import Exit
from reconciler.render import jsonplan, markdown, text
from tests.e2e_repo import Repo
from tests.plan import test_greenfield_plan as gf
from tests.plan.builders import (
    reference_desired,
    reference_live,
    release,
    service_doc,
)

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "plan.schema.json").read_text())


def _with(desired: DesiredState, **docs: dict[str, Any]) -> DesiredState:
    services = tuple(Service.model_validate(docs[s.name]) if s.name in docs else s
                     for s in desired.services)
    return desired.model_copy(update={"services": services})


def _review(base: DesiredState, head: DesiredState,
            live: LiveSnapshot | None = None) -> tuple[Plan, Plan]:
    live = live or reference_live()
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


# -- modified: the same target, pending on the base, changed by the PR -----------------


def _checkout(*hosts: str, tag: str = "v2.4.0") -> dict[str, Any]:
    return service_doc("checkout", tag, [{"host": h} for h in ("api.stripe.com", *hosts)])


def _live_with(name: str, tag: str, live: LiveSnapshot | None = None) -> LiveSnapshot:
    """The reference snapshot with one more observed (never accepted) release of ``name``."""
    live = live or reference_live()
    svc = live.services[f"svc-{name}"]
    assert isinstance(svc, LiveService)
    svc = svc.model_copy(update={"releases": (*svc.releases, release(name, tag, 300, None))})
    return live.model_copy(update={"services": {**live.services, f"svc-{name}": svc}})


def _base_keys(base_plan: Plan, head_plan: Plan) -> dict[str, str]:
    """Every base change's fate: already_pending, modified or removed (exactly one)."""
    assert head_plan.review is not None
    review_ = head_plan.review
    fate: dict[str, str] = {}
    head_keys = {c.idempotency_key for c in head_plan.changes}
    for change in base_plan.changes:
        key = change.idempotency_key
        said = [name for name, yes in (
            ("already_pending", key in head_keys),
            ("modified", key in {m.base_idempotency_key for m in review_.modified}),
            ("removed", key in {r.idempotency_key for r in review_.removed})) if yes]
        assert len(said) == 1, (change.summary, said)
        fate[key] = said[0]
    return fate


def test_an_egress_edit_of_a_pending_change_is_one_modified_change_nothing_removed() -> None:
    # Live checkout opens api.stripe.com; the base has +api.paypal.com pending; the PR
    # adds api.sendgrid.com to the same list.
    base = _with(reference_desired(), checkout=_checkout("api.paypal.com"))
    head = _with(reference_desired(), checkout=_checkout("api.paypal.com", "api.sendgrid.com"))
    base_plan, head_plan = _review(base, head)
    made = head_plan.review
    assert made is not None and made.removed == ()
    origins = _origins(head_plan)
    assert origins[("set_egress", "checkout")] is Origin.MODIFIED
    assert origins[("promote", "checkout")] is Origin.PENDING
    assert [o for o in origins.values() if o is not Origin.PENDING] == [Origin.MODIFIED]
    (m,) = made.modified
    hosts = lambda rules: [f"{r.host}:{r.port}" for r in rules]  # noqa: E731
    assert (m.target, m.service) == ("egress", "checkout")
    assert hosts(m.egress_added_vs_base) == ["api.sendgrid.com:443"]
    assert hosts(m.egress_dropped_vs_base) == []
    assert hosts(m.egress_pending_on_base) == ["api.paypal.com:443"]
    assert hosts(m.egress_added_vs_live) == ["api.paypal.com:443", "api.sendgrid.com:443"]
    assert set(_base_keys(base_plan, head_plan).values()) == {"already_pending", "modified"}
    sentence = "adds api.sendgrid.com:443 to checkout's egress (api.paypal.com:443 already pending)"
    shown = text.render(head_plan)
    assert f"modifies 1 change(s) pending on the base: {sentence}" in shown
    assert "[modified by this PR" in shown and "removes" not in shown
    assert "vs the base's pending change: added api.sendgrid.com:443; dropped nothing" in shown
    md = markdown.render(head_plan)
    assert md.splitlines()[0] == (
        "## reconcile plan: **GO** — this PR adds `api.sendgrid.com:443` to `checkout`'s "
        "egress (`api.paypal.com:443` already pending)")
    assert "Removed by this PR" not in md and "### Modified by this PR" in md
    assert "- ✏️ adds `api.sendgrid.com:443` to `checkout`'s egress" in md
    data = json.loads(jsonplan.dumps(head_plan))
    jsonschema.validate(data, SCHEMA)
    assert data["review"]["origins"][m.idempotency_key] == "modified"
    assert data["review"]["modified"][0]["egress_added_vs_base"] == [
        {"host": "api.sendgrid.com", "port": 443}]
    assert jsonplan.from_wire(data) == head_plan


def test_dropping_part_of_a_pending_egress_change_is_modified_and_says_what_is_withdrawn() -> None:
    base = _with(reference_desired(), checkout=_checkout("api.paypal.com", "api.sendgrid.com"))
    head = _with(reference_desired(), checkout=service_doc("checkout", "v2.4.0", [
        {"host": "api.paypal.com"}]))  # keeps paypal, withdraws sendgrid, revokes stripe
    _, head_plan = _review(base, head)
    assert head_plan.review is not None and head_plan.review.removed == ()
    (m,) = head_plan.review.modified
    assert {(r.host, r.port) for r in m.egress_dropped_vs_base} == {
        ("api.sendgrid.com", 443), ("api.stripe.com", 443)}
    assert m.egress_added_vs_base == ()
    md = markdown.render(head_plan)
    assert ("no longer opens `api.sendgrid.com:443` for `checkout`; revokes "
            "`api.stripe.com:443` from `checkout`'s egress ⚠️ (`api.paypal.com:443` already "
            "pending)") in md.splitlines()[0]
    assert "- ⚠️ `checkout` — revokes egress to `api.stripe.com:443` · _modified by this PR" \
        in md


def test_reverting_the_bases_pending_change_entirely_is_removed_not_modified() -> None:
    base = _with(reference_desired(), checkout=_checkout("api.paypal.com"))
    head = _with(reference_desired(), checkout=_checkout())  # egress as live: no change
    base_plan, head_plan = _review(base, head)
    assert head_plan.review is not None and head_plan.review.modified == ()
    assert [(r.action, r.service) for r in head_plan.review.removed] == [
        ("set_egress", "checkout")]
    assert "modified" not in set(_base_keys(base_plan, head_plan).values())
    md = markdown.render(head_plan)
    assert "drops 1 change pending on the base" in md.splitlines()[0]
    assert "- ↩️ **set egress** `checkout` — `checkout: egress opens api.paypal.com:443`" in md


def test_a_new_digest_for_a_pending_promotion_is_a_modified_release() -> None:
    live = _live_with("checkout", "v2.5.0")
    base = _with(reference_desired(), checkout=_checkout())  # promote to v2.4.0 pending
    head = _with(reference_desired(), checkout=_checkout(tag="v2.5.0"))
    base_plan, head_plan = _review(base, head, live)
    assert head_plan.review is not None and head_plan.review.removed == ()
    assert _origins(head_plan)[("promote", "checkout")] is Origin.MODIFIED
    (m,) = head_plan.review.modified
    assert (m.target, m.base_action, m.action) == ("release", "promote", "promote")
    assert m.release_base is not None and m.release_head is not None
    assert (m.release_base.tags, m.release_head.tags) == (("v2.4.0",), ("v2.5.0",))
    pinned = {c.service: c for c in base_plan.changes}["checkout"]
    assert pinned.release_after is not None
    assert m.release_base.digest == pinned.release_after.digest != m.release_head.digest
    sentence = "promotes checkout to v2.5.0 instead of v2.4.0 (pending on the base)"
    assert sentence in text.render(head_plan)
    md = markdown.render(head_plan)
    assert "this PR promotes `checkout` to `v2.5.0` instead of `v2.4.0` (pending on the base)" \
        in md.splitlines()[0]
    assert f"↳ _release:_ base promote `{m.release_base.digest[:19]}` (`v2.4.0`) → this PR " \
        f"promote `{m.release_head.digest[:19]}` (`v2.5.0`)" in md


def test_a_grant_edit_of_a_pending_grant_is_modified_with_the_capabilities_it_moves() -> None:
    def search_caps(caps: tuple[str, ...]) -> DesiredState:
        base = reference_desired()
        return base.model_copy(update={"grants": tuple(g.model_copy(update={"services": tuple(
            s.model_copy(update={"capabilities": tuple(Capability(c) for c in caps)})
            if s.service == "search" else s
            for s in g.services)}) for g in base.grants)})
    # live: preflight + promote-route; base: preflight only (drops promote-route, pending)
    base = search_caps(("deployment:preflight",))
    head = search_caps(("deployment:preflight", "deployment:rollback-route"))
    _, head_plan = _review(base, head)
    assert _origins(head_plan)[("set_grant", "search")] is Origin.MODIFIED
    assert head_plan.review is not None
    (m,) = head_plan.review.modified
    assert (m.target, m.user_id) == ("grant", "deploy-bot")
    assert m.capabilities_added_vs_base == ("deployment:rollback-route",)
    assert m.capabilities_dropped_vs_base == ()
    assert "adds deployment:rollback-route in deploy-bot's grant on search (pending on the " \
        "base)" in text.render(head_plan)


def test_a_changed_creation_pending_on_the_base_is_modified_with_the_fields_that_differ() -> None:
    base = gf.desired_with(gf.ledger_doc(create={"namespace": "ledger"}))
    head = gf.desired_with(gf.ledger_doc(create={"namespace": "ledger-2"}))
    base_plan, head_plan = gf.planned(base), gf.planned(head)
    made = review(base_ref="main", base_commit="b" * 40, head_commit="h" * 40,
                  base_plan=base_plan, head_plan=head_plan, base=base, head=head)
    shown = head_plan.model_copy(update={"review": made})
    (m,) = made.modified
    assert (m.target, m.service) == ("create", "ledger") and made.removed == ()
    assert [(f.field, f.base, f.head) for f in m.fields] == [("namespace", "ledger", "ledger-2")]
    assert "changes `ledger`'s pending creation: namespace `ledger` → `ledger-2`" in \
        markdown.render(shown).splitlines()[0]
    jsonschema.validate(json.loads(jsonplan.dumps(shown)), SCHEMA)


# -- properties: four origins, a partition -------------------------------------------

_HOSTS = ("api.stripe.com", "api.paypal.com", "api.sendgrid.com", "hooks.slack.com")
_egress = st.lists(st.sampled_from(_HOSTS), unique=True, max_size=4)
_tags = st.sampled_from(["v2.3.0", "v2.4.0", "v2.5.0"])
#: catalog runs v5.1.0: v5.0.1 is a rollback, v5.2.0 a promotion
_catalog_tags = st.sampled_from(["v5.0.1", "v5.1.0", "v5.2.0"])
_LIVE = _live_with("catalog", "v5.2.0", _live_with("checkout", "v2.5.0"))
_caps = st.sets(st.sampled_from(["deployment:preflight", "deployment:promote-route",
                                 "deployment:rollback-route"]))


def _side(hosts: list[str], tag: str, caps: set[str], catalog: str) -> DesiredState:
    desired = _with(reference_desired(), checkout=service_doc(
        "checkout", tag, [{"host": h} for h in hosts]), catalog=service_doc("catalog", catalog))
    return desired.model_copy(update={"grants": tuple(g.model_copy(update={"services": tuple(
        s.model_copy(update={"capabilities": tuple(Capability(c) for c in sorted(caps))})
        if s.service == "search"
        else s for s in g.services)}) for g in desired.grants)})


@settings(max_examples=60, deadline=None)
@given(base_hosts=_egress, head_hosts=_egress, base_tag=_tags, head_tag=_tags,
       base_caps=_caps, head_caps=_caps, base_catalog=_catalog_tags,
       head_catalog=_catalog_tags)
def test_every_change_has_exactly_one_origin_and_modified_means_same_target(
        base_hosts: list[str], head_hosts: list[str], base_tag: str, head_tag: str,
        base_caps: set[str], head_caps: set[str], base_catalog: str,
        head_catalog: str) -> None:
    base = _side(base_hosts, base_tag, base_caps, base_catalog)
    head = _side(head_hosts, head_tag, head_caps, head_catalog)
    base_plan, head_plan = _review(base, head, _LIVE)
    made = head_plan.review
    assert made is not None
    # every head change: exactly one of introduced / modified / already pending
    assert set(made.origins) == {c.idempotency_key for c in head_plan.changes}
    assert Origin.REMOVED not in made.origins.values()
    # every base change: exactly one of already pending / modified / removed
    _base_keys(base_plan, head_plan)
    base_targets = {target_of(c): c for c in base_plan.changes}
    head_targets = {target_of(c): c for c in head_plan.changes}
    for change in head_plan.changes:
        origin = made.origin(change.idempotency_key)
        other = base_targets.get(target_of(change))
        if origin is Origin.INTRODUCED:
            assert other is None
        elif origin is Origin.PENDING:
            assert other is not None and other.idempotency_key == change.idempotency_key
        else:
            assert other is not None and other.idempotency_key != change.idempotency_key
    for removed in made.removed:  # removed: the head no longer changes that target at all
        gone = next(c for c in base_plan.changes if c.idempotency_key == removed.idempotency_key)
        assert target_of(gone) not in head_targets
    for m in made.modified:
        now = next(c for c in head_plan.changes if c.idempotency_key == m.idempotency_key)
        before = base_targets[target_of(now)]
        assert before.idempotency_key == m.base_idempotency_key
        if m.target == "egress":  # the base's list, edited by the PR, is the head's
            edited = ({(r.host, r.port) for r in before.egress_after or ()}
                      - {(r.host, r.port) for r in m.egress_dropped_vs_base}) \
                | {(r.host, r.port) for r in m.egress_added_vs_base}
            assert edited == {(r.host, r.port) for r in now.egress_after or ()}
            assert m.egress_added_vs_base or m.egress_dropped_vs_base
        if m.target == "grant":
            edited_caps = (set(before.capabilities_after or ())
                           - set(m.capabilities_dropped_vs_base)) \
                | set(m.capabilities_added_vs_base)
            assert edited_caps == set(now.capabilities_after or ())
        if m.target == "release":
            assert m.release_base is not None and m.release_head is not None
            assert m.release_base.digest != m.release_head.digest
            assert (m.base_action, m.action) == (before.action.value, now.action.value)
            said = markdown.render(head_plan)
            assert ("rolls `catalog` back to" if now.action is Action.ROLLBACK
                    else f"promotes `{now.service}` to") in said
    # the comment's first line says "drops" a pending change only for a removed one
    md_first = markdown.render(head_plan).splitlines()[0]
    dropped = re.search(r"drops ([\d,]+) changes? pending on the base", md_first)
    assert (int(dropped.group(1)) if dropped else 0) == len(made.removed)


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


def _egress(repo: Repo, *hosts: str) -> None:
    """Rewrite checkout's egress list (the document's last block) to ``hosts``."""
    path = repo.path / "services" / "checkout.yaml"
    head = path.read_text().split("egress:\n", 1)[0]
    path.write_text(head + "egress:\n" + "".join(f"  - host: {h}\n" for h in hosts))


def _plan_base(repo: Repo, base: str, name: str) -> tuple[dict[str, Any], str, str]:
    """``plan --base`` three ways: the JSON plan, the text, the Markdown's first line."""
    out = repo.path.parent / f"{name}.json"
    result = repo.run("plan", str(repo.path), "--base", base, "--out", str(out))
    assert result.code == Exit.OK, result.out + result.err
    md = repo.run("show", str(out), "--format", "markdown")
    assert md.code == Exit.OK, md.err
    return json.loads(out.read_text()), result.out, md.out.splitlines()[0]


@pytest.mark.integration
def test_plan_base_over_the_sandbox_modified_then_reverted_then_a_new_digest(
        repo: Repo) -> None:
    # The base: checkout's egress gains api.paypal.com (live: api.stripe.com only).
    _egress(repo, "api.stripe.com", "api.paypal.com")
    repo.commit("checkout: paypal")
    base = _git(repo.path, "rev-parse", "HEAD")
    # The PR adds api.sendgrid.com to the same list.
    _egress(repo, "api.stripe.com", "api.paypal.com", "api.sendgrid.com")
    repo.commit("checkout: sendgrid")
    data, shown, first = _plan_base(repo, base, "modified")
    assert data["format_version"] == jsonplan.FORMAT_VERSION
    jsonschema.validate(data, SCHEMA)
    review_ = data["review"]
    assert review_["removed"] == []
    assert [(m["target"], m["service"]) for m in review_["modified"]] == [("egress", "checkout")]
    origins = {(c["actions"][0], c["service"]): review_["origins"][c["idempotency_key"]]
               for c in data["changes"]}
    assert origins.pop(("set_egress", "checkout")) == "modified"
    assert set(origins.values()) == {"already_pending"}
    sentence = ("adds api.sendgrid.com:443 to checkout's egress (api.paypal.com:443 already "
                "pending)")
    assert sentence in shown and "removes" not in shown
    assert first.endswith("— this PR adds `api.sendgrid.com:443` to `checkout`'s egress "
                          "(`api.paypal.com:443` already pending)"), first

    # The PR reverts the base's pending change entirely: egress as live, nothing to change.
    _egress(repo, "api.stripe.com")
    repo.commit("checkout: egress as it was")
    data, shown, first = _plan_base(repo, base, "reverted")
    assert data["review"]["modified"] == []
    assert [(r["action"], r["service"]) for r in data["review"]["removed"]] == [
        ("set_egress", "checkout")]
    assert "- removes  checkout: egress opens api.paypal.com:443" in shown
    assert "drops 1 change pending on the base" in first

    # A pending promotion (v2.4.0 on the base) re-pinned by the PR to a newer digest.
    digest = repo.sandbox.push("checkout", "v2.5.0")
    _egress(repo, "api.stripe.com", "api.paypal.com")
    path = repo.path / "services" / "checkout.yaml"
    path.write_text(re.sub(r"digest: sha256:[0-9a-f]{64}", f"digest: {digest}",
                           path.read_text()).replace("tag: v2.4.0", "tag: v2.5.0"))
    repo.commit("checkout: v2.5.0")
    data, shown, first = _plan_base(repo, base, "release")
    review_ = data["review"]
    assert review_["removed"] == []
    (m,) = review_["modified"]
    assert (m["target"], m["base_action"], m["action"]) == ("release", "promote", "promote")
    assert (m["release_base"]["tags"], m["release_head"]) == (
        ["v2.4.0"], {"digest": digest, "tags": ["v2.5.0"]})
    assert m["release_base"]["digest"] != digest
    assert "promotes checkout to v2.5.0 instead of v2.4.0 (pending on the base)" in shown
    assert "this PR promotes `checkout` to `v2.5.0` instead of `v2.4.0` (pending on the base)" \
        in first
