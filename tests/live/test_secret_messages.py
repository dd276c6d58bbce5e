"""Messages about secrets never carry them: a seed pasted where a path belongs, a bad URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.core.plans import Plan
from reconciler.shell import github, observing
from reconciler.shell.endpoints import ConfigError
from tests.live.fakes import connection


def test_a_seed_pasted_where_the_signer_key_path_belongs_is_not_echoed() -> None:
    conn = connection()
    seed = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    with pytest.raises(ConfigError) as info:
        observing.signer_key_path(conn, {conn.signer_key_env: seed})
    message = str(info.value)
    assert seed not in message and "value is not shown" in message and "PATH" in message


def test_a_malformed_github_api_url_is_a_clear_error_not_a_traceback() -> None:
    with pytest.raises(github.GitHubError, match="malformed"):
        github.check_api_url("http://[::1", with_token=True)


# -- one redaction for every output (issue 18, item 8) ------------------------------------

def test_a_registered_secret_is_redacted_by_safe_and_in_json_text() -> None:
    from reconciler.core import sanitize

    sanitize.register_secret("tok_0123456789abcdef")
    sanitize.register_secret("abc")  # too short to be a credential: never redacted
    said = "rollout failed: token=tok_0123456789abcdef rejected (abc)"
    assert sanitize.safe(said) == "rollout failed: token=<redacted> rejected (abc)"
    assert "tok_0123456789abcdef" not in sanitize.safe_json_text(
        '{"reason": "tok_0123456789abcdef"}')
    # Redacted before the bound: a secret cut in half by the bound is not half printed.
    assert "tok_0123" not in sanitize.safe("x" * 290 + "tok_0123456789abcdef", 295)


def test_url_query_values_are_redacted_wherever_a_url_appears() -> None:
    from reconciler.core.sanitize import redact

    assert redact("POST https://cp.example/typedrequest?token=s3cr3t&v=2 failed") == \
        "POST https://cp.example/typedrequest?token=<redacted>&v=<redacted> failed"
    assert redact("hook 'http://h:8080/x?abcdef' said 500") == \
        "hook 'http://h:8080/x?<redacted>' said 500"
    assert redact("is it done? yes: https://h/p") == "is it done? yes: https://h/p"


def test_the_clients_redactor_registers_for_the_whole_run() -> None:
    from reconciler.core.sanitize import safe
    from reconciler.shell.controlplane.errors import Redactor

    Redactor().add("sbxjwt.deadbeefcafe")
    assert safe("status: session sbxjwt.deadbeefcafe") == "status: session <redacted>"


def test_a_plans_json_form_is_redacted_before_its_digest() -> None:
    from reconciler.core.sanitize import register_secret
    from reconciler.render import jsonplan

    plan = _reference_plan()
    secret = "sbxjwt.0badc0ffee0badc0ffee"
    plan = plan.model_copy(update={"notes": (f"sn3 said: jwt {secret}",)})
    register_secret(secret)
    document = jsonplan.to_wire(plan)
    text = jsonplan.dumps(plan)
    assert "0badc0ffee" not in text and "sn3 said: jwt <redacted>" in text
    assert document["content_digest"] == jsonplan.content_digest(document)
    assert jsonplan.from_wire(json.loads(text)).notes == ("sn3 said: jwt <redacted>",)


def test_a_journal_line_is_written_redacted(tmp_path: Path) -> None:
    from reconciler.core.sanitize import register_secret
    from reconciler.shell.journal import Journal, read_entries

    plan = _reference_plan()
    register_secret("machine-token-7f3a9c")
    journal = Journal.open(tmp_path / "journal.jsonl")
    journal.run_started(plan)
    journal.result(plan.changes[0], "refused", "server said machine-token-7f3a9c is wrong")
    raw = (tmp_path / "journal.jsonl").read_text()
    assert "machine-token-7f3a9c" not in raw and "server said <redacted> is wrong" in raw
    assert len(list(read_entries(tmp_path / "journal.jsonl"))) == 2  # checksums still hold


def _reference_plan() -> Plan:
    from reconciler.core.planning import plan as make_plan
    from tests.plan.builders import reference_desired, reference_live

    made = make_plan(reference_desired(), reference_live())
    assert made.changes
    return made


def test_the_watchers_log_lines_are_redacted_text_and_json() -> None:
    import io

    from reconciler.core.sanitize import register_secret
    from reconciler.shell.watching import Log

    register_secret("bearer-9c1e5b2d4f6a")
    for fmt in ("text", "json"):
        stream = io.StringIO()
        Log(fmt, stream=stream).event("apply-failed", "sn1 said bearer-9c1e5b2d4f6a is stale",
                                      detail="again bearer-9c1e5b2d4f6a")
        assert "9c1e5b2d4f6a" not in stream.getvalue()
        assert "sn1 said <redacted> is stale" in stream.getvalue()
