"""The way back from a failed release, told (issues 20 and 23), end to end: the real
watcher and apply processes on a git repo against the real sandbox (sn3 refusing the
release with the ``refuse-digest`` fault), notifying real local HTTP receivers and the
GitHub stand-in.

- ``watch --apply --on-gate-failure revert``: exactly one ``gate_failed``, one
  ``reverted`` (a ``service.rolledback`` CDEvent naming the revert commit), one
  ``rollback_proven`` per sink, however many resyncs follow; the failed commit's GitHub
  status stays a failure that names the revert, the revert commit's is a success. A
  commit that pins the failed digest again is told once as ``held``.
- ``apply --on-gate-failure revert``: the same story from a one-shot apply, and a rerun
  tells nothing new.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_binary_event

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.comment.github_standin import StandIn
from tests.e2e_repo import Repo, git
from tests.notify import receivers
from tests.notify.conftest import TOKEN
from tests.notify.test_notify_e2e import (
    FAST,
    metric,
    watching_env,
    with_notifications,
)
from tests.revert.commits import revert_commits
from tests.revert.test_revert_e2e import NEW, OLD, rollbacks
from tests.watch.test_watch_proof import free_port

pytestmark = pytest.mark.integration


def head(repo: Repo) -> str:
    return subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def told(receiver: receivers.Receiver) -> list[dict[str, Any]]:
    """Every CDEvent the webhook received (the CloudEvent's data), in order."""
    out = []
    for r in receiver.ok():
        event = from_binary_event(HTTPMessage(headers=r.headers, body=r.body))
        data = event.get_data()
        assert isinstance(data, dict)
        out.append(data)
    return out


def checkout_rollbacks(sandbox: Sandbox) -> set[str]:
    """The idempotency keys of the control plane's rollbacks of checkout that took."""
    return {str(r.get("idempotencyKey")) for r in rollbacks(sandbox)
            if r["result"] == "ok" and r.get("serviceId") == "svc-checkout"}


def kinds_of(events: list[dict[str, Any]]) -> list[str]:
    """The kinds told, sorted: each (notification, sink) is its own background delivery,
    so two told at one moment (reverted, rollback_proven) may arrive in either order."""
    return sorted(e["customData"]["kind"] for e in events)


def by_kind(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["customData"]["kind"]: e for e in events}


def settings(hook: receivers.Receiver, github: StandIn) -> dict[str, Any]:
    return {"environment": "sandbox", "webhooks": [{"url": hook.url}],
            "slack": [{"urlEnv": "TEST_SLACK_URL"}],
            "github": {"repository": "acme/fleet", "apiUrl": github.api_url,
                       "tokenEnv": "TEST_GH_TOKEN"},
            "delivery": FAST}


def refusing_repo(repo_factory: Callable[..., Repo], sandbox: Sandbox,
                  hook: receivers.Receiver, github: StandIn) -> tuple[Repo, str]:
    """A repo telling ``hook`` and GitHub (no Slack), sn3 refusing its new checkout
    release; the commit that pins it."""
    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    config = settings(hook, github)
    del config["slack"]
    failed_commit = with_notifications(repo, config)
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    return repo, failed_commit


def test_watch_apply_revert_tells_reverted_and_the_proven_rollback_once_then_held_once(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, github: StandIn) -> None:
    hook, slack = receivers.start(), receivers.start()
    try:
        repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
        failed_commit = with_notifications(repo, settings(hook, github))
        sandbox.fault("sn3", "refuse-digest", digest=NEW)
        extra = {"TEST_SLACK_URL": slack.url + "/T0/B0/secret", "TEST_GH_TOKEN": TOKEN}
        port = free_port()
        with watching_env(repo, extra, "--apply", "--on-gate-failure", "revert",
                          "--resync", "1", "--metrics-port", str(port)) as w:
            w.wait_for(lambda e: e["event"] == "reverted", timeout=180)
            w.wait_for(lambda e: e["event"] == "plan" and e.get("verdict") == "no_changes",
                       timeout=90)
            w.drain(5)  # several resyncs at the revert commit
            revert_commit = head(repo)
            resyncs = [e for e in w.seen if e["event"] == "plan" and "resync" in e["message"]]
            assert len(resyncs) >= 3, [e["message"] for e in w.seen]
            hook.wait_for(3)
            assert kinds_of(told(hook)) == ["gate_failed", "reverted", "rollback_proven"]
            # The gate failure came first, on its own (the revert after it).
            assert told(hook)[0]["customData"]["kind"] == "gate_failed"

            # The failed digest pinned again (a merge of an old branch): held, said once.
            path = repo.path / "services" / "checkout.yaml"
            text = path.read_text()
            path.write_text(text.replace(OLD, NEW).replace("tag: v2.3.0", "tag: v2.4.0"))
            git(repo.path, "commit", "-qam", "checkout back to v2.4.0")
            repinned = head(repo)
            w.wait_for(lambda e: e["event"] == "plan" and e.get("verdict") == "no_go",
                       timeout=60)
            w.drain(4)
            # Counted as every delivery is: four to each sink, none failed.
            for sink in ("webhook", "slack", "github"):
                assert metric(port, "reconcile_notifications_total"
                              f'{{result="delivered",sink="{sink}"}}') == 4, sink
                assert metric(port, "reconcile_notifications_total"
                              f'{{result="failed",sink="{sink}"}}') == 0, sink
        events = told(hook)
        assert kinds_of(events) == ["gate_failed", "held", "reverted", "rollback_proven"], \
            kinds_of(events)
        found = by_kind(events)
        reverted, proven, held = found["reverted"], found["rollback_proven"], found["held"]
        assert reverted["context"]["type"] == "dev.cdevents.service.rolledback.0.2.0"
        assert reverted["subject"]["id"] == "service/checkout"
        assert reverted["subject"]["content"]["artifactId"].endswith(OLD.replace(":", "%3A"))
        custom = reverted["customData"]
        assert custom["commit"] == failed_commit
        assert custom["revert"]["commit"] == revert_commit and custom["revert"]["landed"]
        [line] = custom["services"]
        assert (line["service"], line["digest"], line["previousDigest"]) == \
            ("checkout", OLD, NEW)
        assert line["clusters"] == ["sn3"], line
        assert any("pulled-digest-mismatch" in r for r in line["reasons"]), line
        assert proven["context"]["type"] == "dev.cdevents.incident.resolved.0.2.0"
        assert proven["subject"]["id"] == f"sandbox/{failed_commit}/gate_failed"
        assert proven["customData"]["commit"] == revert_commit
        assert held["customData"]["commit"] == repinned
        assert held["customData"]["blockers"][0].startswith("held: checkout")
        # Slack: one message per outcome, the revert named.
        messages = [json.dumps(m.json()) for m in slack.ok()]
        assert len(messages) == 4, messages
        [said] = [m for m in messages if "release failed, reverted" in m]
        assert revert_commit[:12] in said and "*Revert*" in said
        # GitHub: the failed commit stays a failure (now naming the revert); the revert
        # commit is a success; the re-pin is an error.
        statuses = sorted((s["sha"], s["state"]) for s in github.state.statuses)
        assert statuses == sorted([(failed_commit, "failure"), (failed_commit, "failure"),
                                   (revert_commit, "success"), (repinned, "error")]), statuses
        # The failed commit's last status (GitHub shows the newest of a context) names the
        # revert.
        last = [s for s in github.state.statuses if s["sha"] == failed_commit][-1]
        assert revert_commit[:12] in last["description"], last
        # And in git and the control plane: one revert, one rollback of checkout (the
        # examples also roll catalog back, in the first apply).
        assert len(revert_commits(repo.path)) == 1
        assert len(checkout_rollbacks(sandbox)) == 1
    finally:
        hook.stop()
        slack.stop()


def test_apply_revert_tells_the_way_back_and_a_rerun_tells_nothing_new(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, github: StandIn) -> None:
    hook = receivers.start()
    try:
        repo, failed_commit = refusing_repo(repo_factory, sandbox, hook, github)
        done = repo.run("apply", str(repo.path), "--auto-approve", "--on-gate-failure",
                        "revert", timeout=240, TEST_GH_TOKEN=TOKEN)
        assert done.code == Exit.NOT_CONVERGED, done.out + done.err
        assert "release failed, rolled back to checkout v2.3.0" in done.err
        assert "and proven on every cluster" in done.err
        assert kinds_of(told(hook)) == ["gate_failed", "reverted", "rollback_proven"]
        revert_commit = head(repo)
        assert revert_commit != failed_commit
        again = repo.run("apply", str(repo.path), "--auto-approve", "--on-gate-failure",
                         "revert", timeout=240, TEST_GH_TOKEN=TOKEN)
        assert again.code == Exit.OK, again.out + again.err
        assert kinds_of(told(hook)) == ["gate_failed", "reverted", "rollback_proven"]
        assert sorted((s["sha"], s["state"]) for s in github.state.statuses) == sorted([
            (failed_commit, "failure"), (failed_commit, "failure"),
            (revert_commit, "success")])
    finally:
        hook.stop()


def test_a_revert_by_hand_is_told_once_and_the_next_apply_tells_the_rollback(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, github: StandIn) -> None:
    """Issue 32: ``reconcile revert`` (no gate, no rollback of its own) tells the sinks
    ``reverted`` on the commit whose release it reverts, once however often it is
    asked; the apply that rolls back tells ``applied`` on the revert commit."""
    hook = receivers.start()
    try:
        repo, failed_commit = refusing_repo(repo_factory, sandbox, hook, github)
        failed = repo.run("apply", str(repo.path), "--auto-approve", timeout=240,
                          TEST_GH_TOKEN=TOKEN)
        assert failed.code == Exit.NOT_CONVERGED, failed.out + failed.err
        assert not revert_commits(repo.path)  # --on-gate-failure stop: nothing reverted
        assert kinds_of(told(hook)) == ["gate_failed"]

        done = repo.run("revert", "checkout", "-C", str(repo.path), TEST_GH_TOKEN=TOKEN)
        assert done.code == Exit.OK, done.out + done.err
        revert_commit = head(repo)
        assert revert_commit != failed_commit
        again = repo.run("revert", "checkout", "-C", str(repo.path), TEST_GH_TOKEN=TOKEN)
        assert again.code == Exit.OK and "already reverted" in again.out, again.out + again.err
        events = told(hook)
        assert kinds_of(events) == ["gate_failed", "reverted"], kinds_of(events)
        custom = by_kind(events)["reverted"]["customData"]
        assert custom["commit"] == failed_commit
        assert "not proven, reverted by hand" in custom["summary"], custom["summary"]
        assert custom["revert"]["commit"] == revert_commit and custom["revert"]["landed"]
        [line] = custom["services"]
        assert (line["service"], line["digest"], line["previousDigest"]) == \
            ("checkout", OLD, NEW)
        assert any("sn3" in r for r in line["reasons"]), line  # the judge's evidence

        rolled = repo.run("apply", str(repo.path), "--auto-approve", timeout=240,
                          TEST_GH_TOKEN=TOKEN)
        assert rolled.code == Exit.OK, rolled.out + rolled.err
        assert kinds_of(told(hook)) == ["applied", "gate_failed", "reverted"]
        applied = by_kind(told(hook))["applied"]["customData"]
        assert applied["commit"] == revert_commit
        statuses = sorted((s["sha"], s["state"]) for s in github.state.statuses)
        assert statuses == sorted([(failed_commit, "failure"), (failed_commit, "failure"),
                                   (revert_commit, "success")]), statuses
    finally:
        hook.stop()
