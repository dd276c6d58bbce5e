"""The in-process runner gives a command what a fresh process would have."""

from __future__ import annotations

import os
import time
from pathlib import Path

from reconciler.commands import apply
from tests import inprocess


def test_a_run_in_the_test_process_starts_now_not_when_the_test_process_did(
        tmp_path: Path) -> None:
    original = apply.process_started
    # the test process has run for a while (at least two seconds, so that the difference
    # is measurable); a fresh `reconcile` has not
    time.sleep(max(0.0, 2.0 - (time.monotonic() - original())))
    with inprocess._as_a_process(tmp_path, {"HOME": str(tmp_path)}):
        assert abs(apply.process_started() - time.monotonic()) < 1.0
        assert os.getcwd() == str(tmp_path) and dict(os.environ) == {"HOME": str(tmp_path)}
    assert apply.process_started is original
    assert os.getcwd() != str(tmp_path)
