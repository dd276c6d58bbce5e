"""Sandbox processes never import modules from the directory the sandbox was started in.

A ``secrets.py`` or ``typing.py`` next to where the user typed ``reconcile sandbox up``
must not shadow the standard library in the control plane or the clusters (``python -m``
and an empty ``PYTHONPATH`` entry would both put the working directory on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.sandbox import launcher
from tests.sandbox.wire import ControlPlaneClient, MeshClient

pytestmark = pytest.mark.integration

TRAPS = ("secrets", "typing", "json", "sqlite3", "ssl")


def _lay_traps(directory: Path) -> Path:
    """Modules named like the standard library's that leave a marker when imported."""
    markers = directory / "markers"
    markers.mkdir()
    for name in TRAPS:
        (directory / f"{name}.py").write_text(
            "import os as _os\n"
            f"open(_os.path.join({str(markers)!r}, {name!r}), 'w').close()\n"
            f"raise ImportError('trap {name} imported from the working directory')\n")
    return markers


def _serves_checkout(sb: launcher.Sandbox) -> None:
    """The sandbox's control plane answers: the seeded checkout service is there."""
    cp = ControlPlaneClient(sb)
    try:
        assert cp.service("svc-checkout")["id"] == "svc-checkout"
    finally:
        cp.close()


@pytest.mark.parametrize("pythonpath", [None, "", os.pathsep, "relative-dir"])
def test_a_sandbox_started_next_to_a_secrets_py_never_imports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pythonpath: str | None,
) -> None:
    trap_dir = tmp_path / "cwd"
    trap_dir.mkdir()
    markers = _lay_traps(trap_dir)
    relative = trap_dir / "relative-dir"  # a relative PYTHONPATH entry resolves here
    relative.mkdir()
    (relative / "secrets.py").write_text((trap_dir / "secrets.py").read_text())
    monkeypatch.chdir(trap_dir)
    if pythonpath is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", pythonpath)

    sb = launcher.start(tmp_path / "sandbox", clusters=1, converge_delay_ms=100)
    try:
        _serves_checkout(sb)
        mesh = MeshClient(sb)
        try:
            assert mesh.health("sn1").status_code == 200
        finally:
            mesh.close()
        # A restarted process is launched the same way.
        sb.restart("control-plane")
        _serves_checkout(sb)
    finally:
        sb.stop()
    assert sorted(p.name for p in markers.iterdir()) == []


def test_the_cli_started_from_a_trap_directory_stays_clean(tmp_path: Path) -> None:
    """``reconcile sandbox up --detach`` (the console script) from a directory of traps."""
    script = Path(sys.executable).with_name("reconcile")
    if not script.exists():
        pytest.skip("the reconcile console script is not installed in this environment")
    trap_dir = tmp_path / "cwd"
    trap_dir.mkdir()
    markers = _lay_traps(trap_dir)
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
    env["PYTHONPATH"] = ""
    env["RECONCILE_STATE_DIR"] = str(state)
    up = subprocess.run([str(script), "sandbox", "up", "--detach", "--clusters", "1",
                         "--state", str(state), "--port", "0", "--mesh-port", "0"],
                        cwd=trap_dir, env=env, capture_output=True, text=True, timeout=60,
                        stdin=subprocess.DEVNULL)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        sb = launcher.attach(state)
        _serves_checkout(sb)
    finally:
        subprocess.run([str(script), "sandbox", "down", "--state", str(state)],
                       cwd=trap_dir, env=env, capture_output=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert sorted(p.name for p in markers.iterdir()) == []
