"""``make demo``: the whole loop on one machine, against the sandbox.

Starts the sandbox with its default seed -- on ``DEMO_PORT`` / ``DEMO_MESH_PORT`` when set
(0: any free port), else on its default ports, or on free ones when those are taken, so
two people on one host do not collide -- then runs what a user
would: validate the reference repo, plan it (a promotion, a rollback, egress and grant
changes, with live evidence from every cluster), plan a PR against its base
(``plan --base``: what the branch introduces vs what was already pending), apply
it (the gate waits until every cluster proves the new digests), and plan again (no
changes). Then a release sn3 refuses (the ``refuse-digest`` fault) is reverted in git,
held, rolled back and proven (``apply --on-gate-failure revert``), and ``history`` tells
it. Last, the web view (docs/web-view.md): ``status --format html`` writes it as a file,
and a ``watch --view`` serves it; its URL is printed and, in a terminal, it stays up until
Enter (without one the demo ends as before). Stops the sandbox it started. Each step is
the real CLI in a child process, exactly as a user types it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from reconciler.sandbox import launcher

ROOT = Path(__file__).resolve().parent.parent
REPO = Path("examples/desired-state")
STATE = ROOT / ".sandbox"


def _step(title: str, args: list[str], env: dict[str, str]) -> int:
    command = f"$ reconcile {shlex.join(args)}"
    if sys.stdout.isatty() and "NO_COLOR" not in os.environ:
        command = f"\x1b[1m{command}\x1b[0m"
    print(f"\n{command}   # {title}", flush=True)
    return subprocess.run([sys.executable, "-m", "reconciler", *args], env=env, cwd=ROOT,
                          check=False).returncode


def _pr_repo() -> Path:
    """A throwaway git repo with two commits of the reference repo: the base leaves
    search's egress alone, the "PR" revokes it -- for ``plan --base``."""
    pr = STATE / "pr-demo"
    if pr.exists():
        shutil.rmtree(pr)
    shutil.copytree(ROOT / REPO, pr)
    search = pr / "services" / "search.yaml"
    head = search.read_text(encoding="utf-8")
    search.write_text(head.replace("egress: []\n", ""), encoding="utf-8")
    git = ["git", "-C", str(pr), "-c", "user.email=demo@example.net", "-c", "user.name=demo"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    search.write_text(head, encoding="utf-8")
    subprocess.run([*git, "commit", "-qam", "search: revoke every egress destination"],
                   check=True)
    return pr


def pin_checkout_v250(repo: Path, sandbox: launcher.Sandbox) -> str:
    """Push checkout v2.5.0 to the sandbox's registry and pin it in ``repo``'s checkout
    file in place of v2.4.0 (uncommitted); its digest."""
    checkout = repo / "services" / "checkout.yaml"
    text = checkout.read_text(encoding="utf-8")
    pinned = next(line.split("digest:", 1)[1].strip() for line in text.splitlines()
                  if line.strip().startswith("digest:"))
    new = sandbox.push("checkout", "v2.5.0")
    checkout.write_text(text.replace(pinned, new).replace("tag: v2.4.0", "tag: v2.5.0"),
                        encoding="utf-8")
    return new


def _revert_repo(sandbox: launcher.Sandbox) -> Path:
    """A throwaway git repo of the reference repo whose last commit promotes checkout to
    a new release v2.5.0 -- which the demo then makes sn3 refuse (issue 20)."""
    repo = STATE / "revert-demo"
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(ROOT / REPO, repo)
    git = ["git", "-C", str(repo), "-c", "user.email=demo@example.net", "-c", "user.name=demo"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    new = pin_checkout_v250(repo, sandbox)
    subprocess.run([*git, "commit", "-qam", "promote checkout to v2.5.0"], check=True)
    sandbox.fault("sn3", "refuse-digest", digest=new)
    return repo
DEFAULT_PORTS = (launcher.DEFAULT_PORT, launcher.DEFAULT_MESH_PORT)


def _port(name: str) -> int | None:
    """``DEMO_PORT`` / ``DEMO_MESH_PORT``: a port number, or 0 for any free one."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) > 65535:
        raise SystemExit(f"demo: {name}={text!r} is not a port (0 for any free one)")
    return int(text)


def _start(port: int | None, mesh_port: int | None) -> launcher.Sandbox:
    """The sandbox on the ports asked for; with none asked for, on the defaults when they
    are free, else on free ports (two people on one host, or a sandbox already up)."""
    try:
        return launcher.start(STATE, port=launcher.DEFAULT_PORT if port is None else port,
                              mesh_port=launcher.DEFAULT_MESH_PORT if mesh_port is None
                              else mesh_port, converge_delay_ms=800)
    except (OSError, launcher.SandboxError) as exc:
        taken = (isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE) or \
            "is taken" in str(exc)
        if not taken or (port is not None and mesh_port is not None):
            raise SystemExit(f"demo: cannot start the sandbox: {exc} (set DEMO_PORT= and "
                             "DEMO_MESH_PORT= to other ports, or 0 for free ones)") from exc
        print(f"(ports {launcher.DEFAULT_PORT}/{launcher.DEFAULT_MESH_PORT} are taken: "
              "using free ones)", flush=True)
        return launcher.start(STATE, port=port or 0, mesh_port=mesh_port or 0,
                              converge_delay_ms=800)


def _serve_view(env: dict[str, str]) -> None:
    """``watch --view`` on the reference repo (no --apply): its URL printed; kept up
    until Enter when a person is at a terminal, stopped at once otherwise."""
    import socket
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    print(f"\n$ reconcile watch {REPO} --metrics-port {port} --view", flush=True)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "watch", str(REPO), "--metrics-port", str(port),
         "--view", "--log-format", "json"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and watcher.poll() is None:
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as reply:
                if b"Live side read at" in reply.read():
                    break
            time.sleep(0.3)
        print(f"The web view: {url}  (the same view as a file: {STATE / 'status.html'})",
              flush=True)
        if sys.stdin.isatty() and sys.stdout.isatty():
            with contextlib.suppress(EOFError, KeyboardInterrupt):
                input("Press Enter to stop the watcher and the sandbox ... ")
    finally:
        watcher.terminate()
        try:
            watcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()


def main() -> int:
    port, mesh_port = _port("DEMO_PORT"), _port("DEMO_MESH_PORT")
    print(f"Starting the sandbox (control plane + 3 clusters) in {STATE} ...", flush=True)
    if (STATE / "sandbox.json").exists():
        with contextlib.suppress(launcher.SandboxError):
            launcher.attach(STATE).stop()
    for stale in STATE.glob("*.sqlite*"):
        stale.unlink()  # a demo starts from the default seed every time
    sandbox = _start(port, mesh_port)
    env = {**os.environ, **sandbox.env(), "RECONCILE_STATE_DIR": str(STATE / "apply-state")}
    if (sandbox.control_plane_port, sandbox.mesh_port) == DEFAULT_PORTS:
        for key in ("RECONCILE_CONTROL_PLANE_URL", "RECONCILE_GATEWAY", "RECONCILE_RESOLVE",
                    "RECONCILE_CA_FILE"):
            env.pop(key, None)  # the reference settings already point at these defaults
    else:  # the environment points every step at the ports this demo got
        print(f"(control plane on port {sandbox.control_plane_port}, clusters on port "
              f"{sandbox.mesh_port}: the RECONCILE_* environment points the steps there)")
    try:
        steps = [
            ("every file, every rule", ["validate", str(REPO)], {0}),
            ("what would change, on what evidence", ["plan", str(REPO), "--detailed-exitcode"],
             {2}),
            ("a PR's view: what this branch introduces vs what was already pending",
             ["plan", str(_pr_repo().relative_to(ROOT)), "--base", "HEAD~1"], {0}),
            ("make it so, then prove it on every cluster",
             ["apply", str(REPO), "--auto-approve"], {0}),
            ("nothing left to do", ["plan", str(REPO), "--detailed-exitcode"], {0}),
        ]
        for title, args, ok in steps:
            code = _step(title, args, env)
            if code not in ok:
                print(f"\ndemo: `reconcile {shlex.join(args)}` exited {code}", file=sys.stderr)
                return 1
        # Issue 20: sn3 refuses the next release; the way back is reverted in git first.
        revert = str(_revert_repo(sandbox).relative_to(ROOT))
        steps = [
            ("sn3 refuses v2.5.0: revert in git, hold it, roll back, prove it (exit 15)",
             ["apply", revert, "--auto-approve", "--only", "checkout",
              "--on-gate-failure", "revert"], {15}),
            ("after the revert: nothing left to do", ["plan", revert, "--only", "checkout",
                                                      "--detailed-exitcode"], {0}),
            ("the story: failed release, revert commit, proven rollback",
             ["history", revert, "--limit", "3"], {0}),
        ]
        for title, args, ok in steps:
            code = _step(title, args, env)
            if code not in ok:
                print(f"\ndemo: `reconcile {shlex.join(args)}` exited {code}", file=sys.stderr)
                return 1
        code = _step("the web view as one file", ["status", str(REPO), "--format", "html",
                                                  "--out", str(STATE / "status.html")], env)
        if code != 0:
            print(f"\ndemo: `reconcile status --format html` exited {code}", file=sys.stderr)
            return 1
        _serve_view(env)
        print("\nDemo complete. To explore on your own:\n"
              "  .venv/bin/reconcile sandbox up --detach     # then follow what it prints\n"
              "  .venv/bin/reconcile sandbox fault sn1 stuck # the seed 000 story\n"
              "  .venv/bin/reconcile sandbox down")
        return 0
    finally:
        sandbox.stop()
        print("(sandbox stopped)")


if __name__ == "__main__":
    sys.exit(main())
