"""``reconcile plan``: observe the live world, plan, render, optionally save.

Exit codes with ``--detailed-exitcode``, all read from the plan's verdict (the one judge,
``core.evidence``): 0 only when there is no change and every expected cluster proves every
managed service converged; 2 GO with work for apply (changes to send, or a service the
judge does not prove converged, which apply would gate on); 3 NO-GO (any blocker: a silent
cluster is never 0 or 2); 1 error, 64 usage. Without the flag a plan that was made exits
0 whatever it says.

``--worktree`` plans the working tree instead of the commit: a preview, marked so first in
every view, that apply refuses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.commands import options, output, selection, stages
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the planner loads when the command runs, not to build the parser
    from reconciler.core.plans import Plan


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan", help="show what apply would change, and on what evidence",
        description="Read the desired state, read the control plane and every cluster, and "
        "show the difference.")
    options.add_path_argument(parser, help="where the desired state is: its directory or any "
                                           "directory below it (the nearest one above holding a "
                                           "Settings document is used; default: the current "
                                           "directory)")
    parser.add_argument("--base", metavar="REF",
                        help="also plan the desired state at git REF (e.g. the PR's base) "
                        "against the same live snapshot, and say which changes this branch "
                        "introduces, which were already pending, and which it removes")
    parser.add_argument("--worktree", action="store_true",
                        help="plan the working tree as it is (tracked, modified and untracked "
                        "files; never ignored ones) instead of the commit HEAD is at: a "
                        "preview of uncommitted changes, marked so in every view; it can be "
                        "shown, saved and commented, never applied")
    parser.add_argument("--out", metavar="FILE", help="save the plan (JSON) for `reconcile apply`")
    parser.add_argument("--result", metavar="FILE",
                        help="also write what this run came to, whatever happens: the plan, "
                        "or why there is none for this commit (the desired state's problems "
                        "with file:line, or what could not be read); `reconcile comment FILE` "
                        "posts it. Written even when plan fails; the exit code is unchanged")
    parser.add_argument("--format", choices=options.FORMATS, default="text",
                        help="text for a terminal, json (the plan file's form), or markdown "
                        "(a pull-request comment); default text")
    selection.add_only_flag(parser, help_text="show only these services' part of the plan "
                            "(comma-separated, repeatable: --only checkout,search); mesh-wide "
                            "blockers stay; a name no service has is a usage error (64)")
    parser.add_argument("--detailed-exitcode", action="store_true",
                        help="0 no changes and every cluster proven converged, 2 GO with work "
                        "for apply (changes, or a service not proven converged), 3 NO-GO, "
                        "1 error")
    stages.add_live_flags(parser)
    parser.set_defaults(handler=run)


def detailed_exit(plan_value: Plan) -> Exit:
    from reconciler.core.plans import Verdict

    verdict = plan_value.verdict
    if verdict is Verdict.NO_GO:
        return Exit.CHANGES_NO_GO
    return Exit.CHANGES if verdict is Verdict.GO else Exit.OK


def apply_command(out: str, saved: Plan) -> str:
    """The command that applies the plan saved to ``out``, runnable as printed from here:
    apply binds a saved plan to the checkout it runs in, so ``--repo`` names the plan's
    checkout when this directory is in another (or in none)."""
    import shlex

    from reconciler.shell import gitrepo
    from reconciler.shell.gitrepo import GitError

    command = f"reconcile apply {shlex.quote(out)}"
    if saved.repo_root is None:
        return command
    try:
        here = gitrepo.toplevel(Path("."))
    except GitError:
        here = None
    if here is not None and here.resolve() == Path(saved.repo_root).resolve():
        return command
    return f"{command} --repo {shlex.quote(saved.repo_path or saved.repo_root)}"


def run(args: argparse.Namespace) -> int:
    from reconciler.core.plans import restrict
    from reconciler.engine import failed_result, plan_result  # HTTP loads only when needed

    only = selection.only_from(args)
    if only and (args.out or args.result):
        print("reconcile plan: --only cannot be combined with --out or --result: a saved plan "
              "is the whole plan (save it whole, then: reconcile apply FILE --only NAME)",
              file=sys.stderr)
        return int(Exit.USAGE)
    root: Path | None = None
    try:
        root, stage = stages.select(args, args.path, command="plan")
        outcome = plan_result(root, args.base, overrides=options.overrides_from(args),
                              progress=output.progress_for_stderr(),
                              worktree=args.worktree, stage=stage)
    except EngineError as exc:
        outcome = failed_result(root, exc)
    if outcome.plan is None:
        if args.result:
            try:
                output.save_result(Path(args.result), outcome)
            except EngineError as exc:
                output.report_error(exc)
        code = next((e for e in Exit if e == outcome.exit_code), Exit.ERROR)
        return output.report_error(EngineError(outcome.error, code, outcome.diagnostics))
    result = outcome.plan
    try:
        if only:
            known = {p.service for p in result.proofs} | set(result.services())
            unknown = selection.unknown_names(only, known)
            if unknown:
                raise EngineError(selection.unknown_message(unknown, known), Exit.USAGE)
            result = restrict(result, only)
        if args.out:
            output.save_plan(Path(args.out), result)
        if args.result:
            output.save_result(Path(args.result), outcome)
    except EngineError as exc:
        return output.report_error(exc)
    output.show(result, args.format, sys.stdout, plan_file=args.out)
    if args.out and result.worktree:
        print(f"saved the preview to {args.out}; it can be shown and commented, never "
              "applied: commit, then plan again", file=sys.stderr)
    elif args.out:
        print(f"saved plan to {args.out}; apply it with: {apply_command(args.out, result)}",
              file=sys.stderr)
    return int(detailed_exit(result)) if args.detailed_exitcode else int(Exit.OK)
