"""``reconcile validate [PATH] [--format text|json|github|sarif]``: check a config repo
(or one file of it), print every problem.

PATH a directory: the desired-state root is found from it like git finds its repo
(``shell.discovery``: the nearest directory at or above PATH holding a Settings file,
never above the git work tree), and all of it is validated. PATH a file: that file is
validated (``discovery.check_file``): within its desired state when one is found above
it (syntax, each document, and the rules between documents, problems of this file
only), else alone (syntax, each document, duplicates within the file; "exactly one
Settings" and "granted services are declared" need the directory). Diagnostics of a
file name it as given.

Owns the command's arguments, the choice of view and the exit code. Loading and checking
are ``shell.validating.load_repo``'s; the words and the JSON are
``render.validateview``'s. Exit codes: 0 valid, 1 invalid or unreadable (never a
traceback for bad input); usage errors are the CLI's (64).

Output: one diagnostic per line on stdout, sorted, ``path:line:col: field: message``
(control characters escaped by ``Diagnostic.render``), then a one-line summary (on
stdout when valid, stderr when not). ``--format json`` prints one JSON object:
``{"format_version": "1.0", "valid": bool, "summary": str, "files": int,
"counts": {...}, "diagnostics": [{path, line, column, field, message, severity}]}``.
``--format github`` prints one GitHub Actions workflow command per problem
(``::error file=…,line=…,col=…,title=<field>::<message>``) and the summary; ``--format
sarif`` prints a SARIF 2.1.0 log (``render.diagnostics_formats``). Both name files
relative to the workspace (``GITHUB_WORKSPACE`` when set and the repo is inside it, else
PATH joined with the repo-relative path), so annotations land on the real file.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from reconciler import __version__
from reconciler.commands import options, output, stages
from reconciler.core.diagnostics import Diagnostic
from reconciler.exitcodes import Exit

FORMATS = ("text", "json", "github", "sarif")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check a desired-state repo and report every problem",
        description="Load every *.yaml/*.yml under PATH, validate each document and the "
        "rules between them, and print every problem as path:line:col: field: message.",
    )
    options.add_path_argument(parser, help="the desired-state directory or any directory below it "
                                           "(the nearest one above holding a Settings document is "
                                           "used), or one YAML file to check on its own (default: "
                                           "the current directory)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="output format (default: text); github: Actions workflow-command "
                        "annotations; sarif: a SARIF 2.1.0 log")
    stages.add_env_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from reconciler.render import validateview
    from reconciler.shell import discovery, environments
    from reconciler.shell.validating import load_repo

    given = Path(args.path)
    if given.exists() and not given.is_dir():
        return run_file(args, given)
    root = given
    top = environments.find_pipeline_root(given) if given.is_dir() else None
    if top is not None:
        return run_pipeline(args, top, given)
    if getattr(args, "env_name", None):
        print(f"reconcile validate: --env {args.env_name}: no pipeline.yaml at or above "
              f"{args.path}", file=sys.stderr)
        return Exit.USAGE
    if given.is_dir():
        found = discovery.find_root(given)
        nothing = discovery.absent(found, command="validate")
        if nothing is not None:
            output.say(validateview.unreadable(f"reconcile validate: {nothing}",
                                               args.format, limit=2000))
            return Exit.ERROR
        if found.moved:
            print(f"reconcile validate: using the desired state in {found.root} (the nearest "
                  f"directory above {args.path} holding a Settings document); paths below "
                  "are relative to it", file=sys.stderr)
        root = found.root
    try:
        result = load_repo(root)
    except (OSError, ValueError) as exc:  # load_repo reports bad input itself; this is the machine
        output.say(validateview.unreadable(
            f"reconcile validate: cannot read {args.path}: {exc}", args.format, limit=1000))
        return Exit.ERROR

    output.say(validateview.shown(
        args.format, result.diagnostics, summary=validateview.repo_summary(result),
        valid=result.valid, document=validateview.repo_json(result), root=root.as_posix(),
        base=workspace_base(root, os.environ.get("GITHUB_WORKSPACE")), version=__version__))
    return Exit.OK if result.valid else Exit.ERROR


def run_file(args: argparse.Namespace, path: Path) -> int:
    """``validate FILE`` (see the module docstring)."""
    from reconciler.render import validateview
    from reconciler.shell import discovery

    checked = discovery.check_file(path)
    kinds = [type(d.document).__name__ for d in checked.documents]
    counts = {"services": kinds.count("Service"), "grants": kinds.count("Grant"),
              "settings": kinds.count("Settings")}
    text = validateview.file_summary(
        path.as_posix(), valid=checked.valid, problems=len(checked.diagnostics),
        counts=counts, repo=None if checked.repo is None else str(checked.repo))
    # Text and JSON name the file as the user gave it; GitHub and SARIF name it from the
    # workspace, so an annotation lands on the real file.
    named = [dataclasses.replace(d, path=path.as_posix()) for d in checked.diagnostics]
    document = {
        "format_version": validateview.FORMAT_VERSION, "valid": checked.valid,
        "summary": text, "files": 1, "counts": counts,
        "scope": "file-in-repo" if checked.repo is not None else "file-alone",
        "diagnostics": [d.to_json() for d in named]}
    parent = path.parent
    output.say(validateview.shown(
        args.format, checked.diagnostics, summary=text, valid=checked.valid,
        document=document, root=parent.as_posix(),
        base=workspace_base(parent, os.environ.get("GITHUB_WORKSPACE")),
        version=__version__, named=named))
    return Exit.OK if checked.valid else Exit.ERROR


def workspace_base(root: Path, workspace: str | None) -> str:
    """The repo's path as annotations name it: relative to ``workspace`` when given and
    the repo lies inside it, else as given on the command line (``/`` separators)."""
    if workspace:
        try:
            relative = os.path.relpath(os.path.abspath(root), os.path.abspath(workspace))
        except ValueError:  # another drive (Windows)
            return root.as_posix()
        if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
            return Path(relative).as_posix()
    return root.as_posix()


def run_pipeline(args: argparse.Namespace, top: Path, given: Path) -> int:
    """A repo with environments: ``pipeline.yaml``, ``freezes/`` and ``policies/`` (a CEL
    rule that does not compile, does not type-check or is over the budget is a problem at
    its file:line; a freeze that has ended, a warning), and each environment's
    desired state (``--env``, or the one PATH lies in: that one only), every path
    relative to the pipeline root."""
    from reconciler.shell import environments
    from reconciler.shell.validating import load_repo

    rules = environments.read_rules(top)
    problems: list[Diagnostic] = [*rules.diagnostics, *rules.over_budget]
    chosen = []
    if rules.pipeline is not None:
        name = getattr(args, "env_name", None)
        here = given.resolve()
        everything = list(rules.pipeline.environments)
        chosen = [e for e in everything if e.name == name] if name else [
            e for e in everything if (top / e.path).resolve() in (here, *here.parents)] \
            or everything
        if name and not chosen:
            print(f"reconcile validate: --env {name}: no such environment (the pipeline has: "
                  f"{', '.join(e.name for e in everything)})", file=sys.stderr)
            return Exit.USAGE
    services = files = 0
    for environment in chosen:
        root = top / environment.path
        if not root.is_dir():
            problems.append(Diagnostic("pipeline.yaml", 0, 0, "", f"environment "
                                       f"{environment.name}: {environment.path} is not a "
                                       "directory"))
            continue
        result = load_repo(root)
        files += len(result.files)
        services += len(result.state.services) if result.state else 0
        problems.extend(dataclasses.replace(d, path=f"{environment.path}/{d.path}")
                        for d in result.diagnostics)
    from reconciler.render import validateview

    valid = not problems
    errors = len(problems)
    problems = sorted([*problems, *rules.warnings])  # warnings are said, never fail the run
    names = [e.name for e in chosen]
    said = validateview.pipeline_summary(
        valid=valid, environments=names, services=services, freezes=len(rules.freezes),
        policies=len(rules.policies), errors=errors, warnings=len(rules.warnings))
    document = {"format_version": validateview.FORMAT_VERSION, "valid": valid,
                "summary": said, "files": files, "environments": names,
                "diagnostics": [d.to_json() for d in problems]}
    output.say(validateview.shown(
        args.format, tuple(problems), summary=said, valid=valid, document=document,
        root=top.as_posix(), base=workspace_base(top, os.environ.get("GITHUB_WORKSPACE")),
        version=__version__))
    return Exit.OK if valid else Exit.ERROR
