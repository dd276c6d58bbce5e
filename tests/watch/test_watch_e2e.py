"""`reconcile watch` end to end: the real watcher process on a temporary git repo,
against the real sandbox. Events are read from its JSON log lines."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo, git
from tests.plan.builders import digest
from tests.watch.events import Watch, watch_process

pytestmark = pytest.mark.integration

WRITES = {"promoteServiceImageRelease", "rollbackServiceImageRelease", "setServiceEgress",
          "configureServiceDeploymentMachineUser"}


@contextmanager
def watching(repo: Repo, *args: str) -> Iterator[Watch]:
    with watch_process(str(repo.path), "--log-format", "json", *args,
                       env=repo.env()) as watch:
        yield watch


def is_plan(e: dict[str, Any]) -> bool:
    return e["event"] == "plan"


def test_an_edit_produces_a_new_plan_showing_only_the_difference(repo: Repo) -> None:
    with watching(repo, "--resync", "600") as w:
        first = w.wait_for(is_plan)
        assert first["verdict"] == "go"
        search = repo.path / "services" / "search.yaml"
        search.write_text(search.read_text().replace("egress: []", ""))
        # An uncommitted edit is not desired state: the plan still reads the commit and
        # only says the tree is dirty -- for the repo, and for the new service (ledger)
        # whose preflight would carry sourceDirty (SOURCE_WORKTREE_DIRTY, not sent).
        event = w.wait_for(lambda e: is_plan(e) and "files changed" in e["message"])
        assert sorted(line.split(":", 1)[0] for line in event["lines"]) == [
            "+ blocker preflight_no_go", "+ blocker repo_dirty"], event["lines"]
        assert "ledger: SOURCE_WORKTREE_DIRTY" in event["lines"][0], event["lines"]
        repo.commit("search: leave egress alone")
        event = w.wait_for(lambda e: is_plan(e) and e["message"].startswith(
            ("files changed", "HEAD moved")) and len(e.get("lines", [])) > 1)
        assert "- set egress: search: egress revokes api.openai.com:443, es.example.net:9200" \
            in event["lines"]
        assert any(line.startswith("- blocker repo_dirty") for line in event["lines"])
        # ...and ledger's SOURCE_WORKTREE_DIRTY, its preflight asked again at the new commit
        assert any(line.startswith("- blocker preflight_no_go: ledger: SOURCE_WORKTREE_DIRTY")
                   for line in event["lines"]), event["lines"]
        assert len(event["lines"]) == 3  # the difference, not the whole plan again


def test_an_invalid_edit_keeps_the_last_good_state_and_is_reported_once(repo: Repo) -> None:
    with watching(repo, "--resync", "600") as w:
        w.wait_for(is_plan)
        checkout = repo.path / "services" / "checkout.yaml"
        good = checkout.read_text()
        checkout.write_text(good.replace("port: 443", "port: 0443x"))
        repo.commit("a bad port")
        invalid = w.wait_for(lambda e: e["event"] == "invalid")
        assert "keeping the last good desired state" in invalid["message"]
        assert any("checkout.yaml:" in line and "port" in line for line in invalid["lines"])
        checkout.write_text(good.replace("port: 443", "port: 0443x") + "\n")  # same problem
        repo.commit("the same bad port")
        later = w.drain(2.5)
        assert not [e for e in later if e["event"] == "invalid"], "reported twice"
        checkout.write_text(good)
        repo.commit("fixed")
        w.wait_for(lambda e: is_plan(e))


#: The burst's quiet time: the watcher must see fifty commits that land well within it of
#: each other as one change (the test checks that they did rather than assumes it).
BURST_DEBOUNCE = 3.0


def _prepared_commits(repo: Repo, count: int) -> tuple[list[str], list[str]]:
    """``count`` commits on top of HEAD, each a new port in notifications.yaml, made in a
    side clone and fetched into the repo's object store -- HEAD, index and files untouched
    -- so the burst itself need not spawn ``git commit`` fifty times (under load one such
    spawn has taken over a second, longer than a burst's gaps may be). Their ids and
    each one's notifications.yaml, in order."""
    side = repo.path.parent / "burst-side"
    subprocess.run(["git", "clone", "-q", str(repo.path), str(side)], check=True,
                   capture_output=True)
    notifications = side / "services" / "notifications.yaml"
    base = notifications.read_text()
    texts = []
    for i in range(count):
        texts.append(base.replace("port: 587", f"port: {1000 + i}"))
        notifications.write_text(texts[-1])
        git(side, "commit", "-qam", f"burst {i}")
    ids = subprocess.run(["git", "-C", str(side), "rev-list", "--reverse", f"HEAD~{count}..HEAD"],
                         capture_output=True, text=True, check=True).stdout.split()
    git(repo.path, "fetch", "-q", str(side), "HEAD")
    shutil.rmtree(side)
    assert len(ids) == count
    return ids, texts


def test_a_burst_of_fifty_commits_yields_one_reconcile_at_the_final_commit(repo: Repo) -> None:
    ids, texts = _prepared_commits(repo, 50)
    notifications = repo.path / "services" / "notifications.yaml"
    with watching(repo, "--resync", "600", "--debounce", str(BURST_DEBOUNCE)) as w:
        w.wait_for(is_plan)
        # Fifty commits land on the watched branch one after the other, each with its file
        # in the work tree, as fifty `git commit`s would: the file written, then the
        # branch moved by one `git update-ref --stdin` transaction (one process for all
        # fifty, answering each "commit" before the next file is written).
        mover = subprocess.Popen(["git", "-C", str(repo.path), "update-ref", "--stdin"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert mover.stdin is not None and mover.stdout is not None
        gaps, last = [], time.monotonic()
        try:
            for commit, text in zip(ids, texts, strict=True):
                notifications.write_text(text)
                mover.stdin.write(f"start\nupdate HEAD {commit}\ncommit\n")
                mover.stdin.flush()
                assert [mover.stdout.readline().strip() for _ in range(2)] == [
                    "start: ok", "commit: ok"]
                gaps.append(time.monotonic() - last)
                last = time.monotonic()
        finally:
            mover.stdin.close()
            mover.wait(timeout=30)
        git(repo.path, "reset", "-q")  # the index to the final commit, as `commit` leaves it
        head = subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert head == ids[-1]
        # A burst by the watcher's definition: no two commits a quiet time apart.
        assert max(gaps) < BURST_DEBOUNCE, f"not a burst: a commit took {max(gaps):.2f}s"
        event = w.wait_for(lambda e: is_plan(e) and e["message"].startswith(
            ("files changed", "HEAD moved")), timeout=120)
        later = w.drain(BURST_DEBOUNCE + 1.0)
        reconciles = [event, *[e for e in later if is_plan(e)]]
        assert len(reconciles) == 1, (reconciles, f"slowest commit {max(gaps):.2f}s")
        assert event["commit"] == head
        assert any("1049" in line for line in event["lines"])


def test_drift_injected_in_the_sandbox_is_caught_by_the_resync(repo: Repo,
                                                              sandbox: Sandbox) -> None:
    with watching(repo, "--resync", "1") as w:
        w.wait_for(is_plan)
        sandbox.fault("sn2", "down")
        event = w.wait_for(lambda e: is_plan(e) and "resync" in e["message"]
                           and e["verdict"] == "no_go")
        # Each resync asks the mesh again: sn2's health fails, so it is one root cause.
        assert any("cluster_unreachable" in line and "sn2" in line for line in event["lines"])


def test_apply_converges_and_the_next_cycle_makes_no_write(repo: Repo, sandbox: Sandbox) -> None:
    with watching(repo, "--apply", "--resync", "1", "--metrics-port", "0") as w:
        applied = w.wait_for(lambda e: e["event"] in ("applied", "apply-failed",
                                                      "apply-refused"), timeout=90)
        assert applied["event"] == "applied", applied
        w.wait_for(lambda e: is_plan(e) and e["verdict"] == "no_changes")
        writes = len([a for a in sandbox.audit() if a["method"] in WRITES])
        w.drain(3.0)  # at least two more resync cycles
        assert len([a for a in sandbox.audit() if a["method"] in WRITES]) == writes
    status = sandbox.cluster_status()
    assert all(status[c]["checkout"]["resolvedDigest"] == digest("checkout", "v2.4.0")
               for c in ("sn1", "sn2", "sn3"))


def test_apply_never_runs_from_uncommitted_edits(repo: Repo, sandbox: Sandbox) -> None:
    search = repo.path / "services" / "search.yaml"
    search.write_text(search.read_text().replace("egress: []", ""))  # dirty, not committed
    with watching(repo, "--apply", "--resync", "1") as w:
        event = w.wait_for(lambda e: is_plan(e))
        assert event["verdict"] == "no_go"
        w.drain(3.0)
    assert not [a for a in sandbox.audit() if a["method"] in WRITES]


def test_sigterm_mid_apply_leaves_a_consistent_journal_and_the_next_run_converges(
        repo_factory: Callable[..., Repo], sandbox_factory: Callable[..., Sandbox]) -> None:
    sandbox = sandbox_factory(converge_delay_ms=3000)
    repo = repo_factory(sandbox)
    with watching(repo, "--apply", "--resync", "1") as w:
        w.wait_for(lambda e: e["event"] == "apply-progress" and "Convergence gate" in
                   e["message"], timeout=90)
        w.proc.send_signal(signal.SIGTERM)
        assert w.proc.wait(timeout=20) == 0
        stopped = w.drain(1.0)
        assert any(e["event"] == "apply-abandoned" for e in [*w.seen, *stopped])
    journal = (repo.state / "journal.jsonl").read_text().splitlines()
    assert journal and all("sum" in json.loads(line) for line in journal)
    rerun = repo.run("apply", str(repo.path), "--auto-approve")
    assert rerun.code == Exit.OK, rerun.out + rerun.err
    gens = {sid: s["rolloutGeneration"] for sid, s in sandbox.rollout_statuses().items()}
    assert gens["svc-checkout"] == 4 and gens["svc-catalog"] == 6


def test_metrics_endpoint_serves_the_last_plan(repo: Repo) -> None:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with watching(repo, "--resync", "600", "--metrics-port", str(port)) as w:
        w.wait_for(is_plan)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        text = body.decode()
        assert 'reconcile_plan_verdict{verdict="go"} 1.0' in text
        assert 'reconcile_plan_changes{action="promote"} 1.0' in text


def test_the_file_filter_judges_paths_relative_to_the_repo(tmp_path: Path) -> None:
    from watchfiles import Change

    from reconciler.shell.watching import config_file_filter
    root = tmp_path / ".config" / "fleet"
    accept = config_file_filter(root)
    assert accept(Change.modified, str(root / "services" / "a.yaml"))
    assert not accept(Change.modified, str(root / ".git" / "x.yaml"))
    assert not accept(Change.modified, str(root / "services" / "a.txt"))
    assert not accept(Change.modified, str(tmp_path / "elsewhere.yaml"))


def test_a_directory_outside_git_is_watched_by_its_files(repo: Repo) -> None:
    # Outside git there is no commit: the files are the desired state, so a save re-plans
    # (inside git only a commit, or a change of the dirty state, does).
    shutil.rmtree(repo.path / ".git")
    with watching(repo, "--resync", "600") as w:
        first = w.wait_for(is_plan)
        assert first["commit"] is None
        search = repo.path / "services" / "search.yaml"
        search.write_text(search.read_text().replace("egress: []", ""))
        event = w.wait_for(lambda e: is_plan(e) and "files changed" in e["message"])
        assert "- set egress: search: egress revokes api.openai.com:443, es.example.net:9200" \
            in event["lines"]


def test_each_resync_asks_the_mesh_again_so_a_cluster_that_comes_back_is_seen(
        repo: Repo) -> None:
    # The watcher used to resolve the mesh once for its whole life: a cluster down at start
    # stayed silent (NO-GO) forever, and a cluster that appeared later was never expected.
    repo.sandbox.fault("sn2", "down")
    with watching(repo, "--resync", "1") as w:
        first = w.wait_for(is_plan)
        assert first["verdict"] == "no_go"
        repo.sandbox.fault("sn2", "down", on=False)
        back = w.wait_for(lambda e: is_plan(e) and e.get("verdict") == "go", timeout=60)
        assert any("cluster_unreachable" in line for line in back["lines"]), back["lines"]
