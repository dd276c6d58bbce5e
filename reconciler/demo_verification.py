"""``make demo-verification``: a release that runs but does not work, caught per cluster
(issue 34, docs/verification.md).

Starts the sandbox (control plane and three clusters, on free ports) and a real Prometheus
scraping every cluster (Debian's ``prometheus``; ``make system-deps``), then walks what a
user would, with the real CLI in a child process each step:

1. a copy of the reference repo holds checkout to two checks -- its app answers through
   each cluster, and its error ratio per cluster in Prometheus stays under 1 % -- and
   ``apply`` proves every release, checkout's checks included (exit 0);
2. a new checkout release is pinned, and ``sn2``'s app answers errors for it only (the
   ``app-errors`` fault): the release *runs* everywhere, but ``apply --on-gate-failure
   revert`` finds it failing its checks on sn2, names the cluster, the check and the value,
   reverts it in git, holds it naming the check, rolls back and proves the way back
   (exit 15);
3. ``history`` tells the story, and ``status --clusters`` shows each cluster's checks.

Stops what it started. Owns nothing else: every rule is reconcile's own.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from reconciler.demo import REPO, ROOT, _step, pin_checkout_v250
from reconciler.sandbox import launcher
from reconciler.sandbox import prometheus as prometheus_server

#: Where it keeps its sandbox, Prometheus and repo (``DEMO_STATE`` elsewhere: the tests).
STATE = Path(os.environ.get("DEMO_STATE") or ROOT / ".sandbox-verification")

#: The share of checkout's answers for the digest on the cluster that are 5xx over the
#: last 5 s (the sandbox counts 2 requests a second per app; Prometheus scrapes every
#: second). No sample yet for a new digest is unknown, never a pass.
ERROR_RATIO = (
    '(sum(rate(sandbox_app_requests_total{cluster="{{cluster}}",app="{{app}}",'
    'digest="{{digest}}",code=~"5.."}[5s])) or vector(0)) / '
    'sum(rate(sandbox_app_requests_total{cluster="{{cluster}}",app="{{app}}",'
    'digest="{{digest}}"}[5s]))')

VERIFICATION = f"""\
apiVersion: reconcile/v1
kind: Verification
name: checkout-works
scope:
  services: [checkout]
checks:
  - name: answers            # through each cluster's own address, not the gateway's mix
    http:
      path: /sandbox/apps/{{{{app}}}}/healthz
      status: 200
      maxLatencySeconds: 1.5
    count: 2
    intervalSeconds: 0.2
  - name: error-ratio        # per cluster, from the clusters' own counters
    prometheus:
      query: '{ERROR_RATIO}'
      successCondition: result < 0.01
    count: 1
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=demo@example.net", "-c",
                    "user.name=demo", *args], check=True, capture_output=True)


def _repo(sandbox: launcher.Sandbox, prometheus_url: str) -> Path:
    """The reference repo on this sandbox's ports, checkout held to its checks, committed."""
    repo = STATE / "verify-demo"
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(ROOT / REPO, repo)
    # The gate polls long enough for a new digest's first samples (a rate needs two
    # scrapes): until then its checks are unknown, and the gate waits.
    settings = json.loads(sandbox.settings_yaml(interval_seconds=0.5, attempts=80))
    settings["verification"] = {"prometheus": {"url": prometheus_url, "timeoutSeconds": 2}}
    (repo / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n",
                                        encoding="utf-8")
    (repo / "verifications").mkdir()
    (repo / "verifications" / "checkout.yaml").write_text(VERIFICATION, encoding="utf-8")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "checkout is held to two checks per cluster")
    return repo


def _promote(repo: Path, sandbox: launcher.Sandbox) -> str:
    """Pin checkout's v2.5.0 in a commit; sn2's app answers errors for that digest only."""
    new = pin_checkout_v250(repo, sandbox)
    _git(repo, "commit", "-qam", "promote checkout to v2.5.0")
    sandbox.fault("sn2", "app-errors", digest=new)
    return new


def main() -> int:
    print(f"Starting the sandbox (control plane + 3 clusters) in {STATE} ...", flush=True)
    if STATE.exists():
        shutil.rmtree(STATE)
    sandbox = launcher.start(STATE, port=0, mesh_port=0, converge_delay_ms=800)
    prom: prometheus_server.Prometheus | None = None
    try:
        print("Starting Prometheus, scraping every cluster's /metrics ...", flush=True)
        try:
            prom = prometheus_server.start(sandbox, STATE / "prometheus")
        except prometheus_server.PrometheusError as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 1
        print(f"(Prometheus on {prom.url}, every target up after "
              f"{prom.startup_seconds:.1f}s)", flush=True)
        env = {**os.environ, **sandbox.env(), "RECONCILE_STATE_DIR": str(STATE / "state")}
        repo = _repo(sandbox, prom.url)
        where = str(repo)
        steps: list[tuple[str, list[str], set[int]]] = [
            ("checkout is held to two checks on every cluster", ["validate", where], {0}),
            ("make it so: every release proven, checkout's checks passing on every cluster",
             ["apply", where, "--auto-approve"], {0}),
        ]
        for title, args, ok in steps:
            if (code := _step(title, args, env)) not in ok:
                print(f"\ndemo: `reconcile {shlex.join(args)}` exited {code}", file=sys.stderr)
                return 1
        new = _promote(repo, sandbox)
        print(f"\n(sn2's checkout now answers 500 for {new[:19]}…: it runs, it does not work)")
        steps = [
            ("v2.5.0 runs everywhere but fails its checks on sn2: reverted, held, rolled "
             "back, proven (exit 15)",
             ["apply", where, "--auto-approve", "--only", "checkout",
              "--on-gate-failure", "revert"], {15}),
            ("the story: the failed release, its revert and hold, the proven way back",
             ["history", where, "--limit", "3"], {0}),
            ("each cluster's checks, now on the rolled-back release",
             ["status", where, "--clusters"], {0}),
        ]
        for title, args, ok in steps:
            if (code := _step(title, args, env)) not in ok:
                print(f"\ndemo: `reconcile {shlex.join(args)}` exited {code}", file=sys.stderr)
                return 1
        holds = sorted((repo / "holds").glob("*.yaml"))
        for hold in holds:
            print(f"\n$ cat {hold}\n{hold.read_text(encoding='utf-8')}", end="")
        if not holds:
            print("\ndemo: the failing release was not held", file=sys.stderr)
            return 1
        print("\nDemo complete: docs/verification.md says how checks are declared and judged.")
        return 0
    finally:
        if prom is not None:
            prom.stop()
        sandbox.stop()
        print("(Prometheus and the sandbox stopped)")


if __name__ == "__main__":
    sys.exit(main())
