"""GO while apply is bound to fail (issue 18, item 3; issue 32), end to end against the sandbox.

A risk belongs to the plan: a cluster refusing the digest a PR *replaces* is drift, and
that PR, applied, converges; a cluster refusing the digest the repo pins is a risk.

With ``sn3`` refusing new digests (the sandbox's ``stuck`` fault: it keeps the previous
digest, says ``lastError: … deployer refused the image``, and its report makes the
control plane's rollout ``mismatched``), a PR promoting ``checkout`` plans GO -- the
writes are allowed -- with the risk in the first line of the text, Markdown and JSON
views; applying it stops the convergence gate within two polls of the control plane
reporting the new rollout mismatched (exit 15), naming sn3, each digest once, and why.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import PROJECT, Repo, git
from tests.plan.builders import digest

pytestmark = pytest.mark.integration

OLD = digest("checkout", "v2.3.0")  # what the stuck sn3 keeps running
LAST = digest("checkout", "v2.4.0")  # the rollout sn3 refused before the PR


def _pin(repo: Repo, new: str, tag: str) -> None:
    checkout = repo.path / "services" / "checkout.yaml"
    checkout.write_text(checkout.read_text().replace(LAST, new)
                        .replace("tag: v2.4.0", f"tag: {tag}"))
    git(repo.path, "commit", "-qam", f"promote checkout to {tag}")


def _head(repo: Repo) -> str:
    return subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def _stuck_sn3_refused_the_last_digest(repo: Repo, sandbox: Sandbox) -> None:
    """sn3 stuck; checkout promoted to v2.4.0, which sn3 refuses: the rollout mismatched."""
    sandbox.fault("sn3", "stuck")
    first = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert first.code == Exit.NOT_CONVERGED, first.out + first.err
    status = sandbox.rollout_statuses()["svc-checkout"]
    assert status["status"] == "mismatched" and status["expectedDigest"] == LAST, status
    assert "deployer refused the image" in \
        sandbox.cluster_status()["sn3"]["checkout"]["lastError"]


def test_a_pr_moving_past_the_refused_digest_is_go_without_a_risk_and_converges(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    """Issue 32: sn3 refuses only checkout's v2.4.0 (the control plane's current rollout,
    mismatched); a PR moves checkout on to v2.5.0. That refusal is about the digest the
    PR replaces: drift context, never "apply will not prove it" -- and merged and applied,
    the PR converges."""
    repo = repo_factory(sandbox, attempts=40, interval_seconds=0.5)
    sandbox.fault("sn3", "refuse-digest", digest=LAST)
    first = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert first.code == Exit.NOT_CONVERGED, first.out + first.err
    status = sandbox.rollout_statuses()["svc-checkout"]
    assert status["status"] == "mismatched" and status["expectedDigest"] == LAST, status
    base = _head(repo)
    new = sandbox.push("checkout", "v2.5.0")
    _pin(repo, new, "v2.5.0")

    text = repo.run("plan", str(repo.path), "--base", base, "--detailed-exitcode")
    assert text.code == Exit.CHANGES, text.out + text.err  # GO: the writes are allowed
    first_line = text.out.splitlines()[0]
    assert "will not prove" not in text.out and "Risks" not in text.out, text.out
    assert "deployer refused the image" in text.out  # the refusal is told, as drift
    md = repo.run("plan", str(repo.path), "--base", base, "--format", "markdown")
    assert md.code == Exit.OK, md.err
    assert "exit 15" not in md.out and "will not prove" not in md.out, md.out
    assert "⚠️" not in md.out.splitlines()[0].split("**GO** —")[1].split("·")[0], first_line
    data = json.loads(repo.run("plan", str(repo.path), "--base", base, "--format",
                               "json").out)
    assert data["verdict"] == "go" and data["risks"] == []
    assert any(c["service"] == "checkout" and c["actions"] == ["promote"]
               and c["release_after"]["digest"] == new for c in data["changes"])

    applied = repo.run("apply", str(repo.path), "--auto-approve", "--only", "checkout")
    assert applied.code == Exit.OK, applied.out + applied.err  # the fix converged


def test_a_cluster_refusing_the_pinned_digest_is_a_risk_in_every_first_line(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=40, interval_seconds=0.5)
    _stuck_sn3_refused_the_last_digest(repo, sandbox)  # the repo pins LAST, sn3 refused it
    text = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert text.code == Exit.CHANGES, text.out + text.err
    first = text.out.splitlines()[0]
    assert first.startswith("GO — sn3 refused the last digest for checkout "), first
    assert LAST[:19] in first and "deployer refused the image" in first
    assert "apply will not prove it until sn3 recovers" in first
    md = repo.run("plan", str(repo.path), "--format", "markdown")
    head = md.out.splitlines()[0]
    assert head.startswith("## reconcile plan: **GO** — ⚠️ `sn3` refused the last digest "
                           "for `checkout`"), head
    data = json.loads(repo.run("plan", str(repo.path), "--format", "json").out)
    (risk,) = data["risks"]
    assert (risk["code"], risk["service"], risk["cluster"], risk["digest"], risk["running"]) \
        == ("cluster_refused_release", "checkout", "sn3", LAST, OLD)
    assert risk["message"] in first  # the same sentence in every view


def test_apply_over_a_refusing_cluster_stops_within_two_polls_of_the_mismatch(
        repo_factory: Callable[..., Repo], sandbox: Sandbox, tmp_path: Path) -> None:
    attempts, interval = 40, 0.5
    repo = repo_factory(sandbox, attempts=attempts, interval_seconds=interval)
    _stuck_sn3_refused_the_last_digest(repo, sandbox)
    new = sandbox.push("checkout", "v2.5.0")
    _pin(repo, new, "v2.5.0")

    mismatched: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            status = sandbox.rollout_statuses().get("svc-checkout", {})
            if status.get("expectedDigest") == new and status.get("status") == "mismatched":
                mismatched.append(time.monotonic())
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "apply", str(repo.path), "--auto-approve",
         "--only", "checkout"], cwd=PROJECT, env=repo.env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stderr is not None
    polls: list[float] = []
    out_lines = []
    for line in proc.stdout:
        out_lines.append(line)
        if line.lstrip().startswith("gate "):
            polls.append(time.monotonic())
    err = proc.stderr.read()
    proc.wait(timeout=120)
    elapsed = time.monotonic() - started
    done.set()
    watcher.join(timeout=5)
    out = "".join(out_lines)
    gate = [t - started for t in polls]
    print(f"\napply over a refusing sn3: exit {proc.returncode}, {len(polls)} gate poll(s), "
          f"{elapsed:.1f}s in all, gate {gate[-1] - gate[0] if gate else 0:.1f}s"
          + (f", mismatch seen {mismatched[0] - started:.1f}s in" if mismatched else ""))
    assert proc.returncode == Exit.NOT_CONVERGED, out + err
    assert mismatched, "the control plane never reported the new rollout mismatched"
    after = [t for t in polls if t >= mismatched[0]]
    assert 1 <= len(after) <= 2, (len(polls), len(after), out)
    assert len(polls) < attempts
    # One message: the cluster, each digest once, and the reason.
    assert "stopped" in err and "mismatched" in err, err
    line = next(x for x in err.splitlines() if "on sn3" in x)
    assert "deployer refused the image" in line
    assert err.count(new) == 1 and err.count(OLD) == 1, err
    assert "Converged" not in out and "Apply complete" not in out
