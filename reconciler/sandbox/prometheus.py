"""A real Prometheus scraping a sandbox's clusters (issue 34): for the verification
tests and ``make demo-verification``.

``start(sandbox, directory)`` starts Debian's ``/usr/bin/prometheus`` on a free 127.0.0.1
port with a configuration of its own in ``directory``: one target per sandbox cluster (its
address on the mesh port, ``/metrics`` over HTTPS verified with the sandbox CA, server name
the gateway hostname, the scrape token of ``<state>/metrics-token`` as a Bearer credentials
file), a ``cluster`` label per target, ``scrape_interval`` 1s, its storage in
``directory``. It returns once every target is up (``up == 1`` as Prometheus says it), or
raises ``PrometheusError`` with Prometheus's own log. A machine without the binary gets
``PrometheusMissing``, saying how to install it.

Must not: be imported by reconcile itself (it is the sandbox's, like the clusters).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reconciler.sandbox.launcher import Sandbox

PROMETHEUS_BINARY = Path("/usr/bin/prometheus")
INSTALL_HINT = "run `make system-deps` (Debian's prometheus package)"
SCRAPE_INTERVAL = "1s"
READY_TIMEOUT_S = 90.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape_config(sb: Sandbox, *, job: str = "sandbox") -> dict[str, Any]:
    """The scrape configuration of every cluster of ``sb`` (JSON is YAML)."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [{
            "job_name": job,
            "scheme": "https",
            "metrics_path": "/metrics",
            "tls_config": {"ca_file": str(sb.ca_file), "server_name": sb.gateway},
            "authorization": {"type": "Bearer",
                              "credentials_file": str(sb.metrics_token_file)},
            "static_configs": [
                {"targets": [f"{address}:{sb.mesh_port}"], "labels": {"cluster": cluster}}
                for cluster, address in sb.addresses.items()],
        }],
    }


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered something else than success."""


class PrometheusMissing(PrometheusError):
    """No Prometheus binary on this machine."""


@dataclass
class Prometheus:
    """A running Prometheus: its base URL and how to ask it."""

    url: str
    directory: Path
    process: subprocess.Popen[bytes]
    #: seconds from the start of the process until it answered ``/-/ready``, and until
    #: every target was up (Prometheus applies its targets on a 5 s tick, hence ~6 s)
    ready_seconds: float = 0.0
    startup_seconds: float = 0.0
    _http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10.0))

    @property
    def log(self) -> str:
        return (self.directory / "prometheus.log").read_text(encoding="utf-8",
                                                              errors="replace")

    def api(self, path: str, **params: str) -> Any:
        response = self._http.get(f"{self.url}{path}", params=params)
        body = response.json()
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {response.text[:2000]}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's samples (``[{"metric": {...}, "value": [t, "v"]}, ...]``)."""
        data = self.api("/api/v1/query", query=promql)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{promql}: a {data['resultType']}, not a vector")
        return list(data["result"])

    def by_label(self, promql: str, label: str = "cluster") -> dict[str, float]:
        """An instant query's values keyed by one label."""
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in self.query(promql)}

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("/api/v1/targets")["activeTargets"])

    def wait_until(self, promql: str, condition: Any, *, timeout: float = 60.0,
                   label: str = "cluster") -> dict[str, float]:
        """Poll ``promql`` until ``condition(values by label)`` holds; the last values,
        or a ``TimeoutError`` naming what was seen."""
        deadline = time.monotonic() + timeout
        seen: dict[str, float] = {}
        while True:
            seen = self.by_label(promql, label)
            if condition(seen):
                return seen
            if time.monotonic() > deadline:
                raise TimeoutError(f"{promql}: still {seen} after {timeout}s")
            time.sleep(0.25)

    def stop(self) -> None:
        self._http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _wait_ready(prom: Prometheus, began: float, expected: int) -> None:
    deadline = began + READY_TIMEOUT_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        if prom.process.poll() is not None:
            raise PrometheusError(f"prometheus exited with {prom.process.returncode}:\n{prom.log}")
        with contextlib.suppress(httpx.HTTPError, ValueError, PrometheusError):
            if not prom.ready_seconds:
                if prom._http.get(f"{prom.url}/-/ready").status_code != 200:
                    raise ValueError("not ready")
                prom.ready_seconds = time.monotonic() - began
            targets = prom.targets()
            last = json.dumps([(t["labels"].get("cluster"), t["health"], t["lastError"])
                               for t in targets])
            if len(targets) == expected and all(t["health"] == "up" for t in targets):
                prom.startup_seconds = time.monotonic() - began
                return
        time.sleep(0.1)
    raise PrometheusError(f"prometheus: not every target up after {READY_TIMEOUT_S}s: {last}\n"
                       f"{prom.log[-4000:]}")


def start(sb: Sandbox, directory: Path, *, binary: Path = PROMETHEUS_BINARY) -> Prometheus:
    """A Prometheus scraping every cluster of ``sb``, once all its targets are up."""
    if not binary.exists():
        raise PrometheusMissing(f"{binary} is missing: {INSTALL_HINT}")
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    config.write_text(json.dumps(scrape_config(sb), indent=2), encoding="utf-8")
    port = _free_port()
    began = time.monotonic()
    with open(directory / "prometheus.log", "wb") as log:
        process = subprocess.Popen(
            [str(binary), f"--config.file={config}",
             f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=directory)
    prom = Prometheus(url=f"http://127.0.0.1:{port}", directory=directory, process=process)
    try:
        _wait_ready(prom, began, len(sb.addresses))
    except BaseException:
        prom.stop()
        raise
    return prom
