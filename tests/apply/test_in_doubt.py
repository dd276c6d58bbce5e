"""A write whose answer never came is *in doubt*, not failed (issue 18, item 8).

The sandbox's ``slow-reply`` fault commits the promotion, then answers after the client's
call deadline: apply reports "in doubt — a rerun replays key …" (exit 17, the outcome
``in_doubt`` in the JSON events and the journal), and a rerun converges without a second
rollout. (A write that never left, or was answered, stays "failed":
``tests/live/test_in_doubt_client.py``.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo

pytestmark = pytest.mark.integration

PROMOTE = "promoteServiceImageRelease"


def with_call_timeout(repo: Repo, seconds: float) -> None:
    path = repo.path / "settings.yaml"
    settings = json.loads(path.read_text())
    settings["controlPlane"]["timeoutSeconds"] = seconds
    path.write_text(json.dumps(settings, indent=2) + "\n")
    repo.commit("a short control-plane deadline")


def committed_promotions(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [a for a in sandbox.audit() if a["method"] == PROMOTE and a["result"] == "ok"]


def test_a_committed_write_whose_answer_timed_out_is_in_doubt_and_a_rerun_converges(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox)
    with_call_timeout(repo, 1.5)
    sandbox.fault("control-plane", "slow-reply", method=PROMOTE, ms=4000, times=1)
    first = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    said = first.out + first.err
    assert first.code == Exit.APPLY_FAILED, said
    assert "in doubt — a rerun replays key" in said, said
    assert "failed:" not in said and "✗ promote" not in said, said
    # The control plane did commit it: exactly one promotion, under the key apply names.
    promoted = committed_promotions(sandbox)
    assert len(promoted) == 1
    key = promoted[0]["idempotencyKey"]
    assert key in said
    journal = [json.loads(x) for x in (repo.state / "journal.jsonl").read_text().splitlines()]
    assert [e["outcome"] for e in journal
            if e["event"] == "result" and e["action"] == "promote"] == ["in_doubt"]
    history = repo.run("history", str(repo.path))
    assert "IN DOUBT" in history.out, history.out + history.err

    rerun = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert rerun.code == Exit.OK, rerun.out + rerun.err
    # Converged with no second rollout: anything sent again carried the same key.
    again = committed_promotions(sandbox)
    assert {a["idempotencyKey"] for a in again} == {key}
    assert len([a for a in again if a.get("result") == "ok"]) <= 2

