"""Run the ``reconcile`` CLI inside the test process, as a subprocess would see it.

Starting ``python -m reconciler`` costs a second or more of CPU in imports alone; most
end-to-end tests are about what a command says and does, not about the process, so they
run ``reconciler.cli.main`` here with what a fresh process would have: the environment
given (and nothing else), the working directory, an empty stdin that is not a terminal,
stdout and stderr captured as text, an uncaught exception printed as Python would and
exit 1. Process-wide state a command leaves behind (a tracer, registered secrets) is
cleared after each run, as the end of a process clears it.

What stays a process: commands that live on or are signalled (``watch``, ``sandbox``), and
anything a test asks to run as one (kill -9, signals, start time, the entry point itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

#: Commands that run until signalled or start processes of their own.
PROCESS_COMMANDS = frozenset({"watch", "sandbox"})
#: The product's test seams that signal their own process (``shell.applying``: SIGKILL
#: at a crash point, SIGSTOP at a pause point): set, the run must be a process.
PROCESS_SEAMS = ("RECONCILE_CRASH_AT", "RECONCILE_PAUSE_AT")


def needs_process(args: Sequence[str], extra: Mapping[str, str] = {}) -> bool:
    command = next((arg for arg in args if not arg.startswith("-")), None)
    return (command in PROCESS_COMMANDS or any(seam in extra for seam in PROCESS_SEAMS)
            or _loop_running())


def _loop_running() -> bool:
    """A test driving an event loop in this thread (Playwright's sync API does): the
    commands' own ``asyncio.run`` cannot nest in it, a process's can."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Text(io.TextIOWrapper):
    """A captured stream like a pipe's: UTF-8, not a terminal, with a ``buffer``."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="strict", newline="\n",
                         write_through=True)

    def text(self) -> str:
        self.flush()
        raw = self.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue().decode("utf-8", errors="replace")


@contextlib.contextmanager
def _as_a_process(cwd: Path, env: Mapping[str, str]) -> Iterator[tuple[_Text, _Text]]:
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    out, err = _Text(), _Text()
    # ``apply --timeout`` counts from the process's start (``/proc/self/stat``): here that
    # is this test process's, minutes ago, so the bound would be spent before the run
    # began. A fresh process's start is now.
    from reconciler.commands import apply
    saved_started = apply.process_started
    now = time.monotonic()
    apply.process_started = lambda: now
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), out, err
    try:
        yield out, err
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        apply.process_started = saved_started
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        _end_of_process()


def _end_of_process() -> None:
    """What a process's end clears: the tracer (flushed, as at exit) and the secrets."""
    from reconciler.core import sanitize
    from reconciler.shell import tracing

    tracing.reset()
    sanitize.forget_secrets()


def run_cli(args: Sequence[str], *, cwd: Path, env: Mapping[str, str]
            ) -> tuple[int, str, str]:
    """``reconcile ARGS`` in ``cwd`` with exactly ``env``: (exit code, stdout, stderr)."""
    from reconciler import cli

    with _as_a_process(cwd, env) as (out, err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:
            code = _exit_code(exc.code, err)
        except Exception:  # what an uncaught exception does to a process
            traceback.print_exc(file=err)
            code = 1
    return code, out.text(), err.text()


def _exit_code(code: object, err: _Text) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)
    return 1
