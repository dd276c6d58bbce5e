"""The journal file itself: a 0-byte journal is truncation, and the tool never leaves one.

A journal this tool creates always holds its first line (it is written under a temporary
name and linked into place), so an empty file at the journal's path means the journal
was truncated -- and is refused like any other corruption, never read as "nothing sent".
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from reconciler.shell import journal as journal_mod
from reconciler.shell.journal import Journal, JournalError
from tests.apply.test_executing import changes_of


def test_a_missing_journal_reads_as_nothing_sent(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "journal.jsonl")
    assert journal.sent == set() and journal.results == {}


def test_a_zero_byte_journal_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"")
    with pytest.raises(JournalError, match="corrupt") as info:
        Journal.open(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "refusing to read it as empty" in message


def test_a_journal_the_tool_creates_holds_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "state" / "journal.jsonl"
    change = changes_of("catalog")[0]
    Journal.open(path).intent(change)
    assert path.stat().st_size > 0
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert [p.name for p in path.parent.iterdir()] == ["journal.jsonl"]  # no temp left
    reopened = Journal.open(path)
    assert reopened.in_doubt(change.idempotency_key)
    reopened.result(change, "applied")
    again = Journal.open(path)
    assert not again.in_doubt(change.idempotency_key)
    assert len(path.read_text().splitlines()) == 2


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_a_failed_first_write_leaves_no_empty_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str,
) -> None:
    """Disk full (or a crash) while the first line is written: no journal, not an empty one."""
    path = tmp_path / "journal.jsonl"

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal_mod.os, failing, broken)
    with pytest.raises(JournalError, match=str(path)):
        Journal.open(path).intent(changes_of("catalog")[0])
    monkeypatch.undo()
    assert not path.exists() or path.stat().st_size > 0
    assert list(tmp_path.iterdir()) == []
    assert Journal.open(path).sent == set()


def test_a_journal_created_meanwhile_by_another_applier_is_appended_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "journal.jsonl"
    first, second = changes_of("catalog")[0], changes_of("checkout")[0]
    other = Journal.open(path)
    mine = Journal.open(path)
    real_link = os.link

    def racing_link(src: Any, dst: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(journal_mod.os, "link", real_link)
        other.intent(first)  # the other applier wins the race to create the file
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(journal_mod.os, "link", racing_link)
    mine.intent(second)
    reopened = Journal.open(path)
    assert reopened.sent == {first.idempotency_key, second.idempotency_key}
    assert [p.name for p in tmp_path.iterdir()] == ["journal.jsonl"]
