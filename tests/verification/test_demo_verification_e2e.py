"""``make demo-verification`` walked as a user runs it: a healthy release proven with its
checks, then a release that runs everywhere but fails its checks on sn2 is reverted and
held naming the check, and the story is told (issue 34)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def test_the_demo_reverts_and_holds_a_release_failing_its_checks_on_one_cluster(
        tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "reconciler.demo_verification"], cwd=ROOT,
                          env={**os.environ, "DEMO_STATE": str(tmp_path / "demo"),
                               "NO_COLOR": "1"},
                          capture_output=True, text=True, timeout=900, check=False)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-6000:]
    assert "checkout on sn2: FAILING CHECK" in text, text[-6000:]
    assert "check checkout-works/error-ratio failed: 1 (not result < 0.01)" in text
    assert "REVERTED in git" in text  # history
    [hold] = (tmp_path / "demo" / "verify-demo" / "holds").glob("*.yaml")
    assert "checkout-works/answers failed: HTTP 500" in hold.read_text()
    # Nothing of it is left running: the demo stops what it started.
    assert "(Prometheus and the sandbox stopped)" in text
