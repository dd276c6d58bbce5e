"""``reconcile apply``: make the live world match, then prove it on every cluster.

From a PATH it plans, shows the plan and asks (on a terminal; otherwise it needs
``--auto-approve``); from a saved PLANFILE it applies exactly that plan. Refusals come
before any write, each with its own exit code (``reconciler.exitcodes``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.commands import options, output
from reconciler.core.outcomes import ApplyReport, Outcome
from reconciler.core.plans import Plan
from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.render import text

if TYPE_CHECKING:
    from reconciler.engine import ApplyRun


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "apply", help="apply a plan and wait until every cluster proves it",
        description="Apply the desired state (PATH) or a saved plan (PLANFILE).")
    parser.add_argument("target", nargs="?", default=".", metavar="PATH|PLANFILE")
    parser.add_argument("--auto-approve", action="store_true",
                        help="do not ask for confirmation (needed when not on a terminal)")
    parser.add_argument("--only", action="append", nargs="+", metavar="SERVICE", default=[],
                        help="apply only the changes of these services")
    parser.add_argument("--repo", metavar="PATH",
                        help="the config repo of a saved plan (default: where it was made)")
    options.add_connection_flags(parser)
    parser.set_defaults(handler=run)


class _Printer:
    def line(self, text_: str) -> None:
        print(text_, flush=True)


def _confirm_on_terminal(plan: Plan) -> bool:
    output.write(text.render(plan, color=output.use_color(sys.stdout)))
    if not sys.stdin.isatty():
        raise EngineError("not on a terminal: pass --auto-approve, or apply a saved plan "
                          "(reconcile plan --out FILE; reconcile apply FILE)", Exit.DECLINED)
    answer = input("Apply these changes? Only 'yes' is accepted: ")
    return answer.strip() == "yes"


def _show_plan(plan: Plan) -> bool:
    output.write(text.render(plan, color=output.use_color(sys.stdout)))
    return True


def run(args: argparse.Namespace) -> int:
    from reconciler.engine import apply_async  # the HTTP stack loads only when needed

    target = Path(args.target)
    only = frozenset(name for group in args.only for name in group)
    saved = None
    try:
        if target.is_file():
            saved = output.load_plan(target)
            root = Path(args.repo or saved.repo_path or ".")
        else:
            root = target
        confirm = _show_plan if args.auto_approve or saved is not None else _confirm_on_terminal
        result = asyncio.run(apply_async(
            root, overrides=options.overrides_from(args), env=os.environ, hook=_Printer(),
            saved=saved, only=only, confirm=confirm, progress=output.progress_for_stderr()))
    except EngineError as exc:
        return output.report_error(exc)
    return _report(result)


def _report(run_: ApplyRun) -> int:
    report: ApplyReport = run_.report
    if not report.results and report.gate is None:
        return int(Exit.OK)
    counts = ", ".join(f"{report.count(o)} {o.value.replace('_', ' ')}" for o in Outcome
                       if report.count(o))
    print(f"Changes: {counts or 'none'}")
    code = Exit.OK
    if any(r.outcome is Outcome.REFUSED and r.code and r.code.endswith("_MISMATCH")
           for r in report.results):
        code = Exit.CONFLICT
    elif not report.writes_ok:
        code = Exit.APPLY_FAILED
    gate = report.gate
    if gate is not None and not gate.converged:
        code = Exit.NOT_CONVERGED if code is Exit.OK else code
        print(f"error: convergence gate failed after {gate.attempts} poll(s) "
              f"({gate.waited_seconds:.1f}s):", file=sys.stderr)
        for f in gate.diverged:
            last = f"; lastError: {safe(f.last_error)}" if f.last_error else ""
            print(f"  ✗ {f.service} on {f.cluster}: DIVERGED: runs {f.running or '<none>'}, "
                  f"should run {f.wanted or '<unchanged>'} ({f.reason}){last}", file=sys.stderr)
        for f in gate.unverified:
            print(f"  ? {f.service} on {f.cluster}: UNVERIFIED: {f.reason}; should run "
                  f"{f.wanted or '<unchanged>'} — a cluster that gives no answer is one this "
                  f"apply cannot vouch for", file=sys.stderr)
    elif gate is not None:
        clusters = sorted({f.cluster for f in gate.findings})
        print(f"Converged: every expected cluster ({', '.join(clusters)}) proves the pinned "
              f"digests and egress after {gate.attempts} poll(s), {gate.waited_seconds:.1f}s.")
    if code is not Exit.OK and code is not Exit.NOT_CONVERGED:
        for r in report.results:
            if r.outcome not in (Outcome.APPLIED, Outcome.ALREADY_APPLIED):
                print(f"  {r.outcome.value}: {r.change.action.value} {r.change.service}: "
                      f"{r.detail}", file=sys.stderr)
    if code is Exit.OK:
        print("Apply complete.")
    return int(code)


