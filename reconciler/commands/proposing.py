"""``watch --env ENV --promote-from UP``: the flags that make a watcher propose promotions.

Owns the flags (``--promote-from``, and the GitHub target ``promote --pr`` uses:
``--repo``/``GITHUB_REPOSITORY``, ``--api-url``/``GITHUB_API_URL``, the token from
``--token-env``/``GITHUB_TOKEN``, ``--base``; ``--remote`` is watch's own) and their
usage errors: UP must be the pipeline's previous environment of ENV, and a GitHub
repository must be known. What is proposed and when is the engine's
(``engine.Proposer``); this module only builds its ``ProposalTarget``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from reconciler.commands import options
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:
    from reconciler.engine import ProposalTarget
    from reconciler.shell.environments import Selected


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``watch --promote-from``; ``--github-repo`` and ``--remote`` come with
    watch's ``--on-gate-failure`` flags (``--repo`` is the same value, as ``promote``
    spells it)."""
    parser.add_argument("--promote-from", metavar="ENV", dest="promote_from",
                        help="with --env: propose (open a pull request for) each promotion "
                        "from ENV, the pipeline's previous environment, as soon as its soak, "
                        "windows, freezes and policies allow it; never applies one (GitHub "
                        "as `promote --pr`: --repo, --api-url, --token-env, --base)")
    parser.add_argument("--repo", metavar="OWNER/NAME", dest="github_repo",
                        help="--promote-from: the pull requests' repository (default: "
                        "GITHUB_REPOSITORY; same as --github-repo)")
    parser.add_argument("--api-url", metavar="URL", dest="api_url",
                        help="--promote-from: GitHub's API (default: GITHUB_API_URL, else "
                        "https://api.github.com)")
    parser.add_argument("--token-env", metavar="NAME", default="GITHUB_TOKEN",
                        help="--promote-from: the variable holding the GitHub token "
                        "(default GITHUB_TOKEN)")
    parser.add_argument("--base", metavar="BRANCH",
                        help="--promote-from: the pull requests' base branch (default: the "
                        "branch the checkout is on)")


def target(args: argparse.Namespace, stage: Selected | None) -> ProposalTarget | None:
    """The ``ProposalTarget`` the flags ask for (None without ``--promote-from``), or a
    usage error (exit 64) naming what is wrong and the pipeline's order."""
    wanted = getattr(args, "promote_from", None)
    if wanted is None:
        return None
    from reconciler.engine import ProposalTarget, PullTarget
    from reconciler.render import markdown

    if stage is None:
        raise EngineError(f"--promote-from {wanted}: this repo has no environments (no "
                          "pipeline.yaml); promotions move between a pipeline's "
                          "environments", Exit.USAGE)
    pipeline = stage.rules.pipeline
    order = " → ".join(e.name for e in pipeline.environments) if pipeline else stage.name
    if stage.upstream is None:
        raise EngineError(f"--promote-from {wanted}: {stage.name} is the first environment "
                          f"of the pipeline ({order}): nothing is promoted into it",
                          Exit.USAGE)
    if stage.upstream.name != wanted:
        raise EngineError(f"--promote-from {wanted}: {stage.name} is promoted from "
                          f"{stage.upstream.name}, the environment before it in the "
                          f"pipeline ({order})", Exit.USAGE)
    repo = options.github_repository(args.github_repo)
    if not repo:
        raise EngineError("--promote-from proposes pull requests: name the GitHub "
                          "repository with --repo OWNER/NAME (or GITHUB_REPOSITORY)",
                          Exit.USAGE)
    pull = PullTarget(api_url=options.github_api_url(args.api_url), repo=repo,
                      token=options.read_token(args.token_env),
                      remote=args.remote, requested=True)
    return ProposalTarget(pull=pull, base=args.base, body=markdown.render)
