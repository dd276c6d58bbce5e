"""``shell.control`` alone: who may ask, what a suspension file says after a restart,
and ``watch-ctl`` refusing to send the token in clear text beyond loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.shell.control import STATE_FILE, Control, is_loopback, load_suspension
from tests.e2e_repo import PROJECT

AUTH = "Bearer t0ken"


def control(tmp_path: Path, **kw: object) -> Control:
    return Control(token="t0ken", state_file=tmp_path / STATE_FILE, **kw)  # type: ignore[arg-type]


def test_only_loopback_peers_unless_remote_is_allowed(tmp_path: Path) -> None:
    assert control(tmp_path).handle("/suspend", AUTH, "192.0.2.7", b"").status == 403
    assert control(tmp_path).handle("/suspend", AUTH, "::ffff:127.0.0.1", b"").status == 200
    remote = control(tmp_path, allow_remote=True)
    assert remote.handle("/resume", AUTH, "192.0.2.7", b"").status == 200
    assert is_loopback("::1") and is_loopback("127.3.4.5") and not is_loopback("10.0.0.1")


def test_a_suspension_survives_a_new_control_and_resume_clears_it(tmp_path: Path) -> None:
    first = control(tmp_path)
    answer = first.handle("/suspend", AUTH, "127.0.0.1", b'{"reason": "deploy freeze"}')
    assert answer.status == 200 and answer.body["changed"] is True
    again = control(tmp_path)  # a restart
    assert again.suspended and again.suspension is not None
    assert again.suspension.reason == "deploy freeze"
    assert "deploy freeze" in (again.detail() or "")
    assert again.handle("/reconcile", AUTH, "127.0.0.1", b"").status == 409
    assert not again.take_request()
    assert again.handle("/resume", AUTH, "127.0.0.1", b"").status == 200
    assert again.take_request() and not again.take_request()  # resume: one cycle
    assert not (tmp_path / STATE_FILE).exists() and not control(tmp_path).suspended


def test_reconcile_requests_coalesce_into_one_cycle(tmp_path: Path) -> None:
    woken: list[int] = []
    c = control(tmp_path)
    c.bind(lambda: woken.append(1))
    for _ in range(3):
        assert c.handle("/reconcile", AUTH, "127.0.0.1", b"").status == 202
    assert c.take_request() and not c.take_request() and len(woken) == 3


def test_an_unreadable_suspension_file_keeps_the_watcher_suspended(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")
    suspension = load_suspension(tmp_path / STATE_FILE)
    assert suspension is not None and "unreadable" in suspension.reason


def test_a_state_dir_that_cannot_be_written_refuses_the_suspension(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    c = Control(token="t0ken", state_file=blocker / "state" / STATE_FILE)
    answer = c.handle("/suspend", AUTH, "127.0.0.1", b"")
    assert answer.status == 500 and "not suspended" in answer.body["error"]
    assert not c.suspended


def test_wrong_or_missing_token_is_401_and_says_nothing_else(tmp_path: Path) -> None:
    c = control(tmp_path)
    for auth in (None, "Bearer nope", "Basic t0ken", "Bearer"):
        answer = c.handle("/suspend", auth, "127.0.0.1", b"")
        assert answer.status == 401 and "t0ken" not in json.dumps(answer.body)
    assert not c.suspended


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize("url, code", [("http://192.0.2.7:9108", Exit.USAGE),
                                       ("ftp://127.0.0.1:1", Exit.USAGE)])
def test_watch_ctl_refuses_clear_text_beyond_loopback(tmp_path: Path, url: str,
                                                     code: int) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
    env["PYTHONPATH"] = str(PROJECT)
    done = subprocess.run([sys.executable, "-m", "reconciler", "watch-ctl", "suspend",
                           "--url", url, "--token-file", str(token)], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == code and "t0ken" not in done.stderr, done.stderr


def test_a_suspension_found_with_control_off_says_how_to_lift_it(tmp_path: Path) -> None:
    control(tmp_path).handle("/suspend", AUTH, "127.0.0.1", b"")
    off = Control(token=None, state_file=tmp_path / STATE_FILE)
    assert off.suspended
    said = off.detail() or ""
    assert "--control-token-file" in said and str(tmp_path / STATE_FILE) in said
    assert off.handle("/resume", AUTH, "127.0.0.1", b"").status == 404  # control is off


def test_a_watcher_restarted_while_suspended_is_ready_and_says_suspended(
        tmp_path: Path) -> None:
    """A suspension is a state an operator chose: a watcher that starts suspended has read
    nothing and is ready all the same (a redeployed pod must become Ready), on the served
    ``/readyz`` and in the readiness the gauge reads; resumed, it is the live side again."""
    from prometheus_client import CollectorRegistry

    from reconciler.shell.health import Readiness, serve
    from tests.watch.test_health_unit import get

    control(tmp_path).handle("/suspend", AUTH, "127.0.0.1", b'{"reason": "incident 42"}')
    restarted = control(tmp_path)
    readiness = Readiness()  # never observed anything
    endpoint = serve("127.0.0.1", 0, CollectorRegistry(), readiness, restarted)
    try:
        port = int(endpoint.address.rsplit(":", 1)[1])
        status, body = get(port, "/readyz")
        assert status == 200, body
        lines = body.splitlines()
        assert lines[0] == "suspended"
        assert lines[1].startswith("suspended since") and "incident 42" in lines[1]
        assert "no observation of the live side yet" in lines[2]  # what resume will face
        assert readiness.state()[0]
        readiness.failed("control_plane: 503")
        readiness.failed("control_plane: 503")
        assert get(port, "/readyz")[0] == 200  # suspended, whatever the last reads said
        assert restarted.handle("/resume", AUTH, "127.0.0.1", b"").status == 200
        status, body = get(port, "/readyz")
        assert status == 503 and "suspended" not in body, body
        readiness.succeeded()
        assert get(port, "/readyz") == (200, "ready\n")
    finally:
        endpoint.close()
