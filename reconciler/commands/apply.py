"""``reconcile apply``: make the live world match, then prove it on every cluster.

From a PATH it plans, shows the plan and asks (on a terminal; otherwise it needs
``--auto-approve``); from a saved PLANFILE it applies exactly that plan. Refusals come
before any write, each with its own exit code (``reconciler.exitcodes``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.commands import durations, options, output, selection, stages
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the planner and its views load when the command runs (start time)
    from reconciler.core.events import Event
    from reconciler.core.outcomes import ApplyReport
    from reconciler.core.plans import Plan
    from reconciler.engine import ApplyRun
    from reconciler.shell.environments import Selected


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "apply", help="apply a plan and wait until every cluster proves it",
        description="Apply the desired state (PATH) or a saved plan (PLANFILE).")
    parser.add_argument("target", nargs="?", default=".", metavar="PATH|PLANFILE",
                        help="a plan saved with `reconcile plan --out` (applied exactly), or "
                        "where the desired state is: its directory or any directory below it "
                        "(default: the current directory)")
    parser.add_argument("--auto-approve", action="store_true",
                        help="do not ask for confirmation (needed when not on a terminal)")
    selection.add_only_flag(parser, help_text="apply only these services' changes "
                            "(comma-separated, repeatable: --only checkout,search); a name no "
                            "service has is a usage error (64)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="progress and result as terminal text, or one JSON object per "
                        "event per line")
    parser.add_argument("--timeout", type=durations.seconds, metavar="DURATION",
                        help="bound the whole run, gate included (90, 90s, 5m, 1m30s, 1h): "
                        "once it expires no further change is sent (one in flight ends by "
                        "the control plane's own call timeout), the convergence gate stops, "
                        "and apply exits 15 naming what is still unproven (service, "
                        "cluster, digest); expired before anything was sent: nothing is "
                        "sent, exit 15. Default: no bound beyond the gate's own polls")
    add_gate_failure_flags(parser)
    parser.add_argument("--repo", metavar="PATH",
                        help="a saved plan is applied to the checkout of this directory "
                        "(default: the current directory's), at the desired-state path the "
                        "plan names inside its repository; never to the path recorded when "
                        "it was planned")
    stages.add_live_flags(parser)
    parser.set_defaults(handler=run)


def add_gate_failure_flags(parser: argparse.ArgumentParser) -> None:
    """``--on-gate-failure stop|revert`` and the pull-request flags a revert may need."""
    from reconciler.commands import revert

    parser.add_argument("--on-gate-failure", choices=("stop", "revert"), default="stop",
                        help="when the gate ends with a release the clusters say failed "
                        "(rollout failed or mismatched, replicas failed; never a silent "
                        "cluster): stop (default), or revert it -- commit the last proven "
                        "digest and a hold on the failed one (a pull request with --pr, or "
                        "when the branch changed the service since), then roll back and "
                        "gate again; the run still exits 15")
    revert.add_pr_flags(parser)


class _View:
    """Prints apply's events as ``render.applyview`` words them: text lines, or one JSON
    object per line (``--format json``)."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def __call__(self, event: Event) -> None:
        from reconciler.render import applyview

        out, err = applyview.lines(event, self.fmt)
        for line in err:
            print(line, file=sys.stderr, flush=True)
        for line in out:
            print(line, flush=True)


def _confirm_on_terminal(plan: Plan) -> bool:
    output.show(plan, "text", sys.stdout)
    if not sys.stdin.isatty():
        raise EngineError("not on a terminal: pass --auto-approve, or apply a saved plan "
                          "(reconcile plan --out FILE; reconcile apply FILE)", Exit.DECLINED)
    answer = input("Apply these changes? Only 'yes' is accepted: ")
    return answer.strip() == "yes"


def _accept(plan: Plan) -> bool:
    return True


def _show_plan(plan: Plan) -> bool:
    output.show(plan, "text", sys.stdout)
    return True


