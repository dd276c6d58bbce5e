"""Control of a running watcher (the real watcher process, the real sandbox, the real
``reconcile watch-ctl``): suspend -> no plan and no apply until resume, across a
restart (the suspension is kept in the state directory); resume -> a cycle at once;
``/reconcile`` -> exactly one cycle now. Control is off without a token file, answers
only the bearer token, and the suspended state shows in ``/readyz`` and the metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell.control import STATE_FILE
from tests.e2e_repo import PROJECT, Repo
from tests.watch.test_watch_e2e import WRITES, is_plan, watching
from tests.watch.test_watch_health import get, metrics
from tests.watch.test_watch_proof import free_port

pytestmark = pytest.mark.integration


def ctl(repo: Repo, port: int, token_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", "watch-ctl", *args,
         "--url", f"http://127.0.0.1:{port}", "--token-file", str(token_file)],
        cwd=PROJECT, env=repo.env(), capture_output=True, text=True, timeout=30)


def post(port: int, path: str, token: str | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"{}",
                                     method="POST")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def writes(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [a for a in sandbox.audit() if a["method"] in WRITES]


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "control-token"
    path.write_text("s3cret-control-token\n")
    return path


def test_suspend_holds_every_cycle_across_a_restart_until_resume(
        repo: Repo, sandbox: Sandbox, token_file: Path) -> None:
    port = free_port()
    flags = ("--resync", "1", "--metrics-port", str(port), "--control-token-file",
             str(token_file))
    with watching(repo, *flags) as w:
        w.wait_for(is_plan)
        done = ctl(repo, port, token_file, "suspend", "--reason", "incident 42")
        assert done.returncode == 0, done.stderr
        assert "suspended (incident 42)" in done.stdout
        w.wait_for(lambda e: e["event"] == "suspended")
        cycles = metrics(port)["reconcile_watch_cycles_total"]
        later = w.drain(3.5)  # three resyncs' worth
        assert not [e for e in later if is_plan(e)], [e["event"] for e in later]
        m = metrics(port)
        assert m["reconcile_watch_cycles_total"] == cycles
        assert m["reconcile_suspended"] == 1
        assert m['reconcile_plan_verdict{verdict="unknown"}'] == 1  # nothing read: unknown
        assert {k.split('verdict="')[1].split('"')[0] for k in m
                if k.startswith("reconcile_service_info{")} == {"unknown"}
        status, body = get(port, "/readyz")
        assert status == 200 and body.splitlines()[0] == "suspended", body
        assert "suspended since" in body and "incident 42" in body
        # Reconcile-now is refused while suspended: suspension means no cycle at all.
        refused = ctl(repo, port, token_file, "reconcile")
        assert refused.returncode == Exit.ERROR and "409" in refused.stderr
        assert (repo.state / STATE_FILE).exists()

    # A restart, now with --apply and a GO plan waiting: still suspended, nothing sent.
    before = len(writes(sandbox))
    with watching(repo, "--apply", *flags) as w:
        started = w.wait_for(lambda e: e["event"] == "suspended", timeout=30)
        assert "incident 42" in started["message"]
        later = w.drain(4)
        assert not [e for e in later if is_plan(e) or e["event"].startswith("apply")]
        assert len(writes(sandbox)) == before
        # Never observed since the restart, and ready all the same: suspension is a
        # state an operator chose, and a redeployed suspended watcher must become Ready.
        status, body = get(port, "/readyz")
        assert status == 200, body
        assert body.splitlines()[0] == "suspended" and "suspended since" in body
        assert "incident 42" in body
        assert metrics(port)["reconcile_suspended"] == 1
        assert metrics(port)["reconcile_ready"] == 1

        done = ctl(repo, port, token_file, "resume")
        assert done.returncode == 0 and "resumed" in done.stdout, done.stderr
        w.wait_for(lambda e: e["event"] == "resumed", timeout=10)
        w.wait_for(is_plan, timeout=30)
        applied = w.wait_for(lambda e: e["event"] in ("applied", "apply-failed"), timeout=90)
        assert applied["event"] == "applied", applied
        assert len(writes(sandbox)) > before
        assert metrics(port)["reconcile_suspended"] == 0
        assert not (repo.state / STATE_FILE).exists()
        assert get(port, "/readyz")[1] == "ready\n"


def test_reconcile_now_runs_exactly_one_cycle(
        repo: Repo, sandbox: Sandbox, token_file: Path) -> None:
    port = free_port()
    with watching(repo, "--resync", "600", "--metrics-port", str(port),
                  "--control-token-file", str(token_file)) as w:
        w.wait_for(is_plan)
        w.drain(1)
        m = metrics(port)
        # The per-service metrics of the same plan, over the real port: one info series
        # per service of the repo, and the commit HEAD is at.
        info = [k for k in m if k.startswith("reconcile_service_info{")]
        services = sorted(p.stem for p in (repo.path / "services").glob("*.yaml"))
        assert sorted(k.split('service="')[1].split('"')[0] for k in info) == services
        assert all('verdict="' in k and 'pinned_digest="sha256:' in k for k in info)
        head = subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert any(k.startswith(f'reconcile_commit_info{{commit="{head}"') for k in m)
        cycles = m["reconcile_watch_cycles_total"]
        reads = len(sandbox.audit())
        done = ctl(repo, port, token_file, "reconcile")
        assert done.returncode == 0 and "a cycle starts now" in done.stdout, done.stderr
        event = w.wait_for(is_plan, timeout=20)
        assert event["message"].startswith("reconcile requested"), event
        later = w.drain(2.5)
        assert not [e for e in later if is_plan(e)]  # one cycle, not a resync loop
        assert metrics(port)["reconcile_watch_cycles_total"] == cycles + 1
        assert len(sandbox.audit()) > reads  # the live side was read again, not replanned


def test_control_answers_only_the_token_and_is_off_without_one(
        repo: Repo, token_file: Path) -> None:
    port = free_port()
    with watching(repo, "--resync", "600", "--metrics-port", str(port),
                  "--control-token-file", str(token_file)) as w:
        w.wait_for(is_plan)
        assert post(port, "/suspend", None)[0] == 401
        assert post(port, "/suspend", "wrong")[0] == 401
        assert post(port, "/pause", "s3cret-control-token")[0] == 404
        assert metrics(port)["reconcile_suspended"] == 0
        assert get(port, "/readyz") == (200, "ready\n")
        assert "s3cret" not in "".join(str(e) for e in w.drain(0.5) + w.seen)
    port = free_port()
    with watching(repo, "--resync", "600", "--metrics-port", str(port)) as w:
        w.wait_for(is_plan)
        status, body = post(port, "/suspend", "s3cret-control-token")
        assert status == 404 and "--control-token-file" in body["error"]
        assert metrics(port)["reconcile_suspended"] == 0


def test_a_token_file_without_the_metrics_port_is_a_usage_error(
        repo: Repo, token_file: Path) -> None:
    done = repo.run("watch", str(repo.path), "--control-token-file", str(token_file),
                    timeout=30)
    assert done.code == Exit.USAGE and "--metrics-port" in done.err
    missing = repo.run("watch", str(repo.path), "--metrics-port", "0",
                       "--control-token-file", str(token_file.with_name("nope")), timeout=30)
    assert missing.code == Exit.ERROR and "nope: cannot read the control token file" in \
        missing.err
