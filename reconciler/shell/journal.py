"""The apply journal: an append-only, fsync'd record of every write apply sends.

Owns the file format and its integrity. Each line is one JSON object with a checksum of
its own content; an ``intent`` line is written (and fsync'd) *before* a change is sent,
a ``result`` line after the answer. So after a crash at any point, a rerun knows which
idempotency keys may already have reached the control plane and replays those exact
keys instead of minting new ones -- the control plane then returns the first result
instead of making a second rollout.

A journal that cannot be read is refused with its path and line named: reading a
damaged journal as empty would forget sent keys, which is exactly what it exists to
prevent. That includes a 0-byte file: the journal is *created with its first line*
(written and fsync'd under a temporary name, then hard-linked into place), so this module
never leaves an empty journal behind, even if it is interrupted or the disk is full; an
empty file at the journal's path can only be a truncated journal. Only a missing file
reads as "nothing sent yet". Must not decide what to send; ``shell.applying`` does.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.core.plans import Change

VERSION = 1


class JournalError(Exception):
    """The journal exists but cannot be trusted (corrupt, unreadable, unwritable)."""


def _checksum(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _fsync_dir(directory: Path) -> None:
    """Make a new directory entry durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class Journal:
    path: Path
    sent: set[str] = field(default_factory=set)  # keys with an intent line
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> last result

    @classmethod
    def open(cls, path: Path) -> Journal:
        journal = cls(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return journal
        except OSError as exc:
            raise JournalError(f"{path}: cannot read the apply journal: {exc.strerror}") from exc
        if not raw:
            raise JournalError(
                f"{path}: the apply journal is corrupt (the file is empty, but a journal is "
                "never created without its first line, so it was truncated); refusing to "
                "read it as empty, because it may have held keys already sent -- remove it "
                "by hand only once you have checked that no apply is in doubt")
        if not raw.endswith(b"\n"):
            raise JournalError(f"{path}: the last line of the apply journal is incomplete; "
                               "inspect it and remove the torn line by hand before rerunning")
        for number, line in enumerate(raw.splitlines(), start=1):
            try:
                entry = json.loads(line)
                if not isinstance(entry, dict):
                    raise ValueError("not an object")
                summed = entry.pop("sum")
                if summed != _checksum(entry) or entry.get("v") != VERSION:
                    raise ValueError("checksum or version mismatch")
                key = str(entry["key"])
                event = entry["event"]
            except (ValueError, KeyError, UnicodeDecodeError) as exc:
                raise JournalError(
                    f"{path}:{number}: the apply journal is corrupt ({exc}); refusing to read "
                    "it as empty, because it may hold keys already sent") from exc
            if event == "intent":
                journal.sent.add(key)
            elif event == "result":
                journal.results[key] = entry
        return journal

    def _append(self, body: dict[str, Any]) -> None:
        body = {"v": VERSION, "ts": int(time.time() * 1000), **body}
        line = json.dumps({**body, "sum": _checksum(body)}, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists() and self._create_with(line.encode()):
                return
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                # One write() of one line: appends from two appliers never interleave.
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise JournalError(f"{self.path}: cannot append to the apply journal: "
                               f"{exc.strerror}") from exc

    def _create_with(self, first: bytes) -> bool:
        """Create the journal holding ``first`` atomically: write and fsync a temporary
        file beside it, then hard-link it into place (``link`` never replaces a file, so a
        journal another applier created meanwhile is kept; then False: append to it).
        Interrupted or failing at any point, this leaves no journal or a complete one."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if os.write(fd, first) != len(first):
                    raise OSError(28, "short write while creating the apply journal")
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return False
            _fsync_dir(self.path.parent)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def in_doubt(self, key: str) -> bool:
        """Sent, and no trustworthy answer recorded: it may or may not have landed, so a
        rerun must replay this exact key (never a fresh one)."""
        if key not in self.sent:
            return False
        result = self.results.get(key)
        return result is None or result.get("outcome") == "failed"

    def intent(self, change: Change) -> None:
        self._append({"event": "intent", "key": change.idempotency_key,
                      "service_id": change.service_id, "action": change.action.value,
                      "user_id": change.user_id})
        self.sent.add(change.idempotency_key)

    def result(self, change: Change, outcome: str, detail: str = "") -> None:
        body = {"event": "result", "key": change.idempotency_key,
                "service_id": change.service_id, "action": change.action.value,
                "outcome": outcome, "detail": detail[:500]}
        self._append(body)
        self.results[change.idempotency_key] = body
