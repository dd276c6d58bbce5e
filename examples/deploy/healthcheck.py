"""The container's HEALTHCHECK: GET /healthz on the port the watcher actually serves.

The port is read from the watcher's own command line (PID 1: ``--metrics-port N`` or
``--metrics-port=N``), so a container started with another port, or another command,
is checked where it listens -- never an assumed port. A watcher started without a
metrics port has nothing to ask; it is healthy while it runs (exit 0, said on stdout).
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path


def metrics_port(argv: list[str]) -> int | None:
    for index, word in enumerate(argv):
        if word == "--metrics-port" and index + 1 < len(argv):
            return int(argv[index + 1])
        if word.startswith("--metrics-port="):
            return int(word.split("=", 1)[1])
    return None


def main(args: list[str]) -> int:
    """``healthcheck.py [CMDLINE_FILE]``: the file holding the watcher's NUL-separated
    command line (default ``/proc/1/cmdline``; tests pass their own)."""
    source = Path(args[0]) if args else Path("/proc/1/cmdline")
    argv = source.read_bytes().decode(errors="replace").split("\0")
    port = metrics_port(argv)
    if port is None or port == 0:
        print("no fixed --metrics-port: nothing to ask; the process runs")
        return 0
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as reply:
            return 0 if reply.status == 200 else 1
    except OSError as exc:
        print(f"127.0.0.1:{port}/healthz: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
