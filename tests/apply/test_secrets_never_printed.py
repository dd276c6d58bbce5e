"""Secrets in *successful* replies are never printed (issue 18, item 8).

A control plane that echoes the caller's machine token and session jwt into a rollout
status (the sandbox's ``echo-secrets`` fault) has them redacted from every output of plan
and apply -- text, JSON, Markdown (the PR comment), the saved plan, apply's views, the
journal and ``history`` -- while the rest of the message is still shown. A token in a
URL's query string is not echoed in errors either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.render import jsonplan
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo

pytestmark = pytest.mark.integration

#: The sandbox's session jwts: "sbxjwt." and 64 hex digits, one per client session.
JWT = re.compile(r"sbxjwt\.[0-9a-f]{8,}")
KEPT = "deployer debug: authorization token=<redacted> session=<redacted> rejected the image"


def assert_no_secret(sandbox: Sandbox, where: str, text: str) -> None:
    assert sandbox.token not in text, f"the machine token is printed in {where}"
    assert not JWT.search(text), f"a session jwt is printed in {where}: {JWT.search(text)}"


def test_an_echoed_token_and_jwt_are_redacted_from_every_output(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, tmp_path: Path) -> None:
    repo = repo_factory(sandbox, attempts=2)
    sandbox.fault("control-plane", "echo-secrets")
    saved = tmp_path / "plan.json"
    outputs = {}
    for fmt in ("text", "json", "markdown"):
        result = repo.run("plan", str(repo.path), "--format", fmt,
                          *(["--out", str(saved)] if fmt == "json" else []))
        assert result.code == 0, result.out + result.err
        outputs[f"plan --format {fmt}"] = result.out + result.err
    outputs["the saved plan"] = saved.read_text()
    for where, text in outputs.items():
        assert_no_secret(sandbox, where, text)
        # The rest of the message is still there: redaction cuts the secret, not the news.
        assert "deployer debug: authorization token=" in text, where
    assert KEPT in outputs["plan --format text"]
    # The saved plan was written redacted: its digest is the digest of what it holds, so
    # it still loads and applies.
    document = json.loads(saved.read_text())
    assert document["content_digest"] == jsonplan.content_digest(document)
    assert KEPT in saved.read_text()

    applied = repo.run("apply", str(saved), "--auto-approve", cwd=repo.path)
    # Every rollout status says failed: the gate cannot prove checkout, by name.
    assert applied.code == Exit.NOT_CONVERGED, applied.out + applied.err
    assert_no_secret(sandbox, "apply", applied.out + applied.err)
    assert "deployer debug: authorization token=<redacted>" in applied.out + applied.err
    as_json = repo.run("apply", str(repo.path), "--auto-approve", "--format", "json")
    assert_no_secret(sandbox, "apply --format json", as_json.out + as_json.err)
    assert "token=<redacted>" in as_json.out

    journal = (repo.state / "journal.jsonl").read_text()
    assert_no_secret(sandbox, "the journal", journal)
    assert "token=<redacted>" in journal
    history = repo.run("history", str(repo.path))
    assert history.code == 0, history.out + history.err
    assert_no_secret(sandbox, "history", history.out + history.err)
    history_json = repo.run("history", str(repo.path), "--format", "json")
    assert_no_secret(sandbox, "history --format json", history_json.out + history_json.err)

    # The control plane really did echo them: without the fault the text is gone.
    sandbox.fault("control-plane", "echo-secrets", on=False)
    clean = repo.run("plan", str(repo.path))
    assert "deployer debug" not in clean.out


def test_a_token_in_the_control_plane_urls_query_is_not_echoed(repo: Repo) -> None:
    secret = "qs-secret-4f1c9a7e"
    url = f"https://127.0.0.1:9/typedrequest?token={secret}&x=1"
    result = repo.run("plan", str(repo.path), "--control-plane", url)
    assert result.code == Exit.ERROR, result.out + result.err
    assert secret not in result.out + result.err
    assert "token=<redacted>" in result.err, result.err
