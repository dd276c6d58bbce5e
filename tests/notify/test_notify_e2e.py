"""The issue's scenarios, end to end: the real watcher (and apply) process on a git repo
against the real sandbox, notifying real local HTTP receivers and the GitHub stand-in.

- A gate failure in ``watch --apply`` -> exactly one webhook event, one Slack message and
  one failing commit status for that commit, however many resyncs and retries follow.
- A receiver that is down -> the apply goes on as without it; the delivery is retried
  and counted in the metrics.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_binary_event

from reconciler.sandbox.launcher import Sandbox
from tests.comment.github_standin import StandIn
from tests.e2e_repo import Repo, git
from tests.notify import receivers
from tests.notify.conftest import TOKEN
from tests.watch.test_watch_e2e import watching
from tests.watch.test_watch_proof import free_port, is_apply_end

pytestmark = pytest.mark.integration

SLACK_SECRET = "XXsl4ckS3cretPathXX"
FAST = {"attempts": 3, "backoffSeconds": 0.2, "timeoutSeconds": 2.0, "drainSeconds": 5.0}


def with_notifications(repo: Repo, notifications: dict[str, Any]) -> str:
    """Write ``notifications`` into the repo's settings and commit; the new commit."""
    path = repo.path / "settings.yaml"
    settings = json.loads(path.read_text())
    settings["notifications"] = notifications
    path.write_text(json.dumps(settings, indent=2) + "\n")
    repo.commit("notify")
    return subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def metric(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    match = re.search(rf"^{re.escape(name)} (\S+)$", body, re.MULTILINE)
    assert match, f"{name} not served:\n{body}"
    return float(match.group(1))


def test_a_gate_failure_in_watch_apply_is_told_once_per_sink_however_many_resyncs(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, github: StandIn) -> None:
    hook, slack = receivers.start(), receivers.start()
    try:
        repo = repo_factory(sandbox, attempts=4)
        commit = with_notifications(repo, {
            "environment": "sandbox", "webhooks": [{"url": hook.url}],
            "slack": [{"urlEnv": "TEST_SLACK_URL"}],
            "github": {"repository": "acme/fleet", "apiUrl": github.api_url,
                       "tokenEnv": "TEST_GH_TOKEN"},
            "delivery": FAST})
        sandbox.fault("sn1", "stuck")
        slack_url = slack.url + "/T0000/B0000/" + SLACK_SECRET  # the URL is the secret
        extra = {"TEST_SLACK_URL": slack_url, "TEST_GH_TOKEN": TOKEN}
        with watching_env(repo, extra, "--apply", "--resync", "1") as w:
            first = w.wait_for(is_apply_end, timeout=90)
            assert first["event"] == "apply-failed", first
            # Retries of the same commit (backoff 5 s) and a resync every second.
            second = w.wait_for(lambda e: is_apply_end(e) and e is not first, timeout=60)
            assert second["event"] == "apply-failed" and second["commit"] == commit
            w.drain(3)
            resyncs = [e for e in w.seen if e["event"] == "plan" and "resync" in e["message"]]
            assert len(resyncs) >= 3, [e["message"] for e in w.seen]
        assert w.proc.stderr is not None
        said = json.dumps(w.seen) + w.proc.stderr.read()
        assert SLACK_SECRET not in said and TOKEN not in said
        events = hook.ok()
        assert len(events) == 1, [e.headers.get("ce-type") for e in events]
        ce = from_binary_event(HTTPMessage(headers=events[0].headers, body=events[0].body))
        assert ce.get_type() == "dev.cdevents.incident.detected.0.2.0"
        data = ce.get_data()
        assert isinstance(data, dict)
        assert data["customData"]["kind"] == "gate_failed"
        assert data["customData"]["commit"] == commit
        services = {s["service"]: s for s in data["customData"]["services"]}
        assert "sn1" in services["checkout"]["clusters"], services
        assert services["checkout"]["digest"].startswith("sha256:")
        assert len(slack.ok()) == 1 and "gate failed" in json.dumps(slack.ok()[0].json())
        statuses = [(s["sha"], s["state"]) for s in github.state.statuses]
        assert statuses == [(commit, "failure")], statuses
    finally:
        hook.stop()
        slack.stop()


def test_a_receiver_that_is_down_leaves_the_apply_alone_and_is_retried_and_counted(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox)
    with_notifications(repo, {"webhooks": [{"url": receivers.closed_port_url()}],
                              "delivery": FAST})
    port = free_port()
    with watching(repo, "--apply", "--resync", "2", "--metrics-port", str(port)) as w:
        end = w.wait_for(is_apply_end, timeout=120)
        assert end["event"] == "applied", end  # the apply is as it would be without it
        deadline = time.monotonic() + 30
        while metric(port, 'reconcile_notifications_total{result="failed",sink="webhook"}') < 1:
            assert time.monotonic() < deadline, "the failed delivery was never counted"
            time.sleep(0.3)
        assert metric(port, 'reconcile_notifications_total{result="retried",sink="webhook"}') \
            >= FAST["attempts"] - 1
        assert metric(port, 'reconcile_notifications_total{result="delivered",sink="webhook"}') \
            == 0
        # With --log-format json the failure is one of the watcher's JSON events, naming
        # the sink, the kind and the commit -- never a plain-text line beside them.
        failed = w.wait_for(lambda e: e["event"] == "notify-failed", timeout=10)
        assert failed["level"] == "warning" and failed["sink"] == "webhooks[0]", failed
        assert failed["sink_kind"] == "webhook" and failed["kind"] and failed["commit"]
        assert failed["message"].startswith("webhooks[0]: "), failed
    assert not [e for e in w.seen if e["event"] == "raw"], w.seen
    assert w.proc.stderr is not None
    stderr = w.proc.stderr.read()
    assert "notify:" not in stderr, stderr


def test_a_one_shot_apply_with_a_receiver_down_exits_as_it_would_and_stays_bounded(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox)
    hook = receivers.start()
    try:
        with_notifications(repo, {"webhooks": [{"url": receivers.closed_port_url()},
                                                {"url": hook.url}],
                                  "delivery": {**FAST, "drainSeconds": 3.0}})
        started = time.monotonic()
        # A process: the warning is asserted on stderr, where Python's logging puts it in
        # a process (in the test process pytest's log capture takes it).
        result = repo.run("apply", str(repo.path), "--auto-approve", timeout=180,
                          process=True)
        assert result.code == 0, result.err
        assert "Apply complete." in result.out
        assert "webhooks[0]: applied of commit" in result.err  # said, not fatal
        # One CDEvent per released service (upgraded, deployed for a creation).
        events = hook.ok()
        types = sorted(e.headers["ce-type"] for e in events)
        assert types and all(t.startswith("dev.cdevents.service.") for t in types), types
        assert len({e.headers["ce-id"] for e in events}) == len(events)
        assert time.monotonic() - started < 170
        # Applied again: nothing to do, and "converged" is covered by "applied".
        again = repo.run("apply", str(repo.path), "--auto-approve")
        assert again.code == 0, again.err
        time.sleep(0.5)
        assert len(hook.ok()) == len(events)
    finally:
        hook.stop()


# -- helpers --------------------------------------------------------------------------


class _EnvRepo(Repo):
    extra: dict[str, str]

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(**{**self.extra, **extra})


def watching_env(repo: Repo, extra: dict[str, str], *args: str) -> Any:
    wrapped = _EnvRepo(repo.path, repo.sandbox, repo.state)
    wrapped.extra = extra
    return watching(wrapped, *args)


__all__ = ["git"]
