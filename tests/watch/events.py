"""A running `reconcile watch --log-format json` process read as events: a thread reads its
stdout line by line, tests wait for an event matching a predicate or drain for a while;
``watch_process`` starts one and stops it (SIGTERM, then kill) however the test ends."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from tests.e2e_repo import PROJECT


def read_events(proc: subprocess.Popen[str], events: queue.Queue[dict[str, Any]]) -> None:
    """Put each line ``proc`` prints on ``events`` as the JSON object it is, or as a ``raw``
    event when it is not JSON (a traceback must reach the test, not vanish), until EOF."""
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            events.put(json.loads(line))
        except json.JSONDecodeError:
            events.put({"event": "raw", "message": line})


class Watch:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=read_events, args=(proc, self.events), daemon=True).start()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool],
                 timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(event)
            if predicate(event):
                return event
        raise AssertionError(f"no matching event in {timeout}s; seen: "
                             f"{[(e['event'], e['message'][:160]) for e in self.seen[-15:]]}")

    def drain(self, seconds: float) -> list[dict[str, Any]]:
        """The events that arrive in the next ``seconds`` (also kept in ``seen``)."""
        end = time.monotonic() + seconds
        got = []
        while time.monotonic() < end:
            with suppress(queue.Empty):
                got.append(self.events.get(timeout=0.1))
        self.seen.extend(got)
        return got

    def named(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.seen if e["event"] == event]


@contextmanager
def watch_process(*args: str, env: Mapping[str, str]) -> Iterator[Watch]:
    """``reconcile watch ARGS...`` (add ``--log-format json``) run from the project, read
    as a ``Watch``; stopped with SIGTERM (killed after 20 s) when the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "reconciler", "watch", *args],
                            cwd=PROJECT, env=dict(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield Watch(proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
