"""A batch page has two readers (``shell.probing.parsing.parse_batch_page``): the fast one
(``msgspec``: the page's frame, each status kept as JSON text) and the wire models. They
must give the same outcome for every page -- the same statuses, the same silent apps with
the same reasons, the same page failures -- so the fast one is checked against the
models on a well-formed page, on the odd pages the fast one must hand over, and on
thousands of randomly damaged copies of a page."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from reconciler.shell.probing import parsing
from reconciler.shell.probing.parsing import Malformed, Shared, parse_status


def _status(app: str, replicas: object = 2) -> dict[str, Any]:
    return {"appId": app, "state": "ACTIVE", "ignored": {"deep": [1, 2, 3]},
            "runtime": {"image": f"r.test/{app}@sha256:{'a' * 64}", "runtimeState": "RUNNING",
                        "replicas": replicas, "lastError": None,
                        "resolvedDigest": f"sha256:{'a' * 64}", "rolloutId": f"ro-{app}",
                        "rolloutGeneration": 1,
                        "replicaCounts": {"required": 2, "observed": 2, "healthy": 2,
                                          "verified": 2, "failed": 0},
                        "egress": [{"host": "api.example.net", "port": 443}],
                        "egressDropped": []},
            "routes": []}


def _page() -> bytes:
    apps: list[dict[str, Any]] = [{"appId": a, "status": _status(a)} for a in "abcdef"]
    apps[1]["status"]["runtime"]["replicas"] = True  # malformed entry: b alone is silent
    apps[2]["status"] = 7  # not a status body
    del apps[3]["status"]  # no status at all
    apps[4]["status"]["appId"] = "other"  # another app's answer
    return json.dumps({"apps": apps, "nextCursor": "c1"}).encode()


def _outcome(reader: Any, content: bytes) -> object:
    """What a reader makes of ``content``: the page's failure, or the cursor and, per app,
    its runtime or the reason it is silent."""
    try:
        page = reader(content)
    except Malformed as exc:
        return ("page fails", exc.reason)
    shared = Shared()
    seen: list[object] = [page.next_cursor]
    for app, status in page.statuses.items():
        try:
            seen.append((app, parse_status(app, status, shared).model_dump()))
        except Malformed as exc:
            seen.append((app, "silent", exc.reason))
    return seen


def test_a_well_formed_page_is_read_fast_and_as_the_models_read_it() -> None:
    content = _page()
    fast = parsing.parse_batch_page(content)
    assert all(isinstance(s, bytes) for s in fast.statuses.values())  # the fast path ran
    outcome = _outcome(parsing.parse_batch_page, content)
    assert outcome == _outcome(parsing._parse_batch_page_models, content)
    assert isinstance(outcome, list)
    silent = {entry[0]: entry[2] for entry in outcome[1:]
              if isinstance(entry, tuple) and len(entry) == 3}
    assert set(silent) == {"b", "c", "d", "e"}
    assert silent["b"] == "malformed status: runtime.replicas is not an integer"
    assert silent["e"] == "answered for another app (other)"


@pytest.mark.parametrize("change", [
    lambda b: b[: len(b) // 2],  # truncated
    lambda b: b.replace(b"ACTIVE", b"ACT\xffIVE", 1),  # invalid UTF-8 inside a status
    lambda b: b.replace(b"ACTIVE", "ACTÉ".encode(), 1),  # valid, not ASCII
    lambda b: b.replace(b'"appId": "a"', b'"appId": "a\\ud800"', 1),  # lone surrogate
    lambda b: b.replace(b'"appId"', b'"app_id"', 1),  # snake case: the models accept it
    lambda b: b.replace(b'"nextCursor"', b'"next_cursor"'),  # ...and read it as the cursor
    lambda b: b.replace(b'"appId": "f"', b'"appId": "f", "app_id": "g"'),  # both names
    lambda b: b.replace(b'"nextCursor": "c1"', b'"nextCursor": "c1", "next_cursor": "c2"'),
    lambda b: b.replace(b'"nextCursor": "c1"', b'"nextCursor": ""'),
    lambda b: b.replace(b'"nextCursor": "c1"', b'"nextCursor": 5'),
    lambda b: b + b" x",
    lambda b: b.replace(b'"appId": "b"', b'"appId": "a"', 1),  # listed twice
    lambda b: b.replace(b'"replicas": 2', b'"replicas": 1e999', 1),
    lambda b: b.replace(b'"replicas": 2', b'"replicas": 123456789012345678901234567890', 1),
])
def test_odd_pages_get_the_models_answer(change: Any) -> None:
    content = change(_page())
    assert _outcome(parsing.parse_batch_page, content) == _outcome(
        parsing._parse_batch_page_models, content)


def test_invalid_utf8_inside_a_status_fails_the_whole_page() -> None:
    content = _page().replace(b"ACTIVE", b"ACT\xffIVE", 1)
    assert _outcome(parsing.parse_batch_page, content) == ("page fails", "malformed JSON")


def test_damaged_pages_get_the_same_answer_from_both_readers() -> None:
    base = _page()
    rnd = random.Random(22)
    differing = []
    for _ in range(1500):
        damaged = bytearray(base)
        for _ in range(rnd.randint(1, 3)):
            at = rnd.randrange(len(damaged))
            roll = rnd.random()
            if roll < 0.4:
                damaged[at] = rnd.choice(b'{}[]",:0123456789tnfe.-\\ ax\x00\xc3')
            elif roll < 0.7:
                del damaged[at:at + rnd.randint(1, 5)]
            else:
                damaged[at:at] = bytes([rnd.choice(b'{}[]",:01 e\\')])
        content = bytes(damaged)
        if _outcome(parsing.parse_batch_page, content) != _outcome(
                parsing._parse_batch_page_models, content):
            differing.append(content)
    assert differing == []
