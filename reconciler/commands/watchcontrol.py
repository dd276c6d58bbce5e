"""``reconcile watch-ctl suspend|resume|reconcile``: control a running watcher, and the
watcher's side of it (``control_for``: the token file and where the suspension is kept).

``watch-ctl`` POSTs to the watcher's HTTP port (``--url``, env ``RECONCILE_WATCH_URL``)
with the bearer token in ``--token-file`` (env ``RECONCILE_CONTROL_TOKEN_FILE``, the
same file the watcher reads) and says what the watcher answered. Must not decide
anything itself: the watcher's ``shell.control`` does. The token crosses the network in
clear text only to a loopback address; anywhere else it needs ``https://``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:
    from reconciler.engine import WatchSteps
    from reconciler.shell.control import Control

ACTIONS = ("suspend", "resume", "reconcile")


def control_for(args: argparse.Namespace, steps: WatchSteps, root: Path,
                env: Mapping[str, str]) -> Control | None:
    """The watcher's control: its token (None: control is off) and its state file in the
    state directory. A suspension recorded there is honoured even with control off (it
    is said at start, with how to lift it). ``EngineError`` for a usage mistake (64) or
    a token file that cannot be read (1)."""
    from reconciler import engine
    from reconciler.shell import control as control_mod

    token_file = args.control_token_file
    if token_file and args.metrics_port is None:
        raise EngineError("--control-token-file needs --metrics-port: the control requests "
                          "are served on that port", code=Exit.USAGE)
    # In an environment of a pipeline, its own directory (``engine.state_dir``): a staging
    # and a prod watcher never share a suspension.
    environment = getattr(getattr(steps, "stage", None), "name", None)
    if env.get("RECONCILE_STATE_DIR"):
        base = Path(env["RECONCILE_STATE_DIR"]).expanduser()
        state: Path | None = base / environment if isinstance(environment, str) else base
    else:
        loaded = steps.load()  # its blobs are cached: the watcher's first read is cheap
        state = engine.state_dir(loaded.state, root, env, environment
                                 if isinstance(environment, str) else None) \
            if loaded.state is not None else None
    if state is None and token_file:
        raise EngineError("the state directory (where a suspension is kept across restarts) "
                          "is unknown: the desired state is invalid; fix it, or set "
                          "RECONCILE_STATE_DIR", code=Exit.USAGE)
    state_file = state / control_mod.STATE_FILE if state is not None else None
    token = None
    if token_file:
        try:
            token = control_mod.read_token(Path(token_file).expanduser())
        except control_mod.ControlError as exc:
            raise EngineError(str(exc)) from exc
    if token is None and (state_file is None or not state_file.exists()):
        return None
    return control_mod.Control(token=token, state_file=state_file,
                               allow_remote=args.control_remote)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "watch-ctl", help="suspend, resume or reconcile-now a running `reconcile watch`",
        description="Ask a running `reconcile watch` (started with --control-token-file and "
        "--metrics-port) to suspend (observe, plan and apply nothing, across restarts, "
        "until resumed), resume, or reconcile now (one cycle: read the commit and the live "
        "side, plan, and with --apply apply).")
    parser.add_argument("action", choices=ACTIONS, metavar="ACTION",
                        help="suspend | resume | reconcile")
    parser.add_argument("--url", default=os.environ.get("RECONCILE_WATCH_URL") or None,
                        metavar="URL", help="the watcher's HTTP port, e.g. "
                        "http://127.0.0.1:9108 (env RECONCILE_WATCH_URL)")
    parser.add_argument("--token-file", metavar="FILE",
                        default=os.environ.get("RECONCILE_CONTROL_TOKEN_FILE") or None,
                        help="the file holding the watcher's control token (env "
                        "RECONCILE_CONTROL_TOKEN_FILE)")
    parser.add_argument("--reason", default="", metavar="TEXT",
                        help="with suspend: why, shown in /readyz and the watcher's log")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait for the watcher's answer (default 10)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import httpx

    from reconciler.shell.control import ControlError, is_loopback, read_token

    if not args.url:
        print("error: watch-ctl needs the watcher's URL: --url http://127.0.0.1:PORT (the "
              "watcher's --metrics-port) or RECONCILE_WATCH_URL", file=sys.stderr)
        return int(Exit.USAGE)
    if not args.token_file:
        print("error: watch-ctl needs the control token: --token-file FILE (the watcher's "
              "--control-token-file) or RECONCILE_CONTROL_TOKEN_FILE", file=sys.stderr)
        return int(Exit.USAGE)
    parts = urlsplit(args.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        print(f"error: --url {safe(args.url, 200)}: expected http://HOST:PORT or "
              "https://HOST:PORT", file=sys.stderr)
        return int(Exit.USAGE)
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        print(f"error: --url {safe(args.url, 200)}: the control token would cross the "
              "network in clear text; use https:// (TLS in front of the watcher's port) or "
              "a loopback address", file=sys.stderr)
        return int(Exit.USAGE)
    try:
        token = read_token(Path(args.token_file).expanduser())
    except ControlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(Exit.ERROR)
    target = args.url.rstrip("/") + "/" + args.action
    body = {"reason": args.reason} if args.reason else {}
    try:
        reply = httpx.post(target, json=body, timeout=args.timeout,
                           headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        print(f"error: {safe(target, 200)}: {type(exc).__name__}: {safe(exc, 300)} (is "
              "`reconcile watch` running with --metrics-port and --control-token-file?)",
              file=sys.stderr)
        return int(Exit.ERROR)
    try:
        answer: dict[str, Any] = reply.json()
    except ValueError:
        answer = {"error": reply.text[:300]}
    if reply.status_code >= 300:
        print(f"error: the watcher answered {reply.status_code}: "
              f"{safe(str(answer.get('error') or answer), 500)}", file=sys.stderr)
        return int(Exit.ERROR)
    print(_said(args.action, answer))
    return int(Exit.OK)


def _said(action: str, answer: dict[str, Any]) -> str:
    changed = answer.get("changed", True)
    if action == "reconcile":
        return "reconcile: a cycle starts now"
    if action == "suspend":
        word = "suspended" if changed else "already suspended"
        reason = answer.get("reason")
        return f"{word}" + (f" ({safe(str(reason), 300)})" if reason else "") + \
            ": nothing is observed, planned or applied until `reconcile watch-ctl resume`"
    return "resumed: a cycle starts now" if changed else "not suspended (nothing to resume)"
