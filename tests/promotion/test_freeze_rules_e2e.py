"""Freezes and rules at their edges, against two sandboxes: a far-future freeze and an
open-ended one (``freeze`` without ``--until``) hold prod in ``validate``, ``status`` and
``plan`` without a traceback until ``unfreeze``; a freeze that has ended is a validate
warning; a runaway CEL rule is ``policy_denied … budget exceeded`` in ``plan --env prod``
within a measured bound, never a hang."""

from __future__ import annotations

import json
import time

import pytest

from reconciler.exitcodes import Exit
from tests.promotion.pipeline_repo import NEW, OLD, PipelineRepo
from tests.promotion.test_rule_check import nested
from tests.promotion.test_soak_e2e import blockers, plan_json

pytestmark = pytest.mark.integration


def _no_traceback(*outputs: str) -> None:
    for text in outputs:
        assert "Traceback" not in text and "OverflowError" not in text, text


def _status_says_frozen(repo: PipelineRepo, until: str) -> None:
    """``status`` weighs promoting staging's release into prod (prod pins the older one,
    for this look only) and says the freeze, without a traceback."""
    repo.pin("prod", OLD, "v2.3.0")
    status = repo.run("status", str(repo.path), "--env", "prod")
    _no_traceback(status.out, status.err)
    assert status.code == Exit.OK, status.out + status.err
    assert "frozen" in status.out and until in status.out, status.out
    repo.pin("prod", NEW, "v2.4.0")


def _holds_then_unfreeze(repo: PipelineRepo, status_says: str, blocker_says: str) -> None:
    """The freeze on prod is valid, ``status`` names it, the prod plan is NO-GO with one
    ``frozen`` blocker saying how long, and ``unfreeze`` removes it."""
    valid = repo.run("validate", str(repo.path))
    assert valid.code == Exit.OK, valid.out + valid.err
    _status_says_frozen(repo, status_says)
    code, plan = plan_json(repo, "prod")
    assert code == Exit.CHANGES_NO_GO
    [frozen] = blockers(plan, "frozen")
    assert blocker_says in str(frozen["message"])
    assert repo.run("unfreeze", str(repo.path), "--env", "prod").code == Exit.OK


def test_far_future_and_open_ended_freezes_hold_without_a_crash(
        soaked: PipelineRepo) -> None:
    # an allow window that is always open makes every reader look a year past the end
    soaked.write_pipeline(windows=[{"kind": "allow", "name": "always", "schedule":
                                    "0 * * * *", "duration": "61m", "timezone": "UTC"}])
    soaked.commit("an allow window, always open")
    far = soaked.run("freeze", str(soaked.path), "--env", "prod", "--reason", "year end",
                     "--until", "9999-12-31T23:59:59Z", "--name", "far")
    assert far.code == Exit.OK, far.err
    _holds_then_unfreeze(soaked, "9999-12-31", "until 9999-12-31 23:59:59Z")

    lifted = soaked.run("freeze", str(soaked.path), "--env", "prod", "--reason",
                        "incident 4713")
    assert lifted.code == Exit.OK, lifted.err
    assert "until `reconcile unfreeze`" in lifted.out
    assert "until" not in (soaked.path / "freezes" / "prod.yaml").read_text()
    _holds_then_unfreeze(soaked, "lifted", "until it is lifted")
    code, _ = plan_json(soaked, "prod")
    assert code == Exit.CHANGES


def test_a_freeze_that_has_ended_is_a_validate_warning(soaked: PipelineRepo) -> None:
    (soaked.path / "freezes").mkdir()
    (soaked.path / "freezes" / "old.yaml").write_text(
        'apiVersion: reconcile/v1\nkind: Freeze\nreason: "old"\n'
        'until: "2020-01-01T00:00:00Z"\nenvironments: [prod]\n')
    soaked.commit("an old freeze")
    valid = soaked.run("validate", str(soaked.path))
    assert valid.code == Exit.OK, valid.out + valid.err
    assert "freezes/old.yaml:4:8: warning: until: this freeze ended" in valid.out, valid.out
    assert "(1 warning)" in valid.out
    as_json = json.loads(soaked.run("validate", str(soaked.path), "--format", "json").out)
    assert [d["severity"] for d in as_json["diagnostics"]] == ["warning"]


def test_a_runaway_rule_is_denied_in_plan_in_bounded_time(soaked: PipelineRepo) -> None:
    (soaked.path / "policies").mkdir()
    (soaked.path / "policies" / "runaway.yaml").write_text(
        "apiVersion: reconcile/v1\nkind: Policy\nname: runaway\nenvironments: [prod]\n"
        f"rules:\n  - name: nine-deep\n    expression: {json.dumps(nested(9, 'all'))}\n"
        "    message: never finishes\n")
    soaked.commit("a runaway rule")
    refused = soaked.run("validate", str(soaked.path))
    assert refused.code == Exit.ERROR and "budget exceeded" in refused.out, refused.out
    start = time.monotonic()
    code, plan = plan_json(soaked, "prod")
    took = time.monotonic() - start
    assert code == Exit.CHANGES_NO_GO
    [denied] = blockers(plan, "policy_denied")
    assert 'rule "nine-deep"' in str(denied["message"])
    assert "could not be evaluated (budget exceeded" in str(denied["message"])
    assert took < 30, took  # the whole plan, processes and sandboxes included
    # staging has no such policy: it plans as before
    code, _ = plan_json(soaked, "staging")
    assert code in (Exit.OK, Exit.CHANGES)
