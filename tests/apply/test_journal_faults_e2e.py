"""A journal write that fails during a real apply (the sandbox, the real CLI): the run
fails honestly -- non-zero, the writes already sent named, never "Apply complete" -- and
the next run needs no hand edit: a torn tail is dropped with a warning naming the file,
``history`` reads past it, and the rerun converges with one rollout per change.

The disk filling is simulated at the boundary, in the apply's own process: the N-th line
appended to the journal is written only half (as ``write(2)`` does on a full disk).
``CUT_FAILS`` also makes cutting the torn half off fail, as after a crash.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.apply.test_apply_e2e import GENERATIONS, generations
from tests.e2e_repo import PROJECT, Repo, Result

pytestmark = pytest.mark.integration

WRITES = {"promoteServiceImageRelease", "rollbackServiceImageRelease", "setServiceEgress",
          "configureServiceDeploymentMachineUser", "createGreenfieldDeployment"}

BOOT = textwrap.dedent("""
    import errno, os, sys
    fail_at = int(os.environ["TEST_JOURNAL_FAIL_AT"])
    real_write, seen = os.write, [0]

    def write(fd, data):
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        if name.endswith("/journal.jsonl"):
            seen[0] += 1
            if seen[0] == fail_at:
                return real_write(fd, data[: len(data) // 2])  # the disk filled mid-line
        return real_write(fd, data)

    os.write = write
    if os.environ.get("CUT_FAILS"):
        def ftruncate(fd, size):
            raise OSError(errno.ENOSPC, "No space left on device")
        os.ftruncate = ftruncate
    from reconciler.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def faulty_apply(repo: Repo, fail_at: int, *, cut_fails: bool = False) -> Result:
    env = repo.env(TEST_JOURNAL_FAIL_AT=str(fail_at), **({"CUT_FAILS": "1"} if cut_fails
                                                         else {}))
    env["PYTHONPATH"] = str(PROJECT)
    done = subprocess.run([sys.executable, "-c", BOOT, "apply", str(repo.path),
                           "--auto-approve"], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)
    return Result(done.returncode, done.stdout, done.stderr)


def sent_writes(sandbox: Sandbox) -> list[dict[str, object]]:
    return [a for a in sandbox.audit() if a["method"] in WRITES]


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_a_journal_write_failing_mid_apply_fails_the_run_naming_what_was_sent(
        repo: Repo, sandbox: Sandbox, fail_at: int) -> None:
    failed = faulty_apply(repo, fail_at)
    assert failed.code == Exit.APPLY_FAILED, failed.out + failed.err
    assert "Apply complete" not in failed.out + failed.err
    assert "Converged" not in failed.out
    assert "short write" in failed.err and "the apply did not complete" in failed.err
    assert "Traceback" not in failed.err
    sent = sent_writes(sandbox)
    if fail_at == 1:  # the first intent line: its change, and every other, never sent
        assert sent == [] and "nothing was sent" in failed.err
    else:
        assert sent, "the fault is meant to strike after a first write was sent"
    # Every write the control plane received is named, by key where it carries one.
    for write in sent:
        key = write.get("idempotencyKey")
        service = str(write.get("serviceId", "")).removeprefix("svc-")
        assert (str(key) if key else service) in failed.err, (write, failed.err)
    named = [line for line in failed.err.splitlines() if "(key " in line]
    assert len(named) >= len({str(w.get("idempotencyKey") or w.get("serviceId"))
                              for w in sent})
    # The journal is whole (the torn half was cut off), and the next run converges,
    # each change one rollout.
    journal = repo.state / "journal.jsonl"
    assert journal.read_bytes().endswith(b"\n")
    history = repo.run("history", str(repo.path))
    assert history.code == Exit.OK, history.err
    assert ("interrupted" in history.out) == bool(sent), history.out
    rerun = repo.run("apply", str(repo.path), "--auto-approve")
    assert rerun.code == Exit.OK, rerun.out + rerun.err
    gens = generations(sandbox)
    assert gens["svc-checkout"] == GENERATIONS["svc-checkout"] + 1
    assert gens["svc-catalog"] == GENERATIONS["svc-catalog"] + 1


def test_a_torn_tail_left_behind_is_dropped_by_the_next_run_with_a_warning(
        repo: Repo, sandbox: Sandbox) -> None:
    failed = faulty_apply(repo, 2, cut_fails=True)
    assert failed.code == Exit.APPLY_FAILED, failed.out + failed.err
    journal = repo.state / "journal.jsonl"
    raw = journal.read_bytes()
    assert not raw.endswith(b"\n")  # torn, as a crash on a full disk leaves it
    torn_line = raw.count(b"\n") + 1
    # history works, and says what it skipped
    history = repo.run("history", str(repo.path))
    assert history.code == Exit.OK, history.err
    assert f"{journal}:{torn_line}: the apply journal's last line was torn" in history.err
    assert journal.read_bytes() == raw  # history only reads
    # the next apply drops it, says so, and converges
    rerun = repo.run("apply", str(repo.path), "--auto-approve")
    assert rerun.code == Exit.OK, rerun.out + rerun.err
    warning = next(line for line in rerun.err.splitlines() if line.startswith("warning:"))
    assert f"{journal}:{torn_line}:" in warning and "dropped" in warning
    torn_bytes = len(raw) - raw.rfind(b"\n") - 1
    assert f"{torn_bytes} byte(s)" in warning
    assert "Apply complete" in rerun.out
    text = journal.read_bytes()
    assert text.endswith(b"\n") and text.startswith(raw[: raw.rfind(b"\n") + 1])
    gens = generations(sandbox)
    assert gens["svc-checkout"] == GENERATIONS["svc-checkout"] + 1
    assert gens["svc-catalog"] == GENERATIONS["svc-catalog"] + 1
    again = repo.run("history", str(repo.path))
    assert again.code == Exit.OK and "warning" not in again.err
    assert os.path.getsize(journal) > len(raw)
