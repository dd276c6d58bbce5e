"""``reconcile config [PATH] [--format text|json]``: the effective connection, and why.

Prints every value ``plan``/``apply``/``watch`` would use to reach the live world --
control-plane URL and CA, gateway, mesh port, static addresses or DNS, mesh CA, the
signer's wallet and appId, timeouts -- and where apply keeps its journal, each with
where it came from: the settings file
and line (``settings.yaml:12 mesh.port``), the environment variable, the flag, or the
built-in default. It reads the same commit ``plan`` reads and folds the same layers
(``shell.endpoints.Connection.explain``, the one implementation of the precedence rule).

Secrets are never printed: for the machine token and the signer key only the *names* of
their variables are shown, with whether each is set (and, for the key, whether it names
an existing file). The control-plane URL is shown with any userinfo masked.

It loads what it vouches for, as plan/apply/watch will: the token must be set, the signer
key file must parse as a key, each CA bundle must load; each failure is a problem that
names the variable or file. No network. Exit 0 when a connection can be built and all of
that loads, 1 when not (every problem is listed), or when the desired state has no
readable Settings document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.commands import options, output, stages
from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the settings models load when the command runs (start time)
    from reconciler.core.crosscheck import Located
    from reconciler.shell.endpoints import Effective, Explanation

#: (key in ``Explanation.values``, label) in the order they are shown, by section.
SECTIONS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("control plane", (
        ("control_plane_url", "url"),
        ("control_plane_ca", "CA"),
        ("allow_insecure_http", "plain http"),
        ("token_env", "token"),
        ("call_timeout", "timeout (s)"),
    )),
    ("mesh", (
        ("gateway", "gateway (SNI, Host)"),
        ("mesh_port", "port"),
        ("static_addresses", "addresses"),
        ("mesh_ca", "CA"),
        ("settings_clusters", "clusters"),
        ("concurrency", "concurrency"),
        ("probe_timeout", "timeout (s)"),
    )),
    ("signer (cluster auth)", (
        ("signer_key_env", "key"),
        ("wallet_address", "walletAddress"),
        ("auth_app_id", "appId"),
    )),
    ("state (apply, watch)", (
        ("state_dir", "directory"),
        ("journal", "journal"),
    )),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "config", help="show the effective connection settings and where each came from",
        description="Print the control-plane and mesh values plan/apply/watch would use, "
        "each with its source (settings file:line, environment variable, flag, default). "
        "The token and the signer key are never printed: only their variables' names and "
        "whether they are set. No network.")
    parser.add_argument("path", nargs="?", default=".",
                        help="the desired-state directory, or any directory below it "
                        "(default: the current directory)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text for people (default), json for scripts")
    stages.add_env_flag(parser)
    options.add_connection_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from reconciler.core.desired import Settings
    from reconciler.engine import read_commit
    from reconciler.shell.endpoints import Connection, Explanation

    try:
        root, stage = stages.select(args, args.path, command="config")
        result, _ = read_commit(root)
    except EngineError as exc:
        return output.report_error(exc)
    located = next((d for d in result.documents if isinstance(d.document, Settings)), None)
    if located is None:
        problems = [d.render() for d in result.diagnostics][:20]
        print(f"reconcile config: {root}: no valid Settings document"
              + "".join(f"\n  {p}" for p in problems), file=sys.stderr)
        return int(Exit.ERROR)
    assert isinstance(located.document, Settings)
    explained = Connection.explain(located.document, repo_root=root,
                                   overrides=options.overrides_from(args))
    if explained.connection is not None:
        # Vouch only for what loads: the token read, the signer key parsed, each CA
        # loaded, exactly as plan/apply/watch will (no network).
        from reconciler.shell.observing import credential_problems

        found = credential_problems(explained.connection, os.environ)
        if found:
            explained = Explanation(explained.values, tuple(found), None)
    report = build_report(root, located, explained, os.environ)
    report.update(observability(located, args, os.environ))
    report["values"].update(state_entries(root, located, os.environ,
                                          stage.name if stage is not None else None))
    if args.format == "json":
        output.write(json.dumps(report, indent=2, ensure_ascii=True) + "\n")
    else:
        output.write(render_text(report))
    return int(Exit.OK if explained.connection is not None else Exit.ERROR)


def build_report(root: Path, located: Located, explained: Explanation,
                 env: Mapping[str, str]) -> dict[str, Any]:
    """The JSON document (``--format json``); the text form renders the same data."""
    values: dict[str, Any] = {}
    for _, rows in SECTIONS:
        for key, _label in rows:
            effective = explained.values.get(key)
            if effective is not None:
                values[key] = _entry(effective, located)
    token = values.get("token_env")
    if token is not None:
        token["set"] = bool(env.get(str(token["value"]), "").strip())
    signer = values.get("signer_key_env")
    if signer is not None:
        named = env.get(str(signer["value"]), "").strip()
        signer["set"] = bool(named)
        signer["file_exists"] = Path(named).expanduser().is_file() if named else None
    return {
        "path": str(root),
        "settings_file": located.path,
        "values": values,
        "problems": list(explained.problems),
        "usable": explained.connection is not None,
    }


def state_entries(root: Path, located: Located, env: Mapping[str, str],
                  environment: str | None = None) -> dict[str, Any]:
    """Where apply keeps its journal (and watch its suspension), and what chose it: the
    same rule apply uses (``engine.state_dir_of``) -- in an environment of a pipeline,
    ``RECONCILE_STATE_DIR`` holds one directory per environment."""
    from reconciler.core.desired import Settings
    from reconciler.engine import state_dir_of
    from reconciler.shell.journal import JOURNAL_FILE

    assert isinstance(located.document, Settings)
    directory = state_dir_of(located.document, root, env, environment)
    if env.get("RECONCILE_STATE_DIR"):
        source: dict[str, Any] = {"kind": "env", "name": "RECONCILE_STATE_DIR" + (
            f" (its {environment}/ directory: one per environment)" if environment else "")}
    elif located.document.state_dir:
        position = located.positions.get(("stateDir",))
        source = {"kind": "settings", "name": "stateDir", "file": located.path,
                  "line": position[0] if position is not None else None}
    else:
        source = {"kind": "default", "name": "the user's state directory, per repo" + (
            f" and environment ({environment})" if environment else "")}
    return {"state_dir": {"value": str(directory), "source": source},
            "journal": {"value": str(directory / JOURNAL_FILE), "source": source}}


def _entry(effective: Effective, located: Located) -> dict[str, Any]:
    source = effective.source
    where: dict[str, Any] = {"kind": source.kind, "name": source.name}
    if source.unset:
        where["unset"] = True
    if source.kind == "settings":
        loc = tuple(source.name.split("."))
        position = located.positions.get(loc)
        where["file"] = located.path
        where["line"] = position[0] if position is not None else None
    value = effective.value
    if isinstance(value, tuple):
        value = list(value)
    entry: dict[str, Any] = {"value": value, "source": where}
    if effective.note:
        entry["note"] = effective.note
    return entry


def _source_text(source: Mapping[str, Any]) -> str:
    kind, name = source["kind"], source["name"]
    if kind == "settings":
        line = source.get("line")
        text = (f"{source['file']}:{line} {name}" if line is not None
                else f"{source['file']}: {name} not written (its default)")
    elif kind == "env":
        text = f"env {name}"
    elif kind == "flag":
        text = f"flag {name}"
    else:
        text = f"default{f' ({name})' if name else ''}"
    return text + (" (unset: the default applies)" if source.get("unset") else "")


def _value_text(key: str, entry: Mapping[str, Any]) -> str:
    value = entry["value"]
    if key == "token_env":
        return f"${value} {'is set' if entry.get('set') else 'is NOT set'} (value never shown)"
    if key == "signer_key_env":
        if not entry.get("set"):
            return f"${value} is NOT set (it must name the private key file)"
        exists = "names an existing file" if entry.get("file_exists") else (
            "names no existing file")
        return f"${value} is set, {exists} (value never shown)"
    if key == "allow_insecure_http":
        text = "allowed beyond loopback" if value else "loopback only"
        note = entry.get("note")
        return safe(text + (f" ({note})" if note else ""), 200)
    if value is None:
        text = entry.get("note") or "-"
    elif isinstance(value, list):
        text = ", ".join(str(v) for v in value) or "(none)"
    else:
        text = str(value)
    note = entry.get("note")
    if note and value is not None:
        text += f" ({note})"
    return safe(text, 200)


def render_text(report: Mapping[str, Any]) -> str:
    lines = [f"effective connection for {report['path']} "
             f"(settings: {report['settings_file']}; flag > environment > settings)"]
    values: Mapping[str, Any] = report["values"]
    width = max(len(label) for _, rows in SECTIONS for _, label in rows)
    for title, rows in SECTIONS:
        lines.append(f"{title}:")
        for key, label in rows:
            entry = values.get(key)
            if entry is None:
                continue
            shown = _value_text(key, entry)
            lines.append(f"  {label:<{width}}  {shown:<40}  <- {_source_text(entry['source'])}")
    lines.extend(observability_text(report))
    problems = report["problems"]
    if problems:
        lines.append("problems (plan, apply and watch would stop here):")
        lines.extend(f"  - {safe(p, 400)}" for p in problems)
    else:
        lines.append("no problems: plan, apply and watch would use these values")
    return "\n".join(lines) + "\n"


def observability(located: Located, args: argparse.Namespace,
                  env: Mapping[str, str]) -> dict[str, Any]:
    """The notifications (each sink, where its secret comes from and whether it can be
    read, never the value) and where traces go, each with its source. A sink whose secret
    is missing is a note, not a problem: plan, apply and watch run without it."""
    from reconciler.core.desired import Settings
    from reconciler.shell import notifying, tracing

    settings = located.document
    assert isinstance(settings, Settings)

    def where(*path: str | int) -> dict[str, Any]:
        position = located.positions.get(path)
        return {"kind": "settings", "name": ".".join(str(p) for p in path),
                "file": located.path, "line": position[0] if position else None}

    notes = None
    if settings.notifications is not None:
        sinks = notifying.describe(settings.notifications, env)
        for sink in sinks:
            sink["source"] = where(*sink.pop("path"))
        notes = {"environment": settings.notifications.environment, "sinks": sinks}
    flag = getattr(args, "otlp_endpoint", None)
    if flag is not None:
        source: dict[str, Any] = {"kind": "flag", "name": "--otlp-endpoint"}
        endpoint: str | None = flag.strip() or None
    elif env.get(tracing.ENV_OTLP_ENDPOINT) is not None:
        source = {"kind": "env", "name": tracing.ENV_OTLP_ENDPOINT}
        endpoint = env[tracing.ENV_OTLP_ENDPOINT].strip() or None
    elif settings.tracing is not None and settings.tracing.otlp_endpoint:
        source, endpoint = where("tracing", "otlpEndpoint"), settings.tracing.otlp_endpoint
    else:
        source, endpoint = {"kind": "default", "name": "off"}, None
    return {"notifications": notes,
            "tracing": {"otlp_endpoint": {"value": endpoint, "source": source}}}


def observability_text(report: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    notes = report.get("notifications")
    if notes is not None:
        lines.append("notifications (environment "
                     f"{safe(notes['environment'] or 'the mesh gateway', 100)}):")
        for sink in notes["sinks"]:
            parts = [sink["sink"]] + ([safe(sink["to"], 200)] if sink["to"] else [])
            for label in ("url", "token"):
                secret = sink.get(label)
                if secret is not None:
                    state = "set" if secret["set"] else "NOT readable: the sink is left out"
                    parts.append(f"{label} from {safe(secret['from'], 200)} ({state}; "
                                 "value never shown)")
            parts.append("on every kind" if len(sink["on"]) == notifying_kinds()
                         else "on " + ", ".join(sink["on"]))
            lines.append(f"  {sink['name']:<12}  {'; '.join(parts)}  <- "
                         f"{_source_text(sink['source'])}")
    tracing = report.get("tracing")
    if tracing is not None:
        entry = tracing["otlp_endpoint"]
        lines.append("tracing:")
        shown = safe(entry["value"], 200) if entry["value"] else "off"
        lines.append(f"  {'otlp endpoint':<12}  {shown}  <- {_source_text(entry['source'])}")
    return lines


def notifying_kinds() -> int:
    from reconciler.core.notifying import Kind

    return len(Kind)

