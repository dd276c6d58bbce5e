"""``reconcile config`` shows the notifications and where traces go, each with its
source; a secret's variable or file is named with whether it can be read, never its
value, and a missing one is a note (the sink is left out), not a problem."""

from __future__ import annotations

import json
from pathlib import Path

from reconciler.exitcodes import Exit

HOOK_TOKEN = "hook-token-canary-8f2e"
SLACK_CANARY = "https://hooks.slack.example/services/T0/B0/canary-slack-77"

NOTIFY = """notifications:
  environment: production
  webhooks:
    - url: https://hooks.example/cd
      tokenEnv: HOOK_TOKEN
  slack:
    - urlEnv: SLACK_URL
      on: [gate_failed, no_go]
  github:
    repository: acme/fleet
    deployments: true
tracing:
  otlpEndpoint: http://127.0.0.1:4318
"""


def with_notify(repo: Path) -> None:
    settings = repo / "settings.yaml"
    settings.write_text(settings.read_text() + NOTIFY)


def test_sinks_and_tracing_with_their_sources_and_no_secret(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with_notify(run.repo)
    monkeypatch.setenv("HOOK_TOKEN", HOOK_TOKEN)
    monkeypatch.setenv("SLACK_URL", SLACK_CANARY)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    code, out, err = run("repo")
    assert code == Exit.OK, err
    assert HOOK_TOKEN not in out + err and SLACK_CANARY not in out + err
    assert "notifications (environment production):" in out
    hook = next(line for line in out.splitlines() if "webhooks[0]" in line)
    assert "https://hooks.example/cd" in hook and "token from env HOOK_TOKEN (set;" in hook
    assert "settings.yaml:" in hook and "notifications.webhooks.0" in hook
    slack = next(line for line in out.splitlines() if "slack[0]" in line)
    assert "url from env SLACK_URL (set;" in slack and "on gate_failed, held, no_go" in slack
    github = next(line for line in out.splitlines() if line.strip().startswith("github"))
    assert "commit statuses and deployments" in github
    assert "env GITHUB_TOKEN (NOT readable: the sink is left out" in github
    tracing = next(line for line in out.splitlines() if "otlp endpoint" in line)
    assert "http://127.0.0.1:4318" in tracing and "tracing.otlpEndpoint" in tracing


def test_the_environment_wins_for_tracing_and_json_carries_the_same(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with_notify(run.repo)
    monkeypatch.setenv("RECONCILE_OTLP_ENDPOINT", "http://env:4318")
    code, out, _ = run("repo", "--format", "json")
    report = json.loads(out)
    assert report["tracing"]["otlp_endpoint"] == {
        "value": "http://env:4318", "source": {"kind": "env", "name": "RECONCILE_OTLP_ENDPOINT"}}
    assert [s["name"] for s in report["notifications"]["sinks"]] == [
        "webhooks[0]", "slack[0]", "github"]
    assert report["notifications"]["sinks"][0]["token"]["set"] is False
    assert code == Exit.OK  # a missing notification secret never stops plan or apply
