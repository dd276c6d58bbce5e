"""Run-time faults: which misbehaviour is switched on where, shared through one file.

Owns ``<state>/faults.json`` (``{target: {kind: {param: value}}}``), its kinds and the
counters of counted faults. The launcher and the CLI write it (under an ``flock``, replaced
atomically); every sandbox process re-reads it when its modification time changes, so a
fault takes effect on the next request without a restart.

Must not act on the wire itself: the servers decide what each kind means for a reply.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FAULTS_FILE = "faults.json"
CONTROL_PLANE = "control-plane"

#: kind -> what it does (shown by ``reconcile sandbox fault --help``).
CLUSTER_KINDS: dict[str, str] = {
    "latency": "add ms=N milliseconds before every reply",
    "down": "refuse connections (the listening socket is closed)",
    "blackhole": "accept connections and never answer (not even the TLS handshake)",
    "slow": "answer after ms=N milliseconds (default 3000)",
    "trickle": "send each reply one byte at a time, ms=N between bytes (default 20)",
    "stuck": "never converge to a new digest: keep the previous one, stale attestation",
    "refuse-digest": "refuse one image (digest=sha256:..., or a prefix of it): keep the "
                     "previous digest, stale attestation, as stuck does; accept any other "
                     "digest, a rollback to the previous one included",
    "failed": "runtimeState FAILED with a lastError, replicas failed",
    "route-stuck": "never apply a gateway route change: keep serving the routes in effect",
    "garbage": "the status routes (per app and batch) answer invalid JSON",
    "truncated": "the status routes (per app and batch) answer JSON cut in the middle",
    "ansi": "lastError full of ANSI escapes and control characters",
    "reauth": "401 for any token already used once",
    "dns-missing": "the gateway's address list omits this cluster",
    "egress-allow": "operator allow-list: hosts=a.example.com,b.example.net:8443",
    "batch-page-error": "the batch status route answers 500 for page=N (0-based, default 0)",
    "batch-route-missing": "health still advertises the batch status route; it answers 404",
    "app-errors": "the app answers errors for one digest (digest=sha256:... or a prefix, "
                  "absent: every digest; ratio=R of requests, default 1; code=N, default "
                  "500; app=A, default every app): real requests and synthetic counters",
    "app-slow": "the app answers late for one digest (digest=..., seconds=S, default 2; "
                "app=A): real requests and synthetic latencies",
}
CONTROL_PLANE_KINDS: dict[str, str] = {
    "latency": "add ms=N milliseconds before every reply",
    "5xx": "HTTP 503 (times=N requests, or every=K-th request)",
    "retry": "reply retry {waitForMs} (times=N, waitForMs=M)",
    "null-response": "reply response null without error (times=N)",
    "slow": "answer after ms=N milliseconds (default 3000)",
    "config-salt": "a server-side configuration fact changes (salt=TEXT): every preflight "
                   "from now on reports another configuration digest",
    "config-drift": "every preflight reports a new configuration digest (two preflights of "
                    "one plan disagree)",
    "slow-reply": "commit the request, then answer after ms=N milliseconds (default 3000; "
    "method=NAME: only that method; times=N)",
    "echo-secrets": "successful replies' rollout statuses say failed, quoting the caller's "
    "token and session jwt",
}

FaultMap = dict[str, dict[str, dict[str, Any]]]


def kinds_for(target: str) -> dict[str, str]:
    return CONTROL_PLANE_KINDS if target == CONTROL_PLANE else CLUSTER_KINDS


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    with open(state_dir / (FAULTS_FILE + ".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_all(state_dir: Path) -> FaultMap:
    try:
        data = json.loads((state_dir / FAULTS_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def set_fault(state_dir: Path, target: str, kind: str, *, on: bool, params: dict[str, Any]) -> None:
    """Switch ``kind`` on (with ``params``) or off for ``target``."""
    if kind not in kinds_for(target):
        allowed = ", ".join(sorted(kinds_for(target)))
        raise ValueError(f"unknown fault {kind!r} for {target}; one of: {allowed}")
    with _locked(state_dir):
        faults = read_all(state_dir)
        entry = faults.setdefault(target, {})
        if on:
            # A nonce makes re-setting the same fault restart its counters.
            entry[kind] = {**params, "_nonce": os.urandom(6).hex()}
        else:
            entry.pop(kind, None)
        if not entry:
            faults.pop(target, None)
        path = state_dir / FAULTS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(faults, sort_keys=True), encoding="utf-8")
        tmp.replace(path)


def stamp(state_dir: Path) -> list[int] | None:
    """The faults file's stamp as ``FaultView.seen`` says it (None: no file)."""
    try:
        st = os.stat(state_dir / FAULTS_FILE)
    except FileNotFoundError:
        return None
    return [st.st_mtime_ns, st.st_size]


def clear(state_dir: Path) -> None:
    with _locked(state_dir):
        (state_dir / FAULTS_FILE).unlink(missing_ok=True)


def param_int(params: dict[str, Any], name: str, default: int) -> int:
    value = params.get(name, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class FaultView:
    """One process's view of its own faults: re-read when the file changes."""

    def __init__(self, state_dir: Path, target: str) -> None:
        self._path = state_dir / FAULTS_FILE
        self._target = target
        self._stamp: tuple[int, int] | None = None
        self._current: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str], list[int]] = {}

    def current(self) -> dict[str, dict[str, Any]]:
        try:
            st = os.stat(self._path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                if stamp is None:
                    self._current = {}
                else:
                    try:
                        data = json.loads(self._path.read_text(encoding="utf-8"))
                    except (FileNotFoundError, ValueError):
                        data = {}
                    mine = data.get(self._target, {}) if isinstance(data, dict) else {}
                    self._current = mine if isinstance(mine, dict) else {}
            return self._current

    def get(self, kind: str) -> dict[str, Any] | None:
        return self.current().get(kind)

    def seen(self) -> list[int] | None:
        """The stamp of the faults file as last read (None: there was none): what
        ``Sandbox.wait_settled`` compares with ``stamp`` to know a fault is acted on."""
        with self._lock:
            return None if self._stamp is None else list(self._stamp)

    def fires(self, kind: str) -> dict[str, Any] | None:
        """For counted faults (``times``/``every``): whether this request is affected."""
        params = self.get(kind)
        if params is None:
            return None
        key = (kind, str(params.get("_nonce", "")))
        every = max(1, param_int(params, "every", 1))
        times = param_int(params, "times", -1)
        with self._lock:
            seen_fired = self._counters.setdefault(key, [0, 0])
            seen_fired[0] += 1
            if seen_fired[0] % every != 0:
                return None
            if 0 <= times <= seen_fired[1]:
                return None
            seen_fired[1] += 1
        return params
