"""The executor and the journal, over an in-process control plane (httpx.MockTransport).

The end-to-end cases run against the sandbox (test_apply_e2e.py); these pin the
per-change outcomes that are hard to stage there: a compare-and-swap lost to a different
change, the same change made by someone else, a write whose fate is unknown.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.core.events import Event
from reconciler.core.outcomes import Outcome
from reconciler.core.planning import plan
from reconciler.core.plans import Action, Change
from reconciler.core.staleness import Check, Freshness
from reconciler.render import applyview
from reconciler.shell import applying
from reconciler.shell.controlplane import ControlPlaneClient
from reconciler.shell.journal import Journal, JournalError
from tests.live.fakes import FakeControlPlane, connection
from tests.plan import builders as b


class Lines:
    """Collects apply's typed events, and the text view's lines of them."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lines: list[str] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.lines.extend(applyview.text(event))


def raw_service(name: str, tag: str, generation: int) -> dict[str, Any]:
    return {"id": f"svc-{name}", "data": {
        "name": name, "egressRevision": 1,
        "imageDeployment": {"rolloutId": f"ro-{name}-{generation}",
                            "rolloutGeneration": generation, "releaseId": f"rel-{name}-{tag}",
                            "requestedDigest": b.digest(name, tag), "mode": "promotion"}}}


def cas_error(expected: int, actual: int) -> dict[str, Any]:
    return {"error": {"text": "generation moved", "data": {
        "code": "ROLLOUT_GENERATION_MISMATCH", "expected": expected, "actual": actual}}}


def changes_of(*services: str) -> list[Change]:
    p = plan(b.reference_desired(), b.reference_live())
    return [c for c in p.changes if c.service in services]


def run(fake: FakeControlPlane, changes: list[Change], journal: Journal,
        freshness: Freshness = Freshness.FRESH) -> tuple[list[Any], Lines]:
    hook = Lines()

    async def go() -> list[Any]:
        client = ControlPlaneClient(connection(), token="t", transport=fake.transport())
        async with client:
            return await applying.execute([Check(c, freshness) for c in changes], client=client,
                                          journal=journal, hook=hook, concurrency=4)
    return asyncio.run(go()), hook


def test_a_cas_lost_to_a_different_change_stops_that_service_only(tmp_path: Path) -> None:
    fake = FakeControlPlane(script={
        "promoteServiceImageRelease": [cas_error(3, 4)],
        "getServiceById": [{"service": raw_service("checkout", "v2.3.1", 4)}],
        "setServiceEgress": [{"service": raw_service("checkout", "v2.3.0", 3)}],
        "rollbackServiceImageRelease": [{"service": raw_service("catalog", "v5.0.1", 6)}],
    })
    checkout = changes_of("checkout")
    assert [c.action for c in checkout] == [Action.SET_EGRESS, Action.PROMOTE]
    # Put the promotion first so the egress change after it must be skipped.
    results, _ = run(fake, [checkout[1], checkout[0], *changes_of("catalog")],
                     Journal(tmp_path / "j.jsonl"))
    outcomes = {(r.change.action, r.change.service): r for r in results}
    refused = outcomes[(Action.PROMOTE, "checkout")]
    assert refused.outcome is Outcome.REFUSED and refused.code == "ROLLOUT_GENERATION_MISMATCH"
    assert "someone else changed checkout" in refused.detail and "3" in refused.detail
    assert outcomes[(Action.SET_EGRESS, "checkout")].outcome is Outcome.SKIPPED
    assert outcomes[(Action.ROLLBACK, "catalog")].outcome is Outcome.APPLIED
    assert not fake.calls("setServiceEgress")  # nothing half-done behind the refusal


def test_the_same_change_made_by_someone_else_is_already_applied(tmp_path: Path) -> None:
    fake = FakeControlPlane(script={
        "promoteServiceImageRelease": [cas_error(3, 4)],
        "getServiceById": [{"service": raw_service("checkout", "v2.4.0", 4)}],
    })
    promote = [c for c in changes_of("checkout") if c.action is Action.PROMOTE]
    results, _ = run(fake, promote, Journal(tmp_path / "j.jsonl"))
    assert results[0].outcome is Outcome.ALREADY_APPLIED
    assert "someone else made the same change" in results[0].detail


def test_a_write_whose_fate_is_unknown_stays_in_doubt_for_the_next_run(tmp_path: Path) -> None:
    fake = FakeControlPlane(script={
        "promoteServiceImageRelease": [httpx.Response(503, text="busy")]})
    promote = [c for c in changes_of("checkout") if c.action is Action.PROMOTE]
    journal = Journal(tmp_path / "j.jsonl")
    results, hook = run(fake, promote, journal)
    assert results[0].outcome is Outcome.FAILED
    key = promote[0].idempotency_key
    assert key in hook.lines[-1]
    sent_keys = {c["request"]["idempotencyKey"] for c in fake.calls("promoteServiceImageRelease")}
    assert sent_keys == {key}  # every retry carried the same key
    reopened = Journal.open(tmp_path / "j.jsonl")
    assert reopened.in_doubt(key)


def test_the_journal_records_intent_before_result_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = Journal.open(path)
    change = changes_of("catalog")[0]
    journal.intent(change)
    assert Journal.open(path).in_doubt(change.idempotency_key)
    journal.result(change, "applied")
    reopened = Journal.open(path)
    assert not reopened.in_doubt(change.idempotency_key)
    events = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert events == ["intent", "result"]


@pytest.mark.parametrize("damage", [
    # checksum no longer matches, on a line that is not the last
    lambda text: text.replace('"intent"', '"intant"', 1),
    # a torn line that is not the last one
    lambda text: text.replace("\n", "", 1),
    lambda text: "garbage\n" + text,
    lambda text: text.replace("\n", "\n{\"torn\n", 1),
])
def test_a_damaged_journal_is_refused_with_its_path_and_line(tmp_path: Path, damage: Any) -> None:
    path = tmp_path / "j.jsonl"
    journal = Journal.open(path)
    journal.intent(changes_of("catalog")[0])
    journal.result(changes_of("catalog")[0], "applied")
    path.write_text(damage(path.read_text()))
    with pytest.raises(JournalError, match=str(path)):
        Journal.open(path)
