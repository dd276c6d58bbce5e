"""``reconcile history``: what past applies did, read back from the apply journal.

Newest first, bounded (``--limit``): when each apply began, from which commit, the plan's
fingerprint, each change's outcome, the convergence gate's word and the duration. A
journal that cannot be trusted is named with its path and line (exit 1), never skipped
or shortened. Reading only: the journal is never written here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reconciler.commands import stages
from reconciler.core.sanitize import safe, safe_json_text
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

#: Changes listed per run in the text view (JSON lists them all).
TEXT_CHANGES = 20
FORMAT_VERSION = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "history", help="past applies from the journal: commit, outcomes, gate, duration",
        description="Read the apply journal back: each past apply, newest first, with its "
        "commit, plan fingerprint, each change's outcome, the convergence gate's result and "
        "the duration. A damaged journal is named (path and line), never skipped.")
    parser.add_argument("path", nargs="?", default=".", metavar="PATH",
                        help="the config repo whose journal to read (default: .); its state "
                        "directory is found as apply finds it")
    parser.add_argument("--journal", metavar="FILE",
                        help="read this journal file instead of the repo's")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="terminal text, or one JSON document")
    parser.add_argument("--limit", type=int, default=20, metavar="N",
                        help="show at most the N newest applies (default 20)")
    stages.add_env_flag(parser)
    parser.set_defaults(handler=run)


def journal_path(args: argparse.Namespace) -> Path:
    """``--journal`` > ``RECONCILE_STATE_DIR`` > the state directory apply would use."""
    if args.journal:
        return Path(args.journal)
    from reconciler import engine
    from reconciler.shell import environments

    if os.environ.get("RECONCILE_STATE_DIR"):
        base_dir = Path(os.environ["RECONCILE_STATE_DIR"]).expanduser()
        if getattr(args, "env_name", None) is None and \
                environments.find_pipeline_root(Path(args.path)) is None:
            return base_dir / "journal.jsonl"  # one root: nothing else to find
        _, found = stages.select(args, args.path, command="history")
        return (base_dir / found.name if found else base_dir) / "journal.jsonl"
    root, stage = stages.select(args, args.path, command="history")  # like plan and apply
    result, _ = engine.read_commit(root)
    if result.state is None:
        raise EngineError(f"{root}: the desired state is invalid ({len(result.diagnostics)} "
                          "problem(s)), so its state directory is unknown; pass --journal "
                          "FILE or set RECONCILE_STATE_DIR")
    return engine.state_dir(result.state, root, os.environ,
                            stage.name if stage else None) / "journal.jsonl"


def run(args: argparse.Namespace) -> int:
    from reconciler.shell.journal import JournalError, TornTail, history

    if args.limit < 1:
        print("error: --limit must be at least 1", file=sys.stderr)
        return int(Exit.USAGE)
    def torn(tail: TornTail) -> None:  # a crash's or a full disk's: skipped, said
        print(f"warning: {safe(tail.describe(), 1000)}; the next apply removes it from the "
              "file", file=sys.stderr)

    try:
        path = journal_path(args)
        runs = history(path, on_torn=torn)
    except (EngineError, JournalError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(Exit.ERROR)
    shown = runs[:args.limit]
    if args.format == "json":
        print(safe_json_text(json.dumps({
            "format_version": FORMAT_VERSION, "journal": str(path), "total": len(runs),
            "shown": len(shown), "runs": [r.to_json() for r in shown]},
            indent=2, sort_keys=True)))
        return int(Exit.OK)
    if not runs:
        print(f"no applies recorded in {path}")
        return int(Exit.OK)
    print(f"{path}: {len(shown)} of {len(runs)} apply run(s), newest first")
    for item in shown:
        print()
        for line in render_run(item.to_json()):
            print(line)
    if len(runs) > len(shown):
        print(f"\n… {len(runs) - len(shown)} older run(s); raise --limit to see them")
    return int(Exit.OK)


def rfc3339(ms: int | None) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


STATUS_WORDS = {
    "converged": "converged",
    "not_converged": "NOT converged",
    "failed": "FAILED (a change did not go through)",
    "in_doubt": "IN DOUBT (a change was sent and not answered; a rerun replays its key)",
    "unproven": "sent, convergence not proven",
    "refused": "refused (NO-GO), nothing sent",
    "nothing_to_do": "nothing to do",
    "interrupted": "interrupted before it finished",
    "not_finished": "ended without sending (refused, declined) or still running",
    "legacy": "journal lines written before run records",
}


def render_run(run_json: dict[str, Any]) -> list[str]:
    """The text of one run: a heading, its blockers or changes (bounded), the gate."""
    head = [rfc3339(run_json["started_ms"]), STATUS_WORDS.get(run_json["status"],
                                                             run_json["status"])]
    if run_json.get("commit"):
        head.append(f"commit {safe(run_json['commit'], 40)[:12]}")
    if run_json.get("plan_fingerprint"):
        head.append(f"plan {safe(run_json['plan_fingerprint'], 80)[:19]}")
    if run_json.get("saved_plan"):
        reviewed = run_json.get("reviewed_commit")
        head.append(f"(saved plan, reviewed at {safe(reviewed, 40)[:12]})"
                    if reviewed and reviewed != run_json.get("commit") else "(saved plan)")
    if run_json.get("duration_seconds") is not None:
        head.append(f"{run_json['duration_seconds']:.1f}s")
    lines = ["  ".join(head)]
    lines.extend(f"  ! {safe(str(o), 400)}" for o in run_json.get("overrides") or [])
    blockers = run_json.get("blockers") or []
    for blocker in blockers[:10]:
        lines.append(f"  ✗ {safe(str(blocker.get('code')), 60)}: "
                     f"{safe(str(blocker.get('message')), 200)}")
    if len(blockers) > 10:
        lines.append(f"  … {len(blockers) - 10} more blocker(s)")
    changes = run_json.get("changes") or []
    for change in changes[:TEXT_CHANGES]:
        detail = safe(str(change.get("detail") or ""), 120)
        lines.append(f"  {change.get('outcome')!s:<16} {safe(str(change.get('action')), 20)} "
                     f"{safe(str(change.get('service')), 80)}" + (f" — {detail}" if detail
                                                                 else ""))
    if len(changes) > TEXT_CHANGES:
        lines.append(f"  … {len(changes) - TEXT_CHANGES} more change(s) (--format json "
                     "lists them all)")
    gate = run_json.get("gate")
    if gate:
        word = "converged" if gate.get("converged") else "NOT converged"
        lines.append(f"  gate: {word} after {gate.get('attempts')} poll(s), "
                     f"{float(gate.get('waited_seconds') or 0):.1f}s")
        for pending in (gate.get("pending") or [])[:5]:
            for reason in (pending.get("reasons") or [])[:3]:
                lines.append(f"    {safe(str(pending.get('service')), 80)}: "
                             f"{safe(str(reason), 200)}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``history`` alone (as the CLI would, once it is registered there)."""
    parser = argparse.ArgumentParser(prog="reconcile", allow_abbrev=False)
    subparsers = parser.add_subparsers(dest="command")
    register(subparsers)
    for sub in subparsers.choices.values():
        sub.allow_abbrev = False  # as cli.Parser: `--jour` is no `--journal`
    args = parser.parse_args(["history", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
