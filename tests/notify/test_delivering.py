"""``shell.notifying``: the sinks against real local HTTP receivers and the GitHub
stand-in, the bounded retries, the memory file, and secrets never shown."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_binary_event

from reconciler.core import sanitize
from reconciler.core.desired import Delivery, Notifications, Settings
from reconciler.core.notifying import Memory, Notification, decide
from reconciler.core.outcomes import ApplyReport
from reconciler.shell import notifying
from reconciler.shell.notifying import Notifier
from tests.comment.github_standin import StandIn
from tests.notify import receivers
from tests.notify.conftest import TOKEN
from tests.notify.test_deciding import ENV, change, gate, plan, proof, sent

SLACK_PATH_SECRET = "T000/B000/XXXXsecretXXXX"


@pytest.fixture
def hook() -> Iterator[receivers.Receiver]:
    r = receivers.start()
    yield r
    r.stop()


@pytest.fixture
def slack() -> Iterator[receivers.Receiver]:
    r = receivers.start()
    yield r
    r.stop()


def gate_failure() -> Notification:
    c = change("checkout")
    return decide(Memory(), plan(changes=(c,)), environment=ENV,
                  report=ApplyReport(results=(sent(c),),
                                     gate=gate(proof("checkout", False)))).new[0]


def settings(notifications: dict[str, Any]) -> Settings:
    return Settings.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Settings",
        "controlPlane": {"url": "https://cp.example", "tokenEnv": "CP_TOKEN"},
        "mesh": {"gateway": "mesh.example", "signer": {
            "walletAddress": "w", "appId": "a", "keyFileEnv": "KEY"}},
        "notifications": notifications})


FAST = {"attempts": 3, "backoffSeconds": 0.05, "timeoutSeconds": 2.0, "drainSeconds": 10.0}


def run_notifier(notifier: Notifier, *outcomes: tuple[Any, Any]) -> None:
    async def go() -> None:
        for p, report in outcomes:
            notifier.outcome(p, report)
        await notifier.drain()
    asyncio.run(go())


def test_a_gate_failure_reaches_each_sink_once(
        tmp_path: Path, hook: receivers.Receiver, slack: receivers.Receiver,
        github: StandIn) -> None:
    env = {"SLACK_URL": slack.url + "/" + SLACK_PATH_SECRET, "GH": TOKEN}
    config = settings({"environment": ENV, "webhooks": [{"url": hook.url}],
                       "slack": [{"urlEnv": "SLACK_URL"}],
                       "github": {"repository": "acme/fleet", "apiUrl": github.api_url,
                                  "tokenEnv": "GH", "deployments": True},
                       "delivery": FAST})
    notifier = Notifier.build(config, tmp_path, env, gateway="mesh.example", applying=True)
    assert notifier is not None
    c = change("checkout")
    waiting = plan(changes=(c,), proofs=(proof("checkout", False),))
    failed = ApplyReport(results=(sent(c),), gate=gate(proof("checkout", False)))
    run_notifier(notifier, (waiting, None), (waiting, failed), (waiting, None), (waiting, failed))

    # A restart: a new notifier over the same state directory sends nothing again.
    again = Notifier.build(config, tmp_path, env, gateway="mesh.example", applying=True)
    assert again is not None
    run_notifier(again, (waiting, failed), (waiting, None))

    [event] = hook.ok()
    ce = from_binary_event(HTTPMessage(headers=event.headers, body=event.body))
    assert ce.get_type() == "dev.cdevents.incident.detected.0.2.0"
    assert ce.get_source() == f"reconcile/{ENV}"
    data = ce.get_data()
    assert isinstance(data, dict)
    assert data["context"]["type"] == ce.get_type() and data["context"]["id"] == ce.get_id()
    assert data["subject"]["type"] == "incident"
    assert data["subject"]["content"]["service"]["id"] == "service/checkout"
    assert data["subject"]["content"]["artifactId"].startswith("pkg:oci/checkout@sha256%3A")
    assert data["customData"]["commit"] == "a" * 40
    assert data["customData"]["services"][0]["clusters"] == ["c2"]

    [message] = slack.ok()
    assert message.path.endswith(SLACK_PATH_SECRET)
    body = message.json()
    assert "gate failed" in json.dumps(body["blocks"])
    assert "checkout" in body["text"]

    assert [(s["sha"], s["state"], s["context"]) for s in github.state.statuses] == [
        ("a" * 40, "failure", f"reconcile/{ENV}")]
    assert len(github.state.statuses[0]["description"]) <= 140
    assert [d["environment"] for d in github.state.deployments] == [ENV]
    assert [s["state"] for s in github.state.deployment_statuses] == ["failure"]
    assert {r.authorization for r in github.requests("POST")} == {f"token {TOKEN}"}


def test_a_receiver_that_fails_is_retried_with_backoff_then_given_up_and_counted(
        tmp_path: Path, hook: receivers.Receiver, caplog: pytest.LogCaptureFixture) -> None:
    hook.statuses = [503, 503]  # two failures, then it recovers
    down = receivers.closed_port_url()
    counted: list[tuple[str, str]] = []
    config = settings({"environment": ENV, "webhooks": [{"url": hook.url}, {"url": down}],
                       "delivery": FAST})
    notifier = Notifier.build(config, tmp_path, {}, gateway="g",
                              count=lambda s, r: counted.append((s, r)))
    assert notifier is not None
    with caplog.at_level(logging.WARNING, logger="reconcile.notify"):
        run_notifier(notifier, (plan(changes=(change("checkout"),)), None))
    attempts = [r for r in hook.requests]
    assert [r.status for r in attempts] == [503, 503, 200]
    # exponential backoff: the second wait is about twice the first
    first, second = attempts[1].at - attempts[0].at, attempts[2].at - attempts[1].at
    assert first >= 0.04 and second >= 0.09, (first, second)
    assert sorted(counted) == sorted([("webhook", "retried")] * 4
                                     + [("webhook", "delivered"), ("webhook", "failed")])
    assert "webhooks[1]: planned of commit aaaaaaaaaaaa not delivered" in caplog.text
    assert notifier.deliveries.failures[0].sink == "webhooks[1]"


def test_a_permanent_refusal_is_not_retried(tmp_path: Path, hook: receivers.Receiver) -> None:
    hook.statuses = [400]
    notifier = Notifier.build(settings({"webhooks": [{"url": hook.url}], "delivery": FAST}),
                              tmp_path, {}, gateway="g")
    assert notifier is not None
    run_notifier(notifier, (plan(changes=(change("checkout"),)), None))
    assert len(hook.requests) == 1


def test_drain_is_bounded_whatever_the_receiver_does(tmp_path: Path) -> None:
    config = settings({"webhooks": [{"url": receivers.closed_port_url()}],
                       "delivery": {"attempts": 10, "backoffSeconds": 5.0,
                                    "drainSeconds": 0.5}})
    notifier = Notifier.build(config, tmp_path, {}, gateway="g")
    assert notifier is not None
    started = time.monotonic()
    run_notifier(notifier, (plan(changes=(change("checkout"),)), None))
    # Unbounded, ten attempts 5 s apart take 45 s; the drain is 0.5 s. 15 s tells the two
    # apart on a loaded machine too.
    assert time.monotonic() - started < 15


def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_request_deadline(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``timeoutSeconds`` bounds each request as a whole: an answer trickled a byte at a
    time (every read well within the timeout) is cut off at the deadline, the attempt
    fails and is retried, and the drain is not held for as long as the trickle lasts."""
    slow = receivers.trickler(every=0.2)
    try:
        config = settings({"webhooks": [{"url": slow.url}], "delivery": {
            "attempts": 2, "backoffSeconds": 0.05, "timeoutSeconds": 1.0,
            "drainSeconds": 30.0}})
        notifier = Notifier.build(config, tmp_path, {}, gateway="g")
        assert notifier is not None
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="reconcile.notify"):
            run_notifier(notifier, (plan(changes=(change("checkout"),)), None))
        took = time.monotonic() - started
    finally:
        slow.stop()
    assert len(slow.accepted) == 2  # each attempt reached the receiver
    assert took < 4, took  # two attempts of about a second each, not the whole trickle
    failure, = notifier.deliveries.failures
    assert "no complete answer within 1s" in failure.message, failure.message


