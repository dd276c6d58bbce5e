"""``make demo`` (second part): staging → prod, against two sandboxes side by side.

Starts a staging and a prod sandbox (each a control plane and three clusters, on the
ports ``examples/environments`` names), copies that repo into a throwaway git checkout,
then runs what a user types: validate; apply staging (the gate waits until every staging
cluster proves v2.4.0); plan prod and ``promote`` -- refused while staging's soak runs
(``not_soaked`` with the time it becomes eligible); ``status``; after the soak,
``promote --commit`` (the pin spliced into prod's file, the evidence in the commit) and
apply prod, which its gate proves on every prod cluster; ``status --clusters`` again.
Stops the sandboxes it started. Each step is the real CLI in a child process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from reconciler.sandbox import launcher

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "environments"
STATE = ROOT / ".sandbox"
PORTS = {"staging": (18543, 18544), "prod": (18643, 18644)}


def _step(title: str, args: list[str], env: dict[str, str],
          cwd: Path) -> subprocess.CompletedProcess[str]:
    print(f"\n$ reconcile {' '.join(args)}   # {title}", flush=True)
    done = subprocess.run([sys.executable, "-m", "reconciler", *args], env=env, cwd=cwd,
                          check=False, text=True, capture_output=True)
    sys.stdout.write(done.stdout)
    sys.stdout.write(done.stderr)
    print(f"(exit {done.returncode})", flush=True)
    return done


def _repo(sandboxes: dict[str, launcher.Sandbox]) -> Path:
    repo = STATE / "environments-demo"
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(EXAMPLE, repo)
    for name, sb in sandboxes.items():
        settings = json.loads(sb.settings_yaml(interval_seconds=0.5, attempts=60))
        suffix = "" if name == "staging" else "_PROD"
        settings["controlPlane"]["tokenEnv"] = "RECONCILE_TOKEN" + suffix
        settings["mesh"]["signer"]["keyFileEnv"] = "RECONCILE_SIGNER_KEY" + suffix
        (repo / "environments" / name / "settings.yaml").write_text(
            json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    git = ["git", "-C", str(repo), "-c", "user.email=demo@example.net", "-c",
           "user.name=demo"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "staging and prod"], check=True)
    subprocess.run([*git, "config", "user.email", "demo@example.net"], check=True)
    subprocess.run([*git, "config", "user.name", "demo"], check=True)
    return repo


def main() -> int:
    sandboxes: dict[str, launcher.Sandbox] = {}
    try:
        for name, (port, mesh) in PORTS.items():
            print(f"Starting the {name} sandbox (control plane :{port}, clusters :{mesh}) ...",
                  flush=True)
            try:
                sandboxes[name] = launcher.start(STATE / name, port=port, mesh_port=mesh,
                                                 converge_delay_ms=500)
            except (launcher.SandboxError, OSError) as exc:
                print(f"the {name} sandbox did not start: {exc}", file=sys.stderr)
                return 1
        repo = _repo(sandboxes)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
        env.update({"RECONCILE_TOKEN": sandboxes["staging"].token,
                    "RECONCILE_SIGNER_KEY": str(sandboxes["staging"].signer_key_file),
                    "RECONCILE_TOKEN_PROD": sandboxes["prod"].token,
                    "RECONCILE_SIGNER_KEY_PROD": str(sandboxes["prod"].signer_key_file),
                    "RECONCILE_STATE_DIR": str(STATE / "environments-journal")})
        r = str(repo)
        _step("the pipeline, its policy and both environments", ["validate", r], env, ROOT)
        _step("v2.4.0 goes to staging", ["apply", r, "--env", "staging", "--auto-approve"],
              env, ROOT)
        _step("prod would promote it: staging proves it, not yet for 20s",
              ["plan", r, "--env", "prod"], env, ROOT)
        refused = _step("so promote refuses, and says when",
                        ["promote", "checkout", "--to", "prod", "-C", r], env, ROOT)
        _step("the on-call view", ["status", r], env, ROOT)
        found = re.search(r"eligible (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)Z", refused.stderr)
        if found:
            when = time.mktime(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")) \
                - time.timezone
            wait = max(0.0, when - time.time()) + 1
            print(f"\n... waiting {wait:.0f}s for the soak", flush=True)
            time.sleep(wait)
        _step("soaked: promote writes the pin staging proves, and commits the evidence",
              ["promote", "checkout", "--to", "prod", "-C", r, "--commit"], env, ROOT)
        _step("prod: apply, gated on every prod cluster",
              ["apply", r, "--env", "prod", "--auto-approve"], env, ROOT)
        done = _step("both environments, per cluster", ["status", r, "--clusters"], env, ROOT)
        return done.returncode
    finally:
        for sb in sandboxes.values():
            sb.stop()


if __name__ == "__main__":
    sys.exit(main())
