"""A burst of commits seen only through the HEAD poll (no file event has arrived yet, as
under load, when watchfiles' events lag behind git) is still one reconcile, at the end:
the poll waits for the same quiet as file events do."""

from __future__ import annotations

import asyncio
import io
import time
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.core.planning import Provenance
from reconciler.engine import Loaded
from reconciler.shell.watching import Log, Watcher


@dataclass
class Burst:
    """HEAD moves every ``every`` seconds, ``commits`` times, from when it starts."""

    commits: int = 30
    every: float = 0.06
    started: float = field(default_factory=time.monotonic)
    loads: list[str | None] = field(default_factory=list)

    def head(self) -> Provenance:
        n = min(self.commits, int((time.monotonic() - self.started) / self.every))
        return Provenance(commit=f"{n:040d}")

    def load(self) -> Loaded:
        at = self.head()
        self.loads.append(at.commit)
        return Loaded(None, ("nothing valid in this test",), at)

    async def close(self) -> None:
        return None

    # The rest of the watcher's ``Steps``: no pipeline, no proposals, no revert pending.
    eligible_at: int | None = None
    stage: None = None
    proposer: None = None

    async def propose(self) -> tuple[()]:
        return ()

    def revert_pending(self, commit: str) -> str | None:
        return None


def test_a_burst_seen_only_by_the_head_poll_is_one_reload_at_the_final_commit(
        tmp_path: Path) -> None:
    steps = Burst()
    watcher = Watcher(root=tmp_path, steps=steps, log=Log(stream=io.StringIO()),  # type: ignore[arg-type]
                      resync=600, debounce=0.5, head_poll=0.05)

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(watcher.run(stop))
        await asyncio.sleep(steps.commits * steps.every + 2.0)
        stop.set()
        await task

    asyncio.run(run())
    # the start's read, then one read after the burst, at its last commit
    assert steps.loads[1:] == [f"{steps.commits:040d}"], steps.loads