def test_deliveries_given_up_at_the_drain_are_named_and_counted_as_failed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What the drain abandons is a failed delivery like any other: one line per delivery
    naming its sink, kind and commit, and ``reconcile_notifications_total{result=
    "failed"}`` counts it (the documented alert watches that series)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    config = settings({"environment": ENV, "webhooks": [{"url": receivers.closed_port_url()}],
                       "slack": [{"urlEnv": "SLACK_URL"}],
                       "delivery": {"attempts": 10, "backoffSeconds": 5.0,
                                    "drainSeconds": 0.5}})
    notifier = Notifier.build(config, tmp_path, {"SLACK_URL": receivers.closed_port_url()},
                              gateway="g", count=notifying.prometheus_counter(registry))
    assert notifier is not None
    with caplog.at_level(logging.WARNING, logger="reconcile.notify"):
        run_notifier(notifier, (plan(changes=(change("checkout"),)), None))
    for sink, name in (("webhook", "webhooks[0]"), ("slack", "slack[0]")):
        assert registry.get_sample_value("reconcile_notifications_total",
                                         {"sink": sink, "result": "failed"}) == 1.0
        assert (f"notify: {name}: planned of commit aaaaaaaaaaaa not delivered: given up "
                "at the drain after 0.5s") in caplog.text, caplog.text
    assert sorted((f.sink, f.kind.value, f.commit[:12])
                  for f in notifier.deliveries.failures) == [
        ("slack[0]", "planned", "aaaaaaaaaaaa"), ("webhooks[0]", "planned", "aaaaaaaaaaaa")]


