"""``reconcile promote SERVICE[,…] --to ENV`` (or ``--all``): move what the previous
environment proves into ENV's pins.

Owns the command's flags, the choice of view and the exit code; the words are
``render.promoteview``'s. The sequence is ``engine.promote``'s: read the
previous environment (commit, control plane, clusters), take the digest its current
rollout is to, splice the pin into ENV's service file in memory with ``pin``'s
byte-preserving rewrite, plan ENV with it and ask the one gate (``core.writegate``: soak
proven upstream, windows, freezes, holds, policies) before writing the file; then show
ENV's plan for it. ``--commit`` commits the files
with the evidence (clusters, digest, proven since); ``--pr`` also pushes a branch and
opens a pull request whose body is that plan (``shell.pullrequests``, githubkit).

Exit codes: 0 written (or already pinned); 10 a promotion was refused (its blockers are
named, with when it becomes eligible; nothing is written for it); 1 error; 64 usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.commands import options, output, selection, stages
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the engine's values load when the command runs
    from reconciler.core.promoted import PromoteRun


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "promote", help="pin in ENV the digests the previous environment proves (soak, "
        "windows, freezes, holds, policies checked before anything is written)",
        description="For each SERVICE (or --all), take the digest the previous environment "
        "of the pipeline proves now, plan ENV with the pin (in memory) and ask the one gate "
        "-- soak, ENV's windows and freezes, holds, policies -- then write the pin into "
        "ENV's service file in place (every other byte kept) and show ENV's plan. A refused "
        "service is named with its blockers and when each lifts; nothing of it is written "
        "(no file, commit, branch or pull request; exit 10).")
    parser.add_argument("services", nargs="?", metavar="SERVICE[,SERVICE…]",
                        help="the services to promote (comma-separated)")
    parser.add_argument("--to", required=True, metavar="ENV", dest="env_name",
                        help="the environment to promote into (its previous one is the source)")
    parser.add_argument("--all", action="store_true",
                        help="every service ENV declares that the previous environment has")
    parser.add_argument("-C", "--path", default=".", metavar="PATH",
                        help="inside the repo (default: the current directory)")
    parser.add_argument("--dry-run", action="store_true", help="show, write nothing")
    parser.add_argument("--commit", action="store_true",
                        help="commit the written files, the evidence in the message")
    parser.add_argument("--pr", action="store_true",
                        help="commit, push a branch and open a pull request whose body is the "
                        "plan (--repo/GITHUB_REPOSITORY, --api-url/GITHUB_API_URL, the token "
                        "from GITHUB_TOKEN or --token-env)")
    parser.add_argument("--base", default="main", help="the pull request's base (default main)")
    parser.add_argument("--remote", default="origin", help="where to push (default origin)")
    parser.add_argument("--repo", metavar="OWNER/NAME", help="default: GITHUB_REPOSITORY")
    parser.add_argument("--api-url", metavar="URL", help="default: GITHUB_API_URL, else "
                        "https://api.github.com")
    parser.add_argument("--token-env", metavar="NAME", default="GITHUB_TOKEN",
                        help="environment variable holding the GitHub token")
    parser.add_argument("--override-window", metavar="REASON",
                        help="emergency: promote although a window is closed or ENV is "
                        "frozen; recorded in the commit and the plan's notes")
    options.add_connection_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from reconciler import engine  # the HTTP stack loads only when the command runs

    if bool(args.services) == bool(args.all):
        print("reconcile promote: name the services (SERVICE[,SERVICE…]) or --all",
              file=sys.stderr)
        return int(Exit.USAGE)
    if (args.commit or args.pr) and args.dry_run:
        print("reconcile promote: --dry-run writes nothing, so it cannot --commit or --pr",
              file=sys.stderr)
        return int(Exit.USAGE)
    names = None if args.all else list(selection.names(args.services))
    try:
        # --pr's repository and token are asked before anything is written: a promotion
        # committed and then refused its pull request would leave the commit to undo.
        pr = _pr_target(args) if args.pr else None
        _, stage = stages.select(args, args.path, command="promote")
        if stage is None:
            raise EngineError("promote needs environments: no pipeline.yaml at or above "
                              f"{args.path}", Exit.USAGE)
        result = engine.promote(stage, names, write=not args.dry_run,
                                commit=args.commit or args.pr,
                                overrides=options.overrides_from(args),
                                progress=output.progress_for_stderr())
    except EngineError as exc:
        return output.report_error(exc)
    from reconciler.render import promoteview

    output.say(promoteview.story(result, dry_run=args.dry_run))
    output.say(promoteview.preview(result))
    if result.preview is not None:
        output.show(result.preview, "text", sys.stdout)
    if pr is not None and result.commit:
        code = _open_pr(args, result, *pr)
        if code:
            return code
    refused = any(p.refused for p in result.promotions)
    return int(Exit.REFUSED_NO_GO) if refused else int(Exit.OK)


def _pr_target(args: argparse.Namespace) -> tuple[str, str]:
    """``--pr``'s repository and token, or a usage error naming what is missing."""
    repo = options.github_repository(args.repo)
    if not repo:
        raise EngineError("--pr needs --repo OWNER/NAME (or GITHUB_REPOSITORY); nothing "
                          "was written", Exit.USAGE)
    token = options.read_token(args.token_env)
    if token is None:
        raise EngineError(f"--pr needs a GitHub token in {args.token_env} (unset or empty; "
                          "--token-env names another variable); nothing was written",
                          Exit.USAGE)
    return repo, token


def _open_pr(args: argparse.Namespace, result: PromoteRun, repo: str, token: str) -> int:
    from reconciler.render import promoteview
    from reconciler.shell import pullrequests

    assert result.commit is not None
    text = promoteview.pull_request(result, result.commit)
    try:
        _, pull = pullrequests.open_pull_request(
            Path(args.path), api_url=options.github_api_url(args.api_url), repo=repo,
            token=token, branch=text.branch, base=args.base, title=text.title,
            body=text.body, commit=result.commit, remote=args.remote)
    except pullrequests.PullRequestError as exc:
        return output.report_error(EngineError(f"--pr: {exc}; the commit "
                                               f"{result.commit[:12]} is made"))
    output.say(promoteview.opened(pull.number, pull.url, pull.created))
    return 0
