"""``make demo`` (second part): staging → prod, against two sandboxes side by side.

Starts a staging and a prod sandbox (each a control plane and three clusters, on the
ports ``examples/environments`` names, free ones when those are taken; ``DEMO_PORT`` /
``DEMO_MESH_PORT`` choose staging's, prod's 100 above, 0 any free ones), copies that repo
into a throwaway git checkout, then runs what a user types: validate; apply staging (the
gate waits until every staging cluster proves v2.4.0); ``promote`` -- refused while
staging's soak runs (``not_soaked`` with the time it becomes eligible); a pull request
that pins v2.4.0 in prod before then (``pin --env prod`` in the working tree): prod's
plan is NO-GO ``not_soaked`` with the same eligible time, and the early pin is dropped;
``status``; after the soak, ``promote --commit`` (the pin spliced into prod's file, the
evidence in the commit) and apply prod, which its gate proves on every prod cluster;
``status --clusters`` again. Stops the sandboxes it started. Each step is the real CLI in
a child process; the demo exits non-zero when a step does not do what it says.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
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


#: Between staging's ports and prod's when ``DEMO_PORT`` chooses them (the example's
#: layout: 18543/18544 and 18643/18644).
PROD_OFFSET = 100


def ports(env: Mapping[str, str]) -> tuple[dict[str, tuple[int, int]], bool]:
    """Each sandbox's (control-plane, mesh) ports, and whether they were asked for:
    ``DEMO_PORT`` / ``DEMO_MESH_PORT`` as ``make demo`` takes them (0: any free port) are
    staging's, prod's are ``PROD_OFFSET`` above; without them, the example's ports."""
    port, mesh = (_asked(env, name) for name in ("DEMO_PORT", "DEMO_MESH_PORT"))
    if port is None and mesh is None:
        return dict(PORTS), False
    port = PORTS["staging"][0] if port is None else port
    mesh = (port + 1 if port else 0) if mesh is None else mesh
    return {"staging": (port, mesh),
            "prod": (port + PROD_OFFSET if port else 0,
                     mesh + PROD_OFFSET if mesh else 0)}, True


def _asked(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) + PROD_OFFSET > 65535:
        raise SystemExit(f"demo-environments: {name}={text!r} is not a port (0 for any free "
                         f"one; prod listens {PROD_OFFSET} above)")
    return int(text)


def _start(name: str, port: int, mesh: int, *, asked: bool = False) -> launcher.Sandbox:
    """The sandbox on its ports; on free ones when the example's are taken (a sandbox
    already up, two people on one host) -- never instead of ports asked for. The copied
    Settings name the ports used."""
    try:
        return launcher.start(STATE / name, port=port, mesh_port=mesh, converge_delay_ms=500)
    except (launcher.SandboxError, OSError) as exc:
        if (port == 0 and mesh == 0) or asked:
            raise
        print(f"(ports {port}/{mesh} are not free ({exc}): using free ones)", flush=True)
        return launcher.start(STATE / name, port=0, mesh_port=0, converge_delay_ms=500)


def _eligible(said: str) -> float | None:
    """The eligible time a refusal names (``eligible 2026-12-02 14:05:00Z``), in seconds."""
    found = re.search(r"eligible (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)Z", said)
    if found is None:
        return None
    return calendar.timegm(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S"))


def main() -> int:
    sandboxes: dict[str, launcher.Sandbox] = {}
    try:
        chosen, asked = ports(os.environ)
        for name, (port, mesh) in chosen.items():
            print(f"Starting the {name} sandbox (control plane :{port}, clusters :{mesh}) ...",
                  flush=True)
            try:
                sandboxes[name] = _start(name, port, mesh, asked=asked)
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
        problems: list[str] = []

        def expect(done: subprocess.CompletedProcess[str], code: int, what: str) -> None:
            if done.returncode != code:
                problems.append(f"{what}: exit {done.returncode}, expected {code}")

        expect(_step("the pipeline, its policy and both environments", ["validate", r], env,
                     ROOT), 0, "validate")
        expect(_step("v2.4.0 goes to staging",
                     ["apply", r, "--env", "staging", "--auto-approve"], env, ROOT), 0,
               "apply staging")
        refused = _step("prod may not have it yet: staging proves it, not yet for the soak",
                        ["promote", "checkout", "--to", "prod", "-C", r], env, ROOT)
        expect(refused, 10, "promote before the soak")
        # A pull request that pins it in prod now (as if merged early): prod's own plan
        # holds it, with the same eligible time -- the rules, not the command, decide.
        early = _step("a pull request pinning v2.4.0 in prod now: prod's plan is NO-GO and "
                      "says when it may go", ["pin", "checkout", "v2.4.0", "--env", "prod",
                                              "-C", r], env, ROOT)
        if "not_soaked" not in early.stdout + early.stderr:
            problems.append("prod's plan with the early pin is not held by not_soaked")
        print("\n$ git checkout -- environments/prod   # not merged: promote writes the pin "
              "once staging has proven it for the soak", flush=True)
        subprocess.run(["git", "-C", r, "checkout", "--", "environments/prod"], check=True)
        _step("the on-call view", ["status", r], env, ROOT)
        when = _eligible(refused.stderr)
        if when is None:
            problems.append("promote's refusal names no eligible time")
        else:
            wait = max(0.0, when - time.time()) + 1
            print(f"\n... waiting {wait:.0f}s for the soak", flush=True)
            time.sleep(wait)
        expect(_step("soaked: promote writes the pin staging proves, and commits the evidence",
                     ["promote", "checkout", "--to", "prod", "-C", r, "--commit"], env,
                     ROOT), 0, "promote after the soak")
        expect(_step("prod: apply, gated on every prod cluster",
                     ["apply", r, "--env", "prod", "--auto-approve"], env, ROOT), 0,
               "apply prod")
        expect(_step("both environments, per cluster", ["status", r, "--clusters"], env,
                     ROOT), 0, "status")
        for problem in problems:
            print(f"demo: {problem}", file=sys.stderr)
        return 1 if problems else 0
    finally:
        for sb in sandboxes.values():
            sb.stop()


if __name__ == "__main__":
    sys.exit(main())
