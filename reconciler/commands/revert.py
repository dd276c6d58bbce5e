"""``reconcile revert SERVICE[,SERVICE…]`` and ``reconcile release-hold SERVICE DIGEST``.

``revert``: each service's pinned release, which the one judge does not prove, back to
its last proven release (``core.lastproven``: a journal proof and the control plane's
acceptance, each named), with a ``kind: Hold`` document on the failed digest, in one
commit whose message carries the failure evidence and a ``Reconcile-Revert:`` key
(rerun: the same key is found, nothing is written twice); ``--pr`` pushes a branch and
opens a pull request instead, as does a branch GitHub says is protected or a push of the
revert the remote refuses (``engine._where_to_land``, ``shell.landing``). It does not
apply: ``reconcile apply`` rolls back (or use ``apply --on-gate-failure revert``, which
does both).

``release-hold``: remove the Hold on SERVICE's DIGEST by a commit, so the digest may be
pinned again.

Owns the arguments and the choice of view (``render.revertview`` words the revert); the
sequence is ``engine.revert`` and
``engine.release_hold``. Exit codes: 0 done (or already done); 1 refused (no proven release,
nothing to revert, no such hold, a dirty repo), nothing written; 64 usage.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from reconciler.commands import options, output, selection, stages
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:
    from reconciler.engine import PullTarget


def add_pr_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pr", action="store_true",
                        help="push a branch and open a pull request (GitHub, as `reconcile "
                        "comment` reaches it) instead of committing to the current branch")
    parser.add_argument("--github-repo", metavar="OWNER/NAME",
                        help="the pull request's repository, also asked whether the branch "
                        "is protected (then a pull request, not a commit; default: "
                        "GITHUB_REPOSITORY)")
    parser.add_argument("--remote", default="origin", metavar="NAME",
                        help="the git remote that receives the branch (default: origin)")


def pull_target(args: argparse.Namespace) -> PullTarget:
    from reconciler.engine import PullTarget

    return PullTarget(
        api_url=options.github_api_url(None),
        repo=options.github_repository(args.github_repo),
        token=options.read_token("GITHUB_TOKEN"), remote=args.remote, requested=args.pr)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "revert", help="pin a failed release's service back to its last proven release",
        description="Write the last proven digest (and its tag) of each SERVICE back into "
        "its file, add a kind: Hold document on the failed digest, and commit with the "
        "failure evidence, pushed to the branch the checkout tracks (or open a pull request: "
        "with --pr, when GitHub says the branch is protected, or when the push is refused). "
        "The last proven release is "
        "one the journal holds a proof of (the judge found it converged on every expected "
        "cluster) and the control plane accepted; with none, nothing is written. Apply "
        "afterwards rolls back.")
    parser.add_argument("services", type=selection.names, metavar="SERVICE[,SERVICE...]",
                        help="the services to revert")
    parser.add_argument("-C", "--path", default=".", metavar="PATH",
                        help="where the desired state is (default: the current directory)")
    stages.add_env_flag(parser)
    add_pr_flags(parser)
    options.add_connection_flags(parser)
    parser.set_defaults(handler=run)

    hold = subparsers.add_parser(
        "release-hold", help="remove the hold on a service's digest, by a commit",
        description="Remove the kind: Hold document on SERVICE's DIGEST and commit, so the "
        "digest may be pinned again.")
    hold.add_argument("service", metavar="SERVICE", help="the held service's name")
    hold.add_argument("digest", metavar="DIGEST",
                      help="the held digest (sha256:…), as the Hold document names it")
    hold.add_argument("-C", "--path", default=".", metavar="PATH",
                      help="where the desired state is (default: the current directory)")
    stages.add_env_flag(hold, override=True)
    options.add_connection_flags(hold)
    hold.set_defaults(handler=run_release)


def run(args: argparse.Namespace) -> int:
    from reconciler import engine

    try:
        root, stage = stages.select(args, args.path, command="revert")
        done = engine.revert(root, sorted(set(args.services)),
                             overrides=options.overrides_from(args), env=os.environ,
                             pull=pull_target(args), progress=output.progress_for_stderr(),
                             stage=stage)
    except EngineError as exc:
        return output.report_error(exc)
    from reconciler.render import revertview

    for line in revertview.story(done) + revertview.next_step(done):
        print(line)
    return int(Exit.OK)


def run_release(args: argparse.Namespace) -> int:
    from reconciler import engine

    try:
        root, stage = stages.select(args, args.path, command="release-hold")
        commit, path = engine.release_hold(root, args.service, args.digest,
                                           overrides=options.overrides_from(args),
                                           env=os.environ, stage=stage)
    except EngineError as exc:
        return output.report_error(exc)
    from reconciler.render import revertview

    print(revertview.released(args.service, args.digest, commit, path,
                              environment=stage.name if stage is not None else None))
    return int(Exit.OK)
