"""A group of real `reconcile watch --coordinate` processes for the scenarios: start,
kill -9, SIGSTOP/SIGCONT, their JSON events, their journals, and etcd's view of the group
(read with the same client the watchers use)."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reconciler.core.sharding import quotas
from reconciler.sandbox.etcd import Etcd
from reconciler.shell.coordination import Etcd as Client
from reconciler.shell.coordination import parse_target
from tests.e2e_repo import PROJECT, Repo
from tests.watch.events import read_events

WRITES = {"promoteServiceImageRelease", "rollbackServiceImageRelease", "setServiceEgress",
          "syncGatewayClientRoute",
          "configureServiceDeploymentMachineUser", "createGreenfieldDeployment"}
GROUP = "scenario"
#: Test timing: lease 3 s, renew deadline 2 s, a round every 0.5 s (the minimum etcd
#: lease is 2 s at its default heartbeat); the resync is 2 s.
TIMING = ("--lease-seconds", "3", "--renew-deadline", "2", "--retry-period", "0.5")
TTL, RETRY, RESYNC = 3.0, 0.5, 2.0


@dataclass
class Member:
    name: str
    proc: subprocess.Popen[str]
    state: Path
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    seen: list[dict[str, Any]] = field(default_factory=list)

    def start_reading(self) -> None:
        threading.Thread(target=read_events, args=(self.proc, self.events), daemon=True).start()

    def drain(self) -> list[dict[str, Any]]:
        while True:
            try:
                self.seen.append(self.events.get_nowait())
            except queue.Empty:
                return self.seen

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool],
                 timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        checked = 0
        while time.monotonic() < deadline:
            self.drain()
            for event in self.seen[checked:]:
                if predicate(event):
                    return event
            checked = len(self.seen)
            time.sleep(0.1)
        last = [(e["event"], e.get("message", "")[:90]) for e in self.seen[-12:]]
        raise AssertionError(f"{self.name}: no matching event in {timeout}s; last: {last}"
                             f"{self.said()}")

    def said(self) -> str:
        """The end of what the member wrote on stderr (a traceback, a warning), if any."""
        try:
            text = (self.state.parent / f"{self.state.name}.stderr").read_text(errors="replace")
        except OSError:
            return ""
        return f"\nexit {self.proc.poll()}; stderr:\n{text[-3000:]}" if text.strip() else ""

    def intents(self) -> list[dict[str, Any]]:
        path = self.state / "journal.jsonl"
        if not path.exists():
            return []
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return [x for x in lines if x.get("event") == "intent"]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stopped(self) -> bool:
        """SIGSTOPped (state T in /proc)."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] == "T"


class Checkout(Protocol):
    """A committed config repo the members watch (``tests.e2e_repo.Repo``, or the
    two-environment ``tests.promotion.pipeline_repo.PipelineRepo``)."""

    path: Path

    def env(self, **extra: str) -> dict[str, str]: ...


@dataclass
class Group:
    repo: Checkout
    etcd: Etcd
    shards: int = 16
    apply: bool = False
    members: list[Member] = field(default_factory=list)
    extra: tuple[str, ...] = ()
    resync: float = RESYNC

    def start(self, name: str, **env_extra: str) -> Member:
        state = self.repo.path.parent / f"state-{name}"
        args = [sys.executable, "-m", "reconciler", "watch", str(self.repo.path),
                "--log-format", "json", "--coordinate", f"{self.etcd.url}/{GROUP}",
                "--shards", str(self.shards), "--resync", str(self.resync), *TIMING, *self.extra]
        if self.apply:
            args.append("--apply")
        env = self.repo.env(RECONCILE_STATE_DIR=str(state), **env_extra)
        # What it says on stderr is kept beside its state, for a failure to show.
        with open(state.parent / f"{state.name}.stderr", "w") as said:
            proc = subprocess.Popen(args, cwd=PROJECT, env=env, stdout=subprocess.PIPE,
                                    stderr=said, text=True)
        member = Member(name, proc, state)
        member.start_reading()
        self.members.append(member)
        return member

    def member_id(self, member: Member) -> str:
        event = member.wait_for(lambda e: "member" in e, timeout=180)
        return str(event["member"])

    def stop_all(self) -> None:
        for m in self.members:
            if m.proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.kill(m.proc.pid, signal.SIGCONT)
                m.proc.send_signal(signal.SIGTERM)
        for m in self.members:
            try:
                m.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                m.proc.kill()

    # -- etcd's view ------------------------------------------------------------------

    def owners(self) -> dict[int, str]:
        async def read() -> dict[int, str]:
            client = Client(parse_target(self.etcd.url), GROUP, "test-reader")
            try:
                return {s: o.member for s, o in (await client.owners()).items()}
            finally:
                await client.close()
        return asyncio.run(read())

    def statuses(self) -> dict[int, dict[str, Any]]:
        async def read() -> dict[int, dict[str, Any]]:
            client = Client(parse_target(self.etcd.url), GROUP, "test-reader")
            try:
                return await client.statuses()
            finally:
                await client.close()
        return asyncio.run(read())

    def wait_owners(self, predicate: Callable[[dict[int, str]], bool],
                    timeout: float) -> tuple[dict[int, str], float]:
        started = time.monotonic()
        while True:
            got = self.owners()
            if predicate(got):
                return got, time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise AssertionError(f"owners never matched in {timeout:g}s: {got}")
            time.sleep(0.1)


def wait_converged(repo: Repo, timeout: float = 300.0) -> None:
    """Until the one judge says the whole repo has no changes left (`plan
    --detailed-exitcode` exits 0): the group converged, whoever applied what."""
    deadline = time.monotonic() + timeout
    while True:
        got = repo.run("plan", str(repo.path), "--detailed-exitcode")
        if got.code == 0:
            return
        assert time.monotonic() < deadline, f"not converged in {timeout:g}s: {got.out[-800:]}"
        time.sleep(1.0)


def fully_owned(count: int, by: set[str] | None = None) -> Callable[[dict[int, str]], bool]:
    def check(owners: dict[int, str]) -> bool:
        return sorted(owners) == list(range(count)) and (
            by is None or set(owners.values()) == by)
    return check


def fairly_owned(count: int, by: set[str]) -> Callable[[dict[int, str]], bool]:
    """Every shard owned, and each member at exactly its fair share: where a group
    settles. Fully owned alone is not yet settled: while members join, one may still
    hold shards over its quota that it releases on its next round."""
    share = quotas(sorted(by), count)

    def check(owners: dict[int, str]) -> bool:
        return fully_owned(count, by)(owners) and Counter(owners.values()) == Counter(share)
    return check
