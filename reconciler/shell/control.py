"""Control of a running watcher: suspend, resume, and "reconcile now".

Owns the suspended state (kept in the state directory, ``watch-suspended.json``, so it
survives a restart: a watcher started while it is there observes, plans and applies
nothing until it is resumed), the bearer token that guards the control requests (read
from a file; without one, control is off), and the answer to each request
(``POST /suspend``, ``/resume``, ``/reconcile`` on the daemon's HTTP port, served by
``shell.health``). The server thread calls ``handle``; the watcher's loop asks
``suspended`` and ``take_request`` and is woken through ``bind``.

Must not decide what a cycle does (``shell.watching``) nor what is converged (the
judge): suspending only stops the watcher from starting a cycle. An apply already in
flight when a suspension arrives runs to its end (its keys are journaled either way).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The file in the state directory that holds a suspension.
STATE_FILE = "watch-suspended.json"
#: The control paths (all POST).
PATHS = ("/suspend", "/resume", "/reconcile")
#: The longest reason kept (it is said in /readyz and the log).
MAX_REASON = 300
MAX_TOKEN_BYTES = 4096


class ControlError(Exception):
    """The control could not be set up (token file unreadable or empty)."""


def read_token(path: Path) -> str:
    """The bearer token in ``path`` (surrounding whitespace dropped); ``ControlError``
    naming the file when it cannot be read or is empty."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ControlError(f"{path}: cannot read the control token file: "
                           f"{exc.strerror or exc}") from exc
    if len(data) > MAX_TOKEN_BYTES:
        raise ControlError(f"{path}: the control token file is over {MAX_TOKEN_BYTES} bytes; "
                           "it should hold one token")
    token = data.decode("utf-8", "replace").strip()
    if not token or any(c.isspace() for c in token):
        raise ControlError(f"{path}: the control token file must hold one token (no spaces"
                           "), and it is " + ("empty" if not token else "several words"))
    return token


@dataclass(frozen=True)
class Suspension:
    since: float  # wall-clock seconds
    reason: str

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        return f"suspended since {when}" + (f" ({self.reason})" if self.reason else "")


def load_suspension(state_file: Path) -> Suspension | None:
    """The suspension recorded in ``state_file``; None when there is none. A file that
    cannot be read as one is a suspension too (fail safe: a watcher that cannot tell
    whether it was paused stays paused), its reason saying what was wrong."""
    try:
        data = json.loads(state_file.read_bytes()[:65536])
        return Suspension(float(data["since"]), str(data.get("reason") or "")[:MAX_REASON])
    except (FileNotFoundError, NotADirectoryError):
        return None  # no such file can exist there
    except (OSError, ValueError, TypeError, KeyError) as exc:
        return Suspension(time.time(), f"{state_file} is unreadable ({type(exc).__name__}); "
                          "resume to clear it")


def is_loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        address = ipaddress.ip_address(host.split("%", 1)[0])
        mapped = getattr(address, "ipv4_mapped", None)
        return bool((mapped or address).is_loopback)
    return host == "localhost"


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


