"""The apply journal: an append-only, fsync'd record of every write apply sends.

Owns the file format and its integrity. Each line is one JSON object with a checksum of
its own content; an ``intent`` line is written (and fsync'd) *before* a change is sent,
a ``result`` line after the answer. So after a crash at any point, a rerun knows which
idempotency keys may already have reached the control plane and replays those exact
keys instead of minting new ones -- the control plane then returns the first result
instead of making a second rollout.

A journal that cannot be read is refused with its path and line named: reading a
damaged journal as empty would forget sent keys, which is exactly what it exists to
prevent. The one exception is a **torn tail** -- the last line without its newline,
after at least one good line -- which is what a crash or a full disk leaves behind and
nothing else does (a line is appended whole, newline included, in one write): an apply
drops it
(``Journal.open``: truncated under the lock, fsync'd, and said as a warning naming the
file, the line and what was dropped) and ``history`` skips it with the same warning.
Dropping it is safe because a change is sent only after its intent line is complete and
fsync'd: a torn intent was never sent, and a torn result leaves its key in doubt, so the
rerun replays that exact key. Anything else stays a refusal: a damaged line before the
last, and a last line that ends with its newline but does not read (another version's
line, an edit) -- it was written whole, so it is no torn write.

**A write that fails** (disk full, I/O error, a short write) marks the journal broken:
the torn bytes are cut off again where possible, and every later append -- every intent
of a change not yet sent -- raises ``JournalError`` before anything else is sent. The
caller names what this run had already sent (``sent_now``), as after a crash; it never
reports success over a journal that did not record it. Appends hold an exclusive
``flock`` on the file for the one ``write``, so a repair never cuts a concurrent
applier's line in half. That includes a 0-byte file: the journal is *created with its first line*
(written and fsync'd under a temporary name, then hard-linked into place), so this module
never leaves an empty journal behind, even if it is interrupted or the disk is full; an
empty file at the journal's path can only be a truncated journal. Only a missing file
reads as "nothing sent yet". Must not decide what to send; ``shell.applying`` does.

Run records (added later, same version, so older readers skip them): ``run_started``
(commit, plan fingerprint, verdict, blockers, services, the changes' keys) before an
apply may send anything, and ``run_finished`` (each change's outcome, the gate's word,
the duration) after it. ``history`` reads them back, newest first; journals written
before run records existed still read, their intents and results grouped as they come.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from reconciler.core.evidence import ServiceProof
from reconciler.core.lastproven import ProvenFact
from reconciler.core.outcomes import ApplyReport, Outcome, RunOutcome, ended
from reconciler.core.plans import Change, Plan
from reconciler.core.sanitize import redact_value

VERSION = 1
#: The journal's name in the state directory.
JOURNAL_FILE = "journal.jsonl"


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


@dataclass(frozen=True)
class TornTail:
    """The journal's last line, torn by a crash or a failed write (see the module
    docstring): where it starts, its line number, and what it held."""

    path: Path
    line: int
    offset: int  # the byte where the torn line starts: the file's good length
    data: bytes
    why: str

    def describe(self) -> str:
        shown = self.data[:120].decode("utf-8", "replace")
        shown = "".join(c if c.isprintable() else "?" for c in shown)
        more = "…" if len(self.data) > 120 else ""
        return (f"{self.path}:{self.line}: the apply journal's last line was torn "
                f"({self.why}; an interrupted or failed write) and was dropped: "
                f"{len(self.data)} byte(s) {shown!r}{more}; no change is lost by it (a "
                "change is sent only after its intent line is whole; a key whose result "
                "was torn stays in doubt and is replayed)")


#: The largest journal read back. A journal grows by a few hundred bytes per change sent;
#: a file far beyond this is not one (a link to ``/dev/zero``, a wrong path), and reading
#: it whole would exhaust memory before any line could be judged.
MAX_JOURNAL_BYTES = 1 << 30


def open_journal(path: Path, flags: int) -> int:
    """Open the journal at ``path`` and vouch that it is a regular file of at most
    ``MAX_JOURNAL_BYTES``, before anything is read from it or written to it. Opened
    non-blocking, so a FIFO at the path never hangs the open, then refused like a device
    or a directory (a link is followed: what it points to is judged). Raises
    ``FileNotFoundError`` for a missing file, ``JournalError`` for anything else."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        # A FIFO with no reader refuses a non-blocking write-only open (ENXIO): say what
        # the path is, as for any other open.
        with contextlib.suppress(OSError):
            _vouch_kind(path, os.stat(path).st_mode)
        raise JournalError(f"{path}: cannot open the apply journal: "
                           f"{exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        _vouch_kind(path, st.st_mode)
        if st.st_size > MAX_JOURNAL_BYTES:
            raise JournalError(
                f"{path}: the apply journal is {st.st_size} bytes, over the "
                f"{MAX_JOURNAL_BYTES}-byte limit; refusing to read it whole -- check it is "
                "the journal, then archive it (keep the file) once `reconcile history "
                "--journal` on a copy shows no apply in doubt")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _vouch_kind(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise JournalError(
            f"{path}: the apply journal is not a regular file (it is {_file_kind(mode)}); "
            "refusing to read or write it -- point the state directory (RECONCILE_STATE_DIR "
            "or Settings stateDir) at a directory that holds the real journal")


def _file_kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a regular file"


def _read_journal(path: Path) -> bytes:
    """The journal's bytes (``open_journal`` vouched for the file first)."""
    fd = open_journal(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        # Bounded even if it grew since the check: never more than the limit and a byte.
        return handle.read(MAX_JOURNAL_BYTES + 1)


def _check(line: bytes) -> dict[str, Any]:
    entry = json.loads(line)
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    summed = entry.pop("sum")
    if summed != _checksum(entry) or entry.get("v") != VERSION:
        raise ValueError("checksum or version mismatch")
    str(entry["key"])
    if not isinstance(entry["event"], str):
        raise ValueError("event is not a string")
    return entry


def _parse(path: Path, raw: bytes) -> tuple[list[tuple[int, dict[str, Any]]], TornTail | None]:
    """The checked lines and the torn tail, if any; ``JournalError`` for anything else."""
    if not raw:
        raise JournalError(
            f"{path}: the apply journal is corrupt (the file is empty, but a journal is "
            "never created without its first line, so it was truncated); refusing to "
            "read it as empty, because it may have held keys already sent -- remove it "
            "by hand only once you have checked that no apply is in doubt")
    *complete, rest = raw.split(b"\n")
    entries: list[tuple[int, dict[str, Any]]] = []
    torn: TornTail | None = None
    if rest:
        torn = TornTail(path, len(complete) + 1, len(raw) - len(rest), rest,
                        "no newline at its end")
    for number, line in enumerate(complete, start=1):
        try:
            entries.append((number, _check(line)))
        except (ValueError, KeyError, UnicodeDecodeError) as exc:
            # A line that ends with its newline was written whole (one write of the whole
            # line): if it does not read, it is no torn write but another version's line
            # or an edit, and dropping it could forget a key already sent.
            raise JournalError(
                f"{path}:{number}: the apply journal is corrupt ({exc}; the line is whole, "
                "ending with its newline, so it is no torn write: written by another "
                "version or edited); refusing to read it as empty or to drop the line, "
                "because it may hold keys already sent") from exc
    if torn is not None and not entries:
        raise JournalError(
            f"{path}:{torn.line}: the apply journal is corrupt: its only line is damaged "
            f"({torn.why}); "
            "a journal is created with its first line whole, so this is no torn write; "
            "refusing to read it as empty, because it may hold keys already sent")
    return entries, torn


def read_entries(path: Path, *, on_torn: Callable[[TornTail], None] | None = None,
                 ) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every checked line of the journal at ``path`` as (line number, entry, without its
    checksum); nothing for a missing file. Raises ``JournalError`` naming the path and the
    line for anything that cannot be trusted: it is never skipped. A torn tail (module
    docstring) is refused too, unless ``on_torn`` is given: then it is told and skipped."""
    try:
        raw = _read_journal(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise JournalError(f"{path}: cannot read the apply journal: {exc.strerror}") from exc
    entries, torn = _parse(path, raw)
    if torn is not None:
        if on_torn is None:
            raise JournalError(f"{path}:{torn.line}: the last line of the apply journal is "
                               f"torn ({torn.why}); the next apply drops it")
        on_torn(torn)
    yield from entries


def repair(path: Path) -> TornTail | None:
    """Drop a torn tail from the journal at ``path`` (under the lock, re-read there so a
    concurrent appender's line is never taken for one), fsync; what was dropped, or None.
    Raises ``JournalError`` for any other damage, as ``read_entries`` does."""
    try:
        fd = open_journal(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "rb") as handle:
            raw = handle.read()
        _, torn = _parse(path, raw)
        if torn is not None:
            os.ftruncate(fd, torn.offset)
            os.fsync(fd)
        return torn
    except OSError as exc:
        raise JournalError(f"{path}: cannot drop the torn last line of the apply journal: "
                           f"{exc.strerror}") from exc
    finally:
        os.close(fd)  # releases the lock


#: Service names listed in a ``run_started`` record (the total is always recorded).
MAX_SERVICES = 500


@dataclass
class Journal:
    path: Path
    sent: set[str] = field(default_factory=set)  # keys with an intent line
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> last result
    started: dict[str, float] = field(default_factory=dict)  # run id -> monotonic start
    #: What this process sent, in order: key -> {service, action, outcome (None: no answer
    #: yet)}; the outcome is kept even when its result line could not be written.
    sent_now: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Why the journal stopped taking lines (None: it takes them).
    broken: str | None = None
    #: The torn tail ``open`` dropped, for the caller to say.
    repaired: TornTail | None = None

    @classmethod
    def open(cls, path: Path) -> Journal:
        """Read the journal (dropping a torn tail, see the module docstring)."""
        journal = cls(path)
        journal.repaired = repair(path)
        for _, entry in read_entries(path):
            key = str(entry["key"])
            event = entry["event"]
            if event == "intent":
                journal.sent.add(key)
            elif event == "result":
                journal.results[key] = entry
        return journal

    def _append(self, body: dict[str, Any]) -> None:
        if self.broken is not None:
            raise JournalError(f"{self.path}: the apply journal stopped taking lines "
                               f"earlier in this run ({self.broken})")
        # Written redacted (a secret a control plane echoed into a detail), checksum after.
        body = {"v": VERSION, "ts": int(time.time() * 1000), **cast(dict[str, Any],
                                                                   redact_value(body))}
        line = json.dumps({**body, "sum": _checksum(body)}, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists() and self._create_with(line.encode()):
                return
            self._write_line(line.encode())
        except JournalError as exc:
            self.broken = "not a journal file"
            raise exc
        except OSError as exc:
            self.broken = exc.strerror or type(exc).__name__
            raise JournalError(f"{self.path}: cannot append to the apply journal: "
                               f"{self.broken}") from exc

    def _write_line(self, data: bytes) -> None:
        """One ``write`` of one whole line under the lock (appends from two appliers never
        interleave, and a repair never sees half of one), then fsync. A short write is
        the disk filling up: the torn bytes are cut off again (best effort: the next
        ``open`` drops whatever is left) and it raises ``ENOSPC``."""
        fd = open_journal(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(errno.ENOSPC, f"short write ({written} of {len(data)} "
                                  "bytes): the disk is full")
                os.fsync(fd)
            except OSError:
                try:
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                except OSError:
                    pass  # the next open drops the torn tail
                raise
        finally:
            os.close(fd)

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
        return result is None or result.get("outcome") in (Outcome.FAILED, Outcome.IN_DOUBT)

    def intent(self, change: Change, *, fence: dict[str, object] | None = None) -> None:
        """Record, durably, that ``change`` is about to be sent. Raises ``JournalError``
        when it cannot: the caller must then not send it. ``fence``: the sharded
        watcher's fencing token (shard, owner-key revision, lease, the store's revision
        at the check), recorded with the intent."""
        body: dict[str, Any] = {"event": "intent", "key": change.idempotency_key,
                                "service_id": change.service_id,
                                "action": change.action.value, "user_id": change.user_id}
        if fence is not None:
            body["fence"] = fence
        self._append(body)
        self.sent.add(change.idempotency_key)
        self.sent_now[change.idempotency_key] = {
            "service": change.service, "action": change.action.value, "outcome": None}

    def result(self, change: Change, outcome: str, detail: str = "") -> None:
        body = {"event": "result", "key": change.idempotency_key,
                "service_id": change.service_id, "action": change.action.value,
                "outcome": outcome, "detail": detail[:500]}
        known = self.sent_now.get(change.idempotency_key)
        if known is not None:
            known["outcome"] = outcome  # known even if the line below cannot be written
        self._append(body)
        self.results[change.idempotency_key] = body
        if known is not None:
            known["recorded"] = True

    def sent_lines(self) -> list[str]:
        """What this run sent, one line each, for a run that stops on a journal failure."""
        lines = []
        for key, what in self.sent_now.items():
            outcome = what["outcome"]
            if outcome is None:
                state = "sent, no answer recorded: in doubt (a rerun replays this key)"
            elif what.get("recorded"):
                state = outcome
            else:
                state = (f"{outcome}, but its result line could not be written: in doubt "
                         "for the journal (a rerun replays this key)")
            lines.append(f"  {what['action']} {what['service']} (key {key}): {state}")
        return lines

    # -- run records ------------------------------------------------------------------

    def run_started(self, plan: Plan, *, saved_plan: bool = False,
                    saved: Plan | None = None, proven: Sequence[ServiceProof] = ()) -> str:
        """Record that an apply of ``plan`` (the fresh plan, already restricted to
        ``--only``) begins, before it may be refused and before anything is sent; return
        its run id, for ``run_finished``. A run that never finishes reads back as refused
        (its plan was NO-GO), nothing to do, interrupted (keys were sent), or ended without
        sending (refused as stale or mismatched, declined), from this record and the lines
        after it. ``commit`` is the commit this apply ran at (``plan`` is the fresh plan);
        ``saved``, the saved plan applied, gives ``reviewed_commit``, the commit it was
        made at (another one after a merge, for the same desired-state tree).
        Raises ``JournalError`` if it cannot be written."""
        run = f"run-{int(time.time() * 1000):x}-{os.urandom(4).hex()}"
        services = plan.services()
        self._append({
            "event": "run_started", "key": run, "commit": plan.commit,
            "desired_tree": plan.desired_tree,
            "reviewed_commit": saved.commit if saved is not None else None,
            "fingerprint": plan.fingerprint, "saved_plan": saved_plan or saved is not None,
            "verdict": plan.verdict.value, "control_plane_url": plan.control_plane_url,
            "services": services[:MAX_SERVICES], "services_total": len(services),
            "blockers": [{"code": b.code.value, "message": b.message[:300]}
                         for b in plan.blockers[:50]],
            # an emergency override of a promotion window or freeze (issue 19), said
            "overrides": [n[:500] for n in plan.notes if n.startswith("override-window:")],
            "changes": [{"key": c.idempotency_key, "service": c.service,
                         "action": c.action.value, "summary": c.summary[:300]}
                        for c in plan.changes],
            # issue 20: the releases the judge proved running before this apply
            "proven": _proven(proven),
        })
        self.started[run] = time.monotonic()
        return run

    def run_finished(self, run: str, report: ApplyReport) -> None:
        """Record how the run ended: each change's outcome, the gate's word, the time."""
        began = self.started.pop(run, None)
        gate = report.gate
        self._append({
            "event": "run_finished", "key": run,
            "duration_seconds": None if began is None else round(time.monotonic() - began, 3),
            "writes_ok": report.writes_ok,
            "outcomes": [{"key": r.change.idempotency_key, "service": r.change.service,
                          "action": r.change.action.value, "outcome": r.outcome.value,
                          "detail": r.detail[:300], "code": r.code}
                         for r in report.results],
            "gate": None if gate is None else {
                "converged": gate.converged, "attempts": gate.attempts,
                "waited_seconds": round(gate.waited_seconds, 3),
                "pending": [{"service": p.service, "reasons": p.reasons()[:10]}
                            for p in gate.pending()[:50]],
                "proven": _proven(gate.proofs)},  # issue 20: what the gate proved
        })


    # -- issue 20: what the judge proved, and reverts ----------------------------------

    def reverted(self, key: str, record: dict[str, Any]) -> None:
        """Record a revert (its key, the services, digests, commit or pull request)."""
        self._append({"event": "revert", "key": key, **record})

    # -- issue 19: promotions proposed by ``watch --promote-from`` ----------------------

    def proposed(self, key: str, record: dict[str, Any]) -> None:
        """Record a promotion proposed as a pull request (environment, service, digest,
        branch, pull request): a restarted watcher does not propose it again."""
        self._append({"event": "promotion_proposed", "key": key, **record})


def _proven(proofs: Sequence[ServiceProof]) -> list[dict[str, Any]]:
    """The proofs the one judge found converged, as the journal keeps them (issue 20)."""
    return [{"service": p.service, "digest": p.digest,
             "clusters": [c.cluster for c in p.clusters]}
            for p in proofs if p.converged][:MAX_SERVICES]


def proven_facts(path: Path, *, on_torn: Callable[[TornTail], None] | None = None,
                 ) -> list[ProvenFact]:
    """Every proof the journal at ``path`` keeps (``core.lastproven``): a run's
    ``proven`` (stage ``before-apply``) and its gate's (stage ``gate``), oldest first."""
    facts: list[ProvenFact] = []
    for _number, entry in read_entries(path, on_torn=on_torn):
        event = entry.get("event")
        if event == "run_started":
            stage, proofs = "before-apply", entry.get("proven")
        elif event == "run_finished" and isinstance(entry.get("gate"), dict):
            stage, proofs = "gate", entry["gate"].get("proven")
        else:
            continue
        for proof in proofs or ():
            if isinstance(proof, dict):
                facts.append(ProvenFact(
                    service=str(proof.get("service")), digest=str(proof.get("digest")),
                    at_ms=int(entry.get("ts") or 0),
                    clusters=tuple(str(c) for c in proof.get("clusters") or ()),
                    run=str(entry.get("key")), stage=stage))
    return facts


def reverts(path: Path, *, on_torn: Callable[[TornTail], None] | None = None,
            ) -> list[dict[str, Any]]:
    """Every ``revert`` record of the journal at ``path``, oldest first."""
    return [dict(entry, line=number) for number, entry in read_entries(path, on_torn=on_torn)
            if entry.get("event") == "revert"]


def proposals(path: Path, *, on_torn: Callable[[TornTail], None] | None = None,
              ) -> list[dict[str, Any]]:
    """Every ``promotion_proposed`` record of the journal at ``path``, oldest first (none
    when there is no journal yet)."""
    return [dict(entry, line=number) for number, entry in read_entries(path, on_torn=on_torn)
            if entry.get("event") == "promotion_proposed"]


# -- reading it back: ``reconcile history`` ---------------------------------------------

#: Lines of an old journal (no run records) further apart than this start a new group.
LEGACY_GAP_MS = 60_000


@dataclass
class Run:
    """One apply as the journal tells it (or, for a journal older than run records, one
    burst of intents and results)."""

    id: str
    started_ms: int
    line: int
    commit: str | None = None  # the commit the apply ran at
    reviewed_commit: str | None = None  # a saved plan's: the commit it was made at
    desired_tree: str | None = None
    fingerprint: str | None = None
    verdict: str | None = None
    control_plane_url: str | None = None  # the control plane the apply ran against
    saved_plan: bool = False
    services: list[str] = field(default_factory=list)
    blockers: list[dict[str, Any]] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)  # keys with an intent after the start
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> last result
    finished: dict[str, Any] | None = None
    finished_ms: int | None = None
    legacy: bool = False

    @property
    def status(self) -> RunOutcome:
        """How the run ended (``core.outcomes.RunOutcome``): from its end record, else
        from how far it got."""
        if self.legacy:
            return RunOutcome.LEGACY
        done = self.finished
        if done is not None:
            gate = done.get("gate")
            return ended(writes_ok=bool(done.get("writes_ok", False)),
                         outcomes=[str(o.get("outcome")) for o in done.get("outcomes") or []],
                         gate=None if gate is None else bool(gate.get("converged")))
        if self.verdict == "no_go":
            return RunOutcome.REFUSED
        if self.sent or self.results:
            return RunOutcome.INTERRUPTED
        if self.verdict == "no_changes" and not self.changes:
            return RunOutcome.NOTHING_TO_DO
        return RunOutcome.NOT_FINISHED

    def outcomes(self) -> list[dict[str, Any]]:
        """Each change's outcome: from the run's own end record, else from the result
        lines after its start (``sent`` with no result: in doubt)."""
        if self.finished is not None:
            return list(self.finished.get("outcomes") or [])
        out = []
        by_key = {c["key"]: c for c in self.changes}
        keys = list(dict.fromkeys([*self.sent, *self.results]))
        for key in keys:
            change = by_key.get(key) or self.results.get(key) or {}
            result = self.results.get(key)
            out.append({"key": key, "service": change.get("service") or
                        change.get("service_id"), "action": change.get("action"),
                        "outcome": result.get("outcome") if result else Outcome.IN_DOUBT.value,
                        "detail": (result or {}).get("detail", "")})
        return out

    @property
    def plan_digest(self) -> str | None:
        """A digest of what the plan said: its commit, verdict, changes (key, service,
        action) and blockers (codes) -- so a no-op apply, a NO-GO refusal and a promotion
        at another commit never show the same value, as the fingerprint (a digest of the
        live preconditions read) can. Computed from the run record (old records too)."""
        if self.legacy:
            return None
        body = {"commit": self.commit, "verdict": self.verdict,
                "changes": [[c.get("key"), c.get("service"), c.get("action")]
                            for c in self.changes],
                "blockers": sorted(str(b.get("code")) for b in self.blockers)}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        done = self.finished or {}
        return {
            "id": self.id, "status": self.status, "started_ms": self.started_ms,
            "finished_ms": self.finished_ms, "line": self.line, "commit": self.commit,
            "reviewed_commit": self.reviewed_commit, "desired_tree": self.desired_tree,
            "plan_digest": self.plan_digest, "change_count": len(self.changes),
            "control_plane_url": self.control_plane_url,
            "plan_fingerprint": self.fingerprint, "verdict": self.verdict,
            "saved_plan": self.saved_plan, "services": self.services,
            "blockers": self.blockers,
            "overrides": self.overrides,
            "duration_seconds": done.get("duration_seconds"),
            "gate": done.get("gate"), "changes": self.outcomes() or [
                {**c, "outcome": "not_sent"} for c in self.changes],
        }


def history(path: Path, *, on_torn: Callable[[TornTail], None] | None = None) -> list[Run]:
    """Every run in the journal at ``path``, newest first. A journal that cannot be
    trusted raises ``JournalError`` (path and line), never a shorter history; a torn
    tail is skipped and told to ``on_torn`` when given (refused otherwise)."""
    runs: list[Run] = []
    by_id: dict[str, Run] = {}
    owner: dict[str, Run] = {}  # change key -> the latest run that planned it
    legacy: Run | None = None
    last_ms = 0
    for number, entry in read_entries(path, on_torn=on_torn):
        event, key = entry["event"], str(entry["key"])
        ts = int(entry.get("ts") or 0)
        if event == "run_started":
            run = Run(id=key, started_ms=ts, line=number, commit=entry.get("commit"),
                      reviewed_commit=entry.get("reviewed_commit"),
                      desired_tree=entry.get("desired_tree"),
                      fingerprint=entry.get("fingerprint"), verdict=entry.get("verdict"),
                      control_plane_url=entry.get("control_plane_url"),
                      saved_plan=bool(entry.get("saved_plan")),
                      services=list(entry.get("services") or []),
                      blockers=list(entry.get("blockers") or []),
                      overrides=[str(o) for o in entry.get("overrides") or []],
                      changes=list(entry.get("changes") or []))
            runs.append(run)
            by_id[key] = run
            for change in run.changes:
                owner[str(change.get("key"))] = run
            legacy = None
        elif event == "run_finished":
            ended = by_id.get(key)
            if ended is not None:
                ended.finished, ended.finished_ms = entry, ts
        elif event in ("intent", "result"):
            into = owner.get(key)
            if into is None:
                if legacy is None or ts - last_ms > LEGACY_GAP_MS:
                    legacy = Run(id=f"lines-{number}", started_ms=ts, line=number,
                                 legacy=True)
                    runs.append(legacy)
                into = legacy
            if event == "intent":
                into.sent.append(key)
            else:
                into.results[key] = entry
            last_ms = ts
    runs.sort(key=lambda r: (r.started_ms, r.line), reverse=True)
    return runs
