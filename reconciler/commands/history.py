"""``reconcile history``: what past applies did, read back from the apply journal.

Newest first, bounded (``--limit``): when each apply began, from which commit, the plan's
digest (what it said: commit, verdict, changes, blockers) and its change count, the
control plane it ran against, each change's outcome, the convergence gate's word, the
duration, and the reverts between them (the words and layout are
``render.historyview``'s). A
journal that cannot be trusted is named with its path and line (exit 1), never skipped
or shortened. Reading only: the journal is never written here.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from reconciler.commands import options, stages
from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "history", help="past applies from the journal: commit, outcomes, gate, duration",
        description="Read the apply journal back: each past apply, newest first, with its "
        "commit, the plan's digest and change count, the control plane it ran against, each "
        "change's outcome, the convergence gate's result and the duration. A damaged "
        "journal is named (path and line), never skipped.")
    options.add_path_argument(parser, help="the config repo whose journal to read (default: .); "
                                           "its state directory is found as apply finds it")
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
    from reconciler.render import historyview  # the views load when the command runs
    from reconciler.shell.journal import JournalError, TornTail, history, proposals, reverts

    if args.limit < 1:
        print("error: --limit must be at least 1", file=sys.stderr)
        return int(Exit.USAGE)
    def torn(tail: TornTail) -> None:  # a crash's or a full disk's: skipped, said
        print(f"warning: {safe(tail.describe(), 1000)}; the next apply removes it from the "
              "file", file=sys.stderr)

    try:
        path = journal_path(args)
        runs = history(path, on_torn=torn)
        reverted = reverts(path, on_torn=lambda _tail: None)  # said once, above
        proposed = proposals(path, on_torn=lambda _tail: None)  # watch --promote-from
    except (EngineError, JournalError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(Exit.ERROR)
    shown = runs[:args.limit]
    if args.format == "json":
        print(historyview.document(str(path), [r.to_json() for r in shown], len(runs),
                                   reverted, proposed))
        return int(Exit.OK)
    for line in historyview.text(str(path), [r.to_json() for r in shown], len(runs),
                                 reverted, proposed):
        print(line)
    return int(Exit.OK)


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
