"""A journal write that fails, and the torn tail a crash or a full disk leaves.

A short write (the disk filling mid-line) raises, cuts the torn bytes off again, and
stops the journal taking any further line, so nothing more is sent. A torn *tail* is
dropped by the next ``Journal.open`` with a description naming the file, the line and
the bytes, and skipped (with the same words) by ``history``; damage anywhere else is
still refused. One case runs in a subprocess under a real file-size limit
(``RLIMIT_FSIZE``), where the kernel itself makes the write short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.shell import journal as journal_mod
from reconciler.shell.journal import Journal, JournalError, history, read_entries
from tests.apply.test_executing import changes_of
from tests.e2e_repo import PROJECT


def written(path: Path) -> Journal:
    journal = Journal.open(path)
    change = changes_of("catalog")[0]
    journal.intent(change)
    journal.result(change, "applied")
    return journal


TORN = {
    "no-newline": lambda line: line[: len(line) // 2],
    "no-newline-bad-checksum": lambda line: line.replace('"intent"', '"intant"').rstrip("\n"),
    "zeros": lambda line: "\0" * 40,
}


@pytest.mark.parametrize("damage", list(TORN), ids=list(TORN))
def test_a_torn_tail_is_dropped_by_the_next_open_and_said(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "journal.jsonl"
    written(path)
    good = path.read_bytes()
    change = changes_of("search")[0]
    whole = json.dumps({"event": "intent", "key": change.idempotency_key, "sum": "x",
                        "v": 1}) + "\n"
    if damage == "no-newline-bad-checksum":
        Journal.open(path).intent(change)  # a whole line, then its checksum spoilt
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:-1]) + TORN[damage](lines[-1]))
    else:
        path.write_bytes(good + TORN[damage](whole).encode())
    torn_bytes = len(path.read_bytes()) - len(good)
    with pytest.raises(JournalError, match=rf"^{path}:3: the last line .* is torn"):
        list(read_entries(path))  # a reader that did not ask to skip it is told
    told: list[str] = []
    runs = history(path, on_torn=lambda t: told.append(t.describe()))
    assert told and told[0].startswith(f"{path}:3: ") and f"{torn_bytes} byte(s)" in told[0]
    assert runs  # the good lines still read
    reopened = Journal.open(path)
    assert reopened.repaired is not None and reopened.repaired.line == 3
    assert "dropped" in reopened.repaired.describe()
    assert path.read_bytes() == good  # truncated to the last good line, nothing else
    assert not reopened.in_doubt(changes_of("catalog")[0].idempotency_key)
    assert Journal.open(path).repaired is None  # said once: the file is whole again
    reopened.intent(change)  # and appends go on from there
    assert [e["event"] for _, e in read_entries(path)] == ["intent", "result", "intent"]


@pytest.mark.parametrize("damage", [
    lambda text: text.replace("\n", "\n{\"torn\n", 1),  # a torn line with a good one after
    lambda text: text.replace('"intent"', '"intant"', 1) + '{"torn',  # two damaged lines
    lambda text: text.split("\n", 1)[0][:30],  # the only line, torn
])
def test_a_damaged_line_elsewhere_is_still_refused(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "journal.jsonl"
    written(path)
    assert callable(damage)
    path.write_text(damage(path.read_text()))
    before = path.read_bytes()
    with pytest.raises(JournalError, match=rf"^{path}:\d+: the apply journal is corrupt"):
        Journal.open(path)
    with pytest.raises(JournalError):
        history(path, on_torn=lambda t: None)
    assert path.read_bytes() == before  # never "repaired"


def _last_line(text: str, edit: Callable[[str], str]) -> str:
    *lines, last, end = text.split("\n")
    assert end == ""  # the journal ends with its newline
    return "\n".join([*lines, edit(last)]) + "\n"


def _other_version(line: str) -> str:
    entry = json.loads(line)
    entry["v"] = 2
    return json.dumps(entry, sort_keys=True)


WHOLE_BUT_UNREADABLE = {
    "another-version": _other_version,
    "edited": lambda line: line.replace('"applied"', '"failed"'),
    "half-with-newline": lambda line: line[: len(line) // 2],
}


@pytest.mark.parametrize("edit", list(WHOLE_BUT_UNREADABLE), ids=list(WHOLE_BUT_UNREADABLE))
def test_a_whole_last_line_that_does_not_read_is_corrupt_not_torn(
        tmp_path: Path, edit: str) -> None:
    """A last line that ends with its newline was written whole: when it does not read
    (another version wrote it, someone edited it), it is no torn write. It is refused,
    naming the file and the line, and the file is left as it is."""
    path = tmp_path / "journal.jsonl"
    written(path)
    path.write_text(_last_line(path.read_text(), WHOLE_BUT_UNREADABLE[edit]))
    before = path.read_bytes()
    assert before.endswith(b"\n")
    with pytest.raises(JournalError, match=rf"^{path}:2: the apply journal is corrupt .*"
                       "no torn write"):
        Journal.open(path)
    with pytest.raises(JournalError, match=rf"^{path}:2: the apply journal is corrupt"):
        history(path, on_torn=lambda t: None)
    assert path.read_bytes() == before  # never "repaired"


def test_a_short_write_raises_cuts_the_torn_bytes_and_stops_the_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    journal = written(path)
    good = path.read_bytes()
    real_write = os.write

    def half(fd: int, data: bytes) -> int:  # the disk fills half way through the line
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(journal_mod.os, "write", half)
    change = changes_of("search")[0]
    with pytest.raises(JournalError, match=r"short write .* the disk is full"):
        journal.intent(change)
    monkeypatch.setattr(journal_mod.os, "write", real_write)
    assert path.read_bytes() == good  # the torn half was cut off again
    assert journal.broken is not None
    with pytest.raises(JournalError, match="stopped taking lines"):
        journal.intent(changes_of("checkout")[0])  # nothing more is sent
    assert path.read_bytes() == good
    assert change.idempotency_key not in journal.sent_now


def test_a_failed_result_line_keeps_the_outcome_known_to_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    change = changes_of("catalog")[0]
    journal.intent(change)

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal_mod.os, "write", full)
    with pytest.raises(JournalError, match="No space left on device"):
        journal.result(change, "applied")
    [line] = journal.sent_lines()
    assert change.idempotency_key in line and change.service in line and "applied" in line


@pytest.mark.integration  # starts a process of its own
def test_under_a_real_file_size_limit_the_kernel_tears_the_write(tmp_path: Path) -> None:
    """RLIMIT_FSIZE: the kernel writes what fits, then refuses (SIGXFSZ ignored, as a
    process that must report the failure would). The journal raises, and leaves the file
    as it was."""
    path = tmp_path / "journal.jsonl"
    written(path)
    good = path.read_bytes()
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({len(good) + 40}, {len(good) + 40}))
        from pathlib import Path
        from reconciler.shell.journal import Journal, JournalError
        from tests.apply.test_executing import changes_of
        journal = Journal.open(Path({str(path)!r}))
        try:
            journal.intent(changes_of("search")[0])
        except JournalError as exc:
            print("refused:", exc)
            sys.exit(3)
        sys.exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=PROJECT, capture_output=True,
                          text=True, timeout=60,
                          # no bytecode written under the size limit: the kernel would
                          # cut the cache file short for every other process too
                          env={**os.environ, "PYTHONPATH": str(PROJECT),
                               "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 3, done.stdout + done.stderr
    assert "cannot append to the apply journal" in done.stdout
    assert path.read_bytes() == good
