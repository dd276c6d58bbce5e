"""Fixtures for the interop tests: the real Node TypedRouter server and the Node client CLI.

Node.js is required, not optional: CI has it, and a missing Node must fail these tests
loudly (never skip them), with the fix in the message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from interop_harness import NODE_DIR, NodeResult, NodeServer, RunNodeClient

START_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 15.0


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "Node.js is not on PATH: tests/interop need it (Node 20+; CI has it). "
            "Install Node.js, then run `make node-deps`.",
            pytrace=False,
        )
    if not (NODE_DIR / "node_modules" / "@api.global" / "typedrequest").is_dir():
        pytest.fail(
            f"{NODE_DIR}/node_modules is missing @api.global/typedrequest: run `make node-deps`.",
            pytrace=False,
        )
    return node


@pytest.fixture(scope="session")
def node_bin() -> str:
    """Path of the ``node`` executable; fails the test (not skips) when Node is absent."""
    return _node()


@pytest.fixture(scope="module")
def node_server(node_bin: str) -> Iterator[NodeServer]:
    """Start server.mjs on a free loopback port for the module; stop it afterwards."""
    token = "interop-canary-token-7f3a"
    env = {**os.environ, "INTEROP_TOKEN": token}
    proc = subprocess.Popen(
        [node_bin, "server.mjs"],
        cwd=NODE_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    # Drain stderr so the library's console logging can never fill the pipe and block it.
    stderr_lines: list[str] = []
    threading.Thread(target=lambda: stderr_lines.extend(stderr), daemon=True).start()
    if not first or not first[0].strip():
        proc.kill()
        proc.wait(5)
        pytest.fail(f"server.mjs did not print its port: {''.join(stderr_lines)[-2000:]}")
    port = int(json.loads(first[0])["port"])
    try:
        yield NodeServer(base=f"http://127.0.0.1:{port}", token=token)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="session")
def run_node_client(node_bin: str) -> RunNodeClient:
    """Run client.mjs (the real TypedRequest client) once and parse its JSON line.

    ``request`` goes over stdin so that tokens never reach the process list.
    """

    def run(
        url: str,
        method: str,
        request: Mapping[str, Any] | None = None,
        *,
        with_identity: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> NodeResult:
        args = [node_bin, "client.mjs", url, method, "-"]
        if with_identity:
            args.append("--with-identity")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
        full_env.update(env or {})
        done = subprocess.run(
            args,
            cwd=NODE_DIR,
            env=full_env,
            input=json.dumps(dict(request or {})),
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_S,
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 1, f"client.mjs printed {done.stdout!r}; stderr: {done.stderr[-2000:]}"
        return NodeResult(done.returncode, json.loads(lines[0]), done.stderr)

    return run