class Control:
    """The watcher's control state; thread-safe (the server thread and the loop share it)."""

    def __init__(self, *, token: str | None, state_file: Path | None,
                 allow_remote: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.token = token
        self.state_file = state_file
        self.allow_remote = allow_remote
        self.clock = clock
        self._lock = threading.Lock()
        self._suspension = load_suspension(state_file) if state_file is not None else None
        self._requested = False
        self._wake: Callable[[], object] | None = None

    # -- the loop's side ------------------------------------------------------------

    def bind(self, wake: Callable[[], object]) -> None:
        """``wake`` is called (from the server thread) after each accepted request; it
        must be thread-safe (``loop.call_soon_threadsafe``)."""
        self._wake = wake

    @property
    def suspension(self) -> Suspension | None:
        with self._lock:
            return self._suspension

    @property
    def suspended(self) -> bool:
        return self.suspension is not None

    def take_request(self) -> bool:
        """Whether a cycle was asked for since the last call (requests coalesce)."""
        with self._lock:
            requested, self._requested = self._requested, False
            return requested

    def how_to_resume(self) -> str:
        """What lifts the suspension from here (said when the watcher starts suspended)."""
        if self.token is not None:
            return "POST /resume, or: reconcile watch-ctl resume"
        return (f"control is off in this watcher: restart it with --control-token-file and "
                f"`reconcile watch-ctl resume`, or remove {self.state_file}")

    def detail(self) -> str | None:
        """What ``/readyz`` adds while suspended; None otherwise."""
        suspension = self.suspension
        if suspension is None:
            return None
        return (f"{suspension.describe()}: nothing is observed, planned or applied until it "
                f"is resumed ({self.how_to_resume()})")

    # -- the server's side ----------------------------------------------------------

    def handle(self, path: str, authorization: str | None, peer: str,
               body: bytes) -> Answer:
        """The answer to ``POST path`` from ``peer`` (its address) with the request's
        ``Authorization`` header and body (JSON, optional: ``{"reason": "..."}``)."""
        if path not in PATHS:
            return Answer(404, {"error": f"not found: POST {', '.join(PATHS)}"})
        if self.token is None:
            return Answer(404, {"error": "control is off: start watch with "
                                "--control-token-file FILE to accept " + path})
        if not self.allow_remote and not is_loopback(peer):
            return Answer(403, {"error": "control requests are accepted from loopback only "
                                "(start watch with --control-remote to accept others)"})
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self.token.encode()):
            return Answer(401, {"error": "missing or wrong bearer token (the one in the "
                                "watcher's --control-token-file)"},
                          (("WWW-Authenticate", 'Bearer realm="reconcile watch"'),))
        reason = _reason(body)
        if path == "/suspend":
            answer = self._suspend(reason)
        elif path == "/resume":
            answer = self._resume()
        else:
            answer = self._reconcile()
        if answer.status < 300 and self._wake is not None:
            self._wake()
        return answer

    def state(self) -> dict[str, Any]:
        suspension = self.suspension
        return {"suspended": suspension is not None,
                "since": None if suspension is None else suspension.since,
                "reason": None if suspension is None else suspension.reason,
                "detail": self.detail() or "running"}

    def _suspend(self, reason: str) -> Answer:
        with self._lock:
            if self._suspension is not None:
                return Answer(200, {**self._state_locked(), "changed": False})
            return self._switch(Suspension(self.clock(), reason),
                                doing="record the suspension in", otherwise="not suspended")

    def _resume(self) -> Answer:
        with self._lock:
            if self._suspension is None:
                return Answer(200, {**self._state_locked(), "changed": False})
            return self._switch(None, doing="remove the suspension from",
                                otherwise="still suspended")

    def _switch(self, suspension: Suspension | None, *, doing: str, otherwise: str) -> Answer:
        """Suspend (``suspension``) or resume (None), the state file first: a state the
        file does not hold would be lost by a restart, so when it cannot be written the
        answer is 500 and nothing changes. Called with the lock held."""
        try:
            self._record(suspension)
        except OSError as exc:
            return Answer(500, {"error": f"cannot {doing} {self.state_file}: "
                                f"{exc.strerror or exc}; {otherwise}"})
        # Resuming starts a cycle at once: what changed meanwhile is planned now.
        self._suspension, self._requested = suspension, suspension is None
        return Answer(200, {**self._state_locked(), "changed": True})

    def _reconcile(self) -> Answer:
        with self._lock:
            if self._suspension is not None:
                return Answer(409, {**self._state_locked(), "error": "suspended: resume "
                                    "first (reconcile watch-ctl resume)"})
            self._requested = True
            return Answer(202, {**self._state_locked(), "reconcile": "a cycle starts now"})

    def _state_locked(self) -> dict[str, Any]:
        suspension = self._suspension
        return {"suspended": suspension is not None,
                "since": None if suspension is None else suspension.since,
                "reason": None if suspension is None else suspension.reason}

    def _record(self, suspension: Suspension | None) -> None:
        """Write (atomically, fsync'd) or remove the state file; OSError if it cannot."""
        path = self.state_file
        if path is None:
            return
        if suspension is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        data = json.dumps({"since": suspension.since, "reason": suspension.reason}).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)


def _reason(body: bytes) -> str:
    if not body.strip():
        return ""
    with contextlib.suppress(ValueError, AttributeError):
        data = json.loads(body)
        reason = data.get("reason") if isinstance(data, dict) else None
        if isinstance(reason, str):
            return "".join(c if c.isprintable() else " " for c in reason)[:MAX_REASON]
    return ""