def process_started() -> float:
    """When this process started, on ``time.monotonic()``'s clock: ``--timeout`` counts
    from there, so the interpreter's and the HTTP stack's loading are inside the bound
    (seconds on a busy machine). Linux: ``/proc``; elsewhere, now."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic()
    return time.monotonic() - min(max(0.0, age), 60.0)  # never trust a wild answer


def run(args: argparse.Namespace) -> int:
    started = process_started()
    import asyncio  # with the HTTP stack, not to build the parser

    from reconciler.commands import revert
    from reconciler.engine import apply_async  # the HTTP stack loads only when needed

    target = Path(args.target)
    only = selection.only_from(args)
    saved = None
    try:
        stage = None
        if target.is_file():
            saved = output.load_plan(target)
            root, stage = saved_root(args, saved)
        else:
            root, stage = stages.select(args, args.target, command="apply")
        confirm = _confirm_on_terminal
        if args.auto_approve or saved is not None:
            confirm = _show_plan if args.format == "text" else _accept
        result = asyncio.run(apply_async(
            root, overrides=options.overrides_from(args), env=os.environ, hook=_View(args.format),
            saved=saved, only=only, confirm=confirm, progress=output.progress_for_stderr(),
            timeout=args.timeout, started=started, stage=stage,
            on_gate_failure=args.on_gate_failure,
            pull=revert.pull_target(args) if args.on_gate_failure == "revert" else None))
    except EngineError as exc:
        return output.report_error(exc)
    return _report(result, args.format)


def saved_root(args: argparse.Namespace, saved: Plan) -> tuple[Path, Selected | None]:
    """Where a saved plan is applied: the checkout of the current directory (or
    ``--repo``), at the desired-state path the plan names inside its repository
    (``core.binding.desired_path``). The path recorded when planning is information only:
    the merged checkout on a runner, or a downloaded artifact whose planning checkout is
    gone, is bound to what *it* holds -- and apply then refuses a plan whose tree is not
    that checkout's, naming the files (``core.binding.source``)."""
    from reconciler.core import binding
    from reconciler.shell import discovery, gitrepo
    from reconciler.shell.gitrepo import GitError

    start = Path(args.repo or ".")
    problem = discovery.unusable(start, want="directory")
    if problem is not None:
        raise EngineError(problem, Exit.ERROR)
    inside = binding.desired_path(saved)
    if inside is not None and (Path(inside).is_absolute() or ".." in Path(inside).parts):
        # A path outside the repository would bind to the machine it was made on.
        raise EngineError(
            f"{args.target}: the plan's desired state {inside!r} is not a path inside its "
            "repository (its repo_path lies outside repo_root); make the plan again inside "
            "the checkout; nothing applied", Exit.ERROR)
    try:
        top = gitrepo.toplevel(start)
    except GitError as exc:
        raise EngineError(str(exc), Exit.ERROR) from exc
    where = "--repo " + str(start) if args.repo else "the current directory"
    if top is None and inside is not None:
        raise EngineError(
            f"{where} is not in a git checkout: a saved plan is applied to the checkout it "
            f"is run in (the plan's desired state is {inside!r} inside its repository; it "
            f"was made in {saved.repo_root}); run apply in a checkout of that repository, "
            "or pass --repo PATH", Exit.ERROR)
    root = start if top is None or inside is None else top / inside
    if not root.is_dir():
        raise EngineError(
            f"{root}: not a directory: the plan's desired state is {inside!r} inside its "
            f"repository (made in {saved.repo_root}), and the checkout of {where} ({top}) "
            "has no such directory; run apply in a checkout of the repository the plan was "
            "made for, or pass --repo PATH", Exit.ERROR)
    found, stage = stages.select(args, str(root), command="apply")
    return found, stage


def _report(run_: ApplyRun, fmt: str) -> int:
    from reconciler.core.cpcodes import is_conflict
    from reconciler.core.outcomes import Outcome
    from reconciler.render import applyview

    report: ApplyReport = run_.report
    if not report.results and report.gate is None:
        return int(Exit.OK)
    code = Exit.OK
    if any(r.outcome is Outcome.REFUSED and is_conflict(r.code) for r in report.results):
        code = Exit.CONFLICT
    elif report.failures():
        code = Exit.APPLY_FAILED  # refused, failed, or in doubt (the text says which)
    elif report.expired:
        code = Exit.NOT_CONVERGED  # --timeout: what is unproven is named below
    elif not report.writes_ok:
        code = Exit.APPLY_FAILED
    gate = report.gate
    if gate is not None and not gate.converged and code is Exit.OK:
        code = Exit.NOT_CONVERGED
    if fmt != "json":
        out, err = applyview.summary(report)
        for line in out:
            print(line)
        for line in err:
            print(line, file=sys.stderr)
        if code is Exit.OK:
            print("Apply complete.")
    if run_.reverted is not None or run_.revert_error is not None:
        _report_revert(run_, fmt)
    return int(code)


def _report_revert(run_: ApplyRun, fmt: str) -> None:
    """``--on-gate-failure revert``: the story after the failed gate. The exit code stays
    the failed release's (15): the release failed, whatever the way back did."""
    from reconciler.render import revertview

    lines = revertview.after_gate(run_.reverted, run_.revert_error)
    if fmt == "json":
        import json

        print(json.dumps({"event": "reverted", "lines": lines}), flush=True)
        return
    for line in lines:
        print(line, file=sys.stderr)
