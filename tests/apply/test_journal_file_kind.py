"""The journal reader vouches for the file before it reads a byte: a FIFO, a device (a
journal linked to ``/dev/zero``) or a file over the size limit is refused with its path
and what it is -- never read until memory runs out, never a hang -- by ``history``, by
``apply`` (over the real sandbox) and by the journal's own reader and writer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.shell import journal as journal_mod
from reconciler.shell.journal import Journal, JournalError, history, read_entries
from tests.apply.test_executing import changes_of
from tests.e2e_repo import PROJECT, Repo


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _zero(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("make, kind", [(_fifo, "a FIFO"), (_zero, "a character device")])
def test_the_reader_refuses_what_is_not_a_regular_file_at_once(
        tmp_path: Path, make: object, kind: str) -> None:
    path = make(tmp_path / "journal.jsonl")  # type: ignore[operator]
    started = time.monotonic()
    for read in (lambda: list(read_entries(path)), lambda: history(path),
                 lambda: Journal.open(path)):
        with pytest.raises(JournalError, match="not a regular file") as info:
            read()
        assert str(info.value).startswith(f"{path}: ") and kind in str(info.value)
    assert time.monotonic() - started < 5  # no hang on the FIFO, no 2 GB read of /dev/zero


def test_the_writer_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    path = _fifo(tmp_path / "journal.jsonl")
    journal = Journal(path)  # as if opened before the FIFO replaced the file
    with pytest.raises(JournalError, match="not a regular file"):
        journal.intent(changes_of("catalog")[0])
    assert journal.broken is not None  # no later line is sent either


def test_a_journal_over_the_size_limit_is_refused_before_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    Journal.open(path).intent(changes_of("catalog")[0])
    size = path.stat().st_size
    monkeypatch.setattr(journal_mod, "MAX_JOURNAL_BYTES", size - 1)
    read: list[int] = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real_read(fd, n))
    with pytest.raises(JournalError, match=f"is {size} bytes, over the {size - 1}-byte limit"):
        list(read_entries(path))
    assert not read
    monkeypatch.setattr(journal_mod, "MAX_JOURNAL_BYTES", size)
    assert len(list(read_entries(path))) == 1  # at the limit: read


def test_a_journal_linked_to_a_regular_file_still_reads(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere" / "journal.jsonl"
    Journal.open(real).intent(changes_of("catalog")[0])
    link = tmp_path / "state" / "journal.jsonl"
    link.parent.mkdir()
    link.symlink_to(real)
    assert len(list(read_entries(link))) == 1


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize("make", [_fifo, _zero])
def test_history_names_the_file_and_exits_1(tmp_path: Path, make: object) -> None:
    path = make(tmp_path / "journal.jsonl")  # type: ignore[operator]
    done = _cli("history", "--journal", str(path), env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert done.returncode == Exit.ERROR, done.stdout + done.stderr
    assert f"{path}: the apply journal is not a regular file" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("make", [_fifo, _zero])
def test_apply_refuses_a_journal_that_is_no_file_and_sends_nothing(
        repo: Repo, make: object) -> None:
    path = make(repo.state / "journal.jsonl")  # type: ignore[operator]
    before = len(repo.sandbox.audit())
    done = repo.run("apply", str(repo.path), "--auto-approve", timeout=60)
    assert done.code != Exit.OK, done.out + done.err
    assert f"{path}: the apply journal is not a regular file" in done.err
    assert "Traceback" not in done.err
    writes = [a for a in repo.sandbox.audit()[before:]
              if a["method"].startswith(("promote", "rollback", "setService", "configure"))]
    assert writes == []
