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
from interop_harness import NODE_DIR, NodeResult, NodeServer, RunNodeClient, make_loopback_pki

START_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 15.0
TOKEN = "interop-canary-token-7f3a"


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


def _start_server(node_bin: str, env: Mapping[str, str]) -> tuple[subprocess.Popen[str], int]:
    """Start server.mjs and wait for the ``{"port": N}`` line it prints when listening."""
    proc = subprocess.Popen(
        [node_bin, "server.mjs"],
        cwd=NODE_DIR,
        env={**os.environ, **env},
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
        _stop(proc)
        pytest.fail(f"server.mjs did not print its port: {''.join(stderr_lines)[-2000:]}")
    return proc, int(json.loads(first[0])["port"])


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="module")
def node_server(node_bin: str) -> Iterator[NodeServer]:
    """server.mjs over plain HTTP on a free loopback port, for the module."""
    proc, port = _start_server(node_bin, {"INTEROP_TOKEN": TOKEN})
    try:
        yield NodeServer(base=f"http://127.0.0.1:{port}", token=TOKEN)
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def node_tls_server(node_bin: str, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[NodeServer]:
    """server.mjs over HTTPS with a throwaway CA (``.ca_file``), for the module."""
    ca, cert, key = make_loopback_pki(tmp_path_factory.mktemp("interop-pki"))
    proc, port = _start_server(node_bin, {"INTEROP_TOKEN": TOKEN, "INTEROP_TLS_CERT": str(cert),
                                          "INTEROP_TLS_KEY": str(key)})
    try:
        yield NodeServer(base=f"https://127.0.0.1:{port}", token=TOKEN, ca_file=ca)
    finally:
        _stop(proc)


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
