"""[ext] ``runtime.healthySince``: read beside the runtime, for the observation, without
costing the fast path its sharing -- ten clusters whose statuses differ only in it still
decode once -- and read exactly as the wire models read it when the text cannot be cut."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.shell.probing.parsing import (
    Malformed,
    Shared,
    parse_batch_page,
    read_status,
    read_status_json,
)


def text(since: Any = None, *, where: str = "end", app: str = "checkout") -> bytes:
    runtime: dict[str, Any] = {"runtimeState": "RUNNING", "replicas": 2,
                               "resolvedDigest": "sha256:aa", "rolloutId": "r-1",
                               "replicaCounts": {"required": 2, "observed": 2,
                                                 "healthy": 2, "verified": 2, "failed": 0}}
    if since is not None:
        runtime = {"healthySince": since, **runtime} if where == "start" else \
            {**runtime, "healthySince": since}
    return json.dumps({"appId": app, "state": "ACTIVE", "runtime": runtime},
                      separators=(",", ":")).encode()


@pytest.mark.parametrize("where", ["start", "end"])
def test_statuses_that_differ_only_in_healthy_since_share_one_runtime(where: str) -> None:
    shared = Shared()
    first, one = read_status("checkout", text(1_780_000_000_001, where=where), shared)
    again, two = read_status("checkout", text(1_780_000_000_002, where=where), shared)
    assert (one, two) == (1_780_000_000_001, 1_780_000_000_002)
    assert again is first  # one decode, one value, for every cluster
    alone, said = read_status_json("checkout", text(1_780_000_000_001, where=where))
    assert alone == first and said == 1_780_000_000_001


def test_a_batch_page_carries_each_cluster_s_statement() -> None:
    page = parse_batch_page(b'{"apps":[{"appId":"checkout","status":' + text(7)
                            + b'}],"nextCursor":null}')
    runtime, since = read_status("checkout", page.statuses["checkout"], Shared())
    assert since == 7 and runtime.resolved_digest == "sha256:aa"


def test_no_statement_is_none() -> None:
    assert read_status("checkout", text(), Shared())[1] is None
    assert read_status_json("checkout", text())[1] is None


@pytest.mark.parametrize("since", [-5, 0])
def test_a_number_that_is_no_time_is_kept_for_the_judge_to_refuse(since: int) -> None:
    # Not cut out (not a plain positive-digit run): read by the wire models, as sent.
    assert read_status("checkout", text(since), Shared())[1] == since


@pytest.mark.parametrize("since", ["yesterday", 1.5, True])
def test_a_healthy_since_that_is_not_an_integer_is_malformed(since: Any) -> None:
    with pytest.raises(Malformed, match="healthySince"):
        read_status("checkout", text(since), Shared())
    with pytest.raises(Malformed, match="healthySince"):
        read_status_json("checkout", text(since))


def test_spaced_json_and_a_nested_lookalike_are_read_by_the_models() -> None:
    spaced = json.dumps({"appId": "checkout", "runtime": {"healthySince": 9,
                                                          "resolvedDigest": "sha256:aa"}})
    assert read_status("checkout", spaced.encode(), Shared())[1] == 9
    lookalike = json.dumps({"appId": "checkout", "runtime": {
        "resolvedDigest": "sha256:aa", "lastError": 'said "healthySince":5'}},
        separators=(",", ":")).encode()
    runtime, since = read_status("checkout", lookalike, Shared())
    assert since is None and runtime.last_error == 'said "healthySince":5'
    with pytest.raises(Malformed, match="another app"):
        read_status("checkout", text(5, app="cart"), Shared())