def test_a_missing_secret_leaves_that_sink_out_and_names_the_variable(
        tmp_path: Path, hook: receivers.Receiver, caplog: pytest.LogCaptureFixture) -> None:
    config = settings({"webhooks": [{"url": hook.url}], "slack": [{"urlEnv": "NOPE_URL"}],
                       "github": {"repository": "acme/fleet"}, "delivery": FAST})
    with caplog.at_level(logging.WARNING, logger="reconcile.notify"):
        notifier = Notifier.build(config, tmp_path, {}, gateway="g")
    assert notifier is not None and [s.name for s in notifier.deliveries.targets] == [
        "webhooks[0]"]
    assert "the variable NOPE_URL is not set" in caplog.text
    assert "the variable GITHUB_TOKEN is not set" in caplog.text


def test_secrets_from_files_are_registered_and_never_shown(tmp_path: Path,
                                                           hook: receivers.Receiver) -> None:
    secret = tmp_path / "token"
    secret.write_text("whsec_abcdefghijklmnop\n")
    config = settings({"webhooks": [{"url": hook.url, "tokenFile": str(secret)}],
                       "delivery": FAST})
    notifier = Notifier.build(config, tmp_path, {}, gateway="g")
    assert notifier is not None
    assert "whsec_abcdefghijklmnop" in sanitize.known_secrets()
    assert sanitize.safe("token whsec_abcdefghijklmnop") == "token <redacted>"
    run_notifier(notifier, (plan(changes=(change("checkout"),)), None))
    assert hook.ok()[0].headers["Authorization"] == "Bearer whsec_abcdefghijklmnop"


def test_a_secret_file_must_be_absolute_and_regular(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tokenFile"):
        settings({"webhooks": [{"url": "http://x/", "tokenFile": "relative/token"}]})
    with pytest.raises(notifying.SecretError, match="not a regular file"):
        notifying.read_secret({}, variable=None, path=str(tmp_path), what="x")


def test_notifications_filtered_by_kind(tmp_path: Path, hook: receivers.Receiver,
                                        slack: receivers.Receiver) -> None:
    config = settings({"on": ["gate_failed", "planned"],
                       "webhooks": [{"url": hook.url, "on": ["gate_failed"]}],
                       "slack": [{"urlEnv": "S"}], "delivery": FAST})
    notifier = Notifier.build(config, tmp_path, {"S": slack.url}, gateway="g")
    assert notifier is not None
    c = change("checkout")
    run_notifier(notifier, (plan(changes=(c,)), None),
                 (plan(changes=(c,)), ApplyReport(results=(sent(c),),
                                                  gate=gate(proof("checkout", False)))))
    assert len(hook.ok()) == 1 and len(slack.ok()) == 2


def test_the_memory_file_is_written_atomically_and_an_unreadable_one_is_empty(
        tmp_path: Path) -> None:
    memory_file = notifying.MemoryFile(tmp_path / "state" / "notifications.json")
    assert memory_file.load() == Memory()
    memory = Memory().remember("x@y:planned")
    memory_file.save(memory)
    assert memory_file.load() == memory
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["notifications.json"]
    (tmp_path / "state" / "notifications.json").write_text("{not json")
    assert memory_file.load() == Memory()


def test_slack_text_is_escaped_and_bounded() -> None:
    note = gate_failure()
    hostile = note.services[0].__class__(service="<!channel> & co", reasons=("x" * 5000,))
    message = notifying.slack_message(note.__class__(**{**note.__dict__,
                                                       "services": (hostile,)}))
    text = json.dumps(message)
    assert "<!channel>" not in text and "&lt;!channel&gt; &amp; co" in text
    assert all(len(b["text"]["text"]) <= 3000 for b in message["blocks"] if "text" in b
               and b["type"] == "section")


def test_delivery_defaults_are_bounded() -> None:
    d = Delivery()
    worst = sum(d.backoff_seconds * 2 ** i for i in range(d.attempts - 1)) \
        + d.attempts * d.timeout_seconds * 2
    assert d.drain_seconds <= worst  # apply never waits for more than drainSeconds
    assert Notifications().on is None
