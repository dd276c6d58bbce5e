"""``reconcile comment FILE``: one living comment per pull request and key.

FILE is what ``reconcile plan --result`` wrote (or a saved plan): a plan, an *invalid*
desired state, or an *error*; the comment always describes that newest result. Keeps
exactly **one comment set** per PR per *key* (``--key``, default the desired-state path;
one per environment): part k of n is one comment whose first line is the hidden marker
``<!-- reconcile:plan path=KEY part=k/n -->``; part 1's second line
``<!-- reconcile:result outcome=… commit=… -->`` says what it shows. A re-run edits those
comments in place (same ids), posts the parts that are new and deletes the ones left
over, so a PR never collects a pile of stale plans. An invalid or error result is one
part that keeps the plan shown before only as a collapsed "superseded: plan for <commit>"
block (read back from our own part 1; carried over while runs keep failing).

In CI, "what next" names the workflow run (``GITHUB_SERVER_URL``/``GITHUB_REPOSITORY``/
``GITHUB_RUN_ID``) and the artifact holding the saved plan (``--artifact``,
``--artifact-url``), never a path on the runner. A token that may not write (GitHub's 403
for a fork's read-only token) degrades, when ``GITHUB_STEP_SUMMARY`` exists, to writing
the comment there with a ``::warning::``, exit 0.

Concurrent runs (two CI jobs on one PR) cannot be prevented from both posting, so every
run that *posted* something re-lists afterwards and deletes, per part, every copy but the
one with the lowest comment id. All runs apply the same rule, so they agree on the
survivor; of any two posts of a part, the later poster's sweep sees both. A run that
only edited added no copy and needs no sweep.

The calls to GitHub are the engine's (``engine.sync_comment``: list, write, sweep; the
decisions in ``core.comments``); this command reads the result file, renders the bodies
(``render.markdown``, ``render.markdown_results``) and reports what was done.

A comment counts as ours only with the marker on its first line (a quote starts with
``>``) **and** the right author: ``--author`` if given, else the token's login (``GET
/user``), else, for an Actions or App installation token (which ``GET /user`` refuses),
any bot account. So a person pasting the marker cannot get their comment edited or
deleted.

Where things come from (flag > GitHub Actions environment): ``--api-url`` >
``GITHUB_API_URL`` > ``https://api.github.com`` (GitHub Enterprise:
``https://HOST/api/v3``); ``--repo`` > ``GITHUB_REPOSITORY``; ``--pr`` > the event at
``GITHUB_EVENT_PATH`` > ``GITHUB_REF`` (``refs/pull/N/merge``); the token only from the
environment (``GITHUB_TOKEN``, or ``--token-env NAME``), never a flag, never printed.
``--dry-run`` needs no token: it lists what it can and prints what it would post, edit and
delete, and every body.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from reconciler.commands import options, output
from reconciler.core import comments
from reconciler.core.comments import Owned
from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.render import delivery as deliveries
from reconciler.render.delivery import Delivery

if TYPE_CHECKING:  # the HTTP stack (githubkit) and the plan's views load when it runs
    from reconciler.core.plans import Plan
    from reconciler.core.results import PlanResult
    from reconciler.engine import Bodies
    from reconciler.shell.github import CommentsClient

BODY_LIMIT = 65_536  # GitHub's maximum comment body, in characters
SLACK = 16  # room left under the limit besides the marker line
_MARKER = re.compile(r"<!-- reconcile:plan path=(\S+) part=(\d{1,4})/(\d{1,4}) -->")
# Part 1's second line: what the comment says, for the next run to read back.
_STATE = re.compile(r"<!-- reconcile:result outcome=(plan|invalid|error) commit=([0-9a-f]*) -->")
_REF_PR = re.compile(r"refs/pull/(\d+)/")


# -- rendering --------------------------------------------------------------------------


def render_parts(plan: Plan, *, budget: int, plan_file: str | None = None,
                 delivery: Delivery | None = None) -> list[str]:
    """The plan's Markdown as "part k/n" comments, each within ``budget`` characters,
    nothing dropped; the apply command names ``plan_file`` and the plan's content digest
    (computed once here: the renderer would otherwise compute it again), or, in CI,
    ``delivery``: the run and the artifact holding the saved plan."""
    from reconciler.render import jsonplan, markdown

    digest = jsonplan.to_wire(plan)["content_digest"]
    if delivery is not None and delivery.known:
        return markdown.render_parts(plan, budget=budget, content_digest=str(digest),
                                     delivery=delivery)
    return markdown.render_parts(plan, budget=budget, plan_file=plan_file,
                                 content_digest=str(digest))


def default_key(result: PlanResult) -> str:
    """The desired-state path as the repository sees it: relative to the git work tree
    (the same on every runner), else as recorded, else ``.``."""
    if result.path and result.root:
        rel = os.path.relpath(result.path, result.root)
        if not rel.startswith(".."):
            return Path(rel).as_posix()
    return result.path or "."


def marker(key: str, part: int, total: int) -> str:
    # Quoted: no space, no ">" (which could end the comment early), no newline.
    return f"<!-- reconcile:plan path={marker_key(key)} part={part}/{total} -->"


def state_line(result: PlanResult) -> str:
    commit = result.commit if result.commit and re.fullmatch(r"[0-9a-f]{7,64}",
                                                              result.commit) else ""
    return f"<!-- reconcile:result outcome={result.outcome.value} commit={commit} -->"


def bodies_for(parts: Sequence[str], key: str, state: str | None = None) -> list[str]:
    total = len(parts)
    return [f"{marker(key, k, total)}\n" + (f"{state}\n" if state and k == 1 else "") + part
            for k, part in enumerate(parts, 1)]


def _room(key: str, limit: int) -> int:
    room = limit - len(marker(key, 9999, 9999)) - 1 - SLACK - 80  # 80: the state line
    if room < 1024:
        raise EngineError(f"the comment key is too long ({len(key)} characters)", Exit.USAGE)
    return room


def _checked(bodies: list[str], limit: int) -> list[str]:
    for k, body in enumerate(bodies, 1):
        if len(body) > limit:
            raise EngineError(f"part {k}/{len(bodies)} of the comment has {len(body):,} "
                              f"characters, over GitHub's {limit:,}")
    return bodies


def render_bodies(plan: Plan, key: str, limit: int = BODY_LIMIT,
                  plan_file: str | None = None, delivery: Delivery | None = None) -> list[str]:
    from reconciler.core.results import PlanResult

    parts = render_parts(plan, budget=_room(key, limit), plan_file=plan_file,
                         delivery=delivery)
    return _checked(bodies_for(parts, key, state_line(PlanResult.of_plan(plan))), limit)


@dataclass(frozen=True)
class Previous:
    """What the living comment showed before this run (its part 1, read back)."""

    outcome: str  # plan | invalid | error ("plan" for a comment older than the state line)
    commit: str | None
    body: str  # part 1 without the marker and state lines
    parts: int


def previous_of(existing: Sequence[Owned]) -> Previous | None:
    firsts = sorted((o for o in existing if o.part == 1), key=lambda o: o.comment.id)
    if not firsts:
        return None
    lines = firsts[0].comment.body.split("\n")[1:]  # the marker line is ours (checked)
    outcome, commit = "plan", None
    if lines and (match := _STATE.fullmatch(lines[0].rstrip("\r"))):
        outcome, commit = match.group(1), match.group(2) or None
        lines = lines[1:]
    return Previous(outcome, commit, "\n".join(lines), firsts[0].total)


def result_bodies(result: PlanResult, key: str, existing: Sequence[Owned],
                  limit: int = BODY_LIMIT, plan_file: str | None = None,
                  delivery: Delivery | None = None) -> list[str]:
    """The comment bodies for ``result``, given the comments there now: a plan replaces
    everything; an invalid or error result is one part that keeps the previous plan only
    as a collapsed "superseded" block (carried over when the previous comment was itself
    invalid or error)."""
    from reconciler.core.results import ResultKind
    from reconciler.render import markdown_results

    if result.plan is not None:
        return render_bodies(result.plan, key, limit, plan_file, delivery)
    room = _room(key, limit)

    def body(block: str = "") -> str:
        if result.outcome is ResultKind.INVALID:
            return markdown_results.render_invalid(result, delivery=delivery,
                                                   superseded=block, budget=room)
        return markdown_results.render_error(result, delivery=delivery, superseded=block)

    free = room - len(body())
    previous = previous_of(existing)
    block = ""
    if previous is not None and previous.outcome == "plan":
        block = markdown_results.superseded(previous.body, previous.commit, room=free,
                                            parts=previous.parts)
    elif previous is not None:
        kept = markdown_results.kept_superseded(previous.body)
        block = kept if len(kept) <= free else ""
    body_text = body(block)
    return _checked(bodies_for([body_text], key, state_line(result)), limit)


# -- which comments are ours (``core.comments``; the marker's key is quoted here) ----------


def parse_marker(body: str, key: str) -> tuple[int, int] | None:
    return comments.parse_marker(body, marker_key(key))


def marker_key(key: str) -> str:
    """The key as the marker writes it: quoted (no space, no ">", no newline)."""
    return quote(key, safe="/._-~")


# -- the command ----------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "comment", help="post a plan, or why there is none, on a GitHub pull request "
        "(one living comment)",
        description="Post what `reconcile plan --result FILE` came to (the plan, an invalid "
        "desired state, or what could not be read) on a pull request, editing this key's "
        "earlier comment in place (split into parts past 65,536 characters); a saved plan "
        "file is accepted too. Defaults come from the GitHub Actions environment; the token "
        "from GITHUB_TOKEN.")
    parser.add_argument("file", metavar="FILE",
                        help="a result file (`reconcile plan --result`) or a saved plan "
                        "(`reconcile plan --out`)")
    parser.add_argument("--repo", metavar="OWNER/NAME", help="default: GITHUB_REPOSITORY")
    parser.add_argument("--pr", metavar="N", type=int,
                        help="pull request number (default: from GITHUB_EVENT_PATH)")
    parser.add_argument("--api-url", metavar="URL",
                        help="GitHub API base, e.g. https://ghe.example/api/v3 "
                        "(default: GITHUB_API_URL, else https://api.github.com)")
    parser.add_argument("--key", metavar="NAME",
                        help="which living comment to keep: one per key on a PR, so two "
                        "environments planned on one PR never overwrite each other's "
                        "(default: the desired-state path, relative to its repository)")
    parser.add_argument("--artifact", metavar="NAME",
                        help="the workflow artifact that holds the saved plan; \"what next\" "
                        "names it and how to download it")
    parser.add_argument("--artifact-url", metavar="URL",
                        help="a link to that artifact (actions/upload-artifact's "
                        "artifact-url output)")
    parser.add_argument("--plan-name", metavar="FILE", default="plan.json",
                        help="the saved plan's file name inside the artifact (default "
                        "plan.json)")
    parser.add_argument("--needs-approval", metavar="REASON",
                        help="mark the plan as not applied until approved, and why (e.g. "
                        "\"the merge changed what was reviewed\"): the headline says so and "
                        "\"what next\" gives --approve-command instead of the apply-on-merge "
                        "loop")
    parser.add_argument("--approve-command", metavar="COMMAND",
                        help="with --needs-approval: the one action that applies exactly this "
                        "saved plan (e.g. gh workflow run reconcile-apply.yml -f commit=SHA "
                        "-f plan-run=ID)")
    parser.add_argument("--author", metavar="LOGIN",
                        help="only comments by this account are ours (default: the token's)")
    parser.add_argument("--token-env", metavar="NAME", default="GITHUB_TOKEN",
                        help="environment variable holding the token (default GITHUB_TOKEN)")
    parser.add_argument("--max-wait", metavar="SECONDS", type=float, default=120.0,
                        help="total time to wait out GitHub rate limits (default 120)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be posted, edited and deleted; write nothing")
    parser.set_defaults(handler=run)


@dataclass(frozen=True)
class Target:
    api_url: str
    repo: str | None
    pr: int | None


def resolve_target(args: argparse.Namespace, env: dict[str, str] | os._Environ[str]) -> Target:
    api_url = options.github_api_url(args.api_url, env)
    repo = options.github_repository(args.repo, env)
    pr: int | None = args.pr
    if pr is None and env.get("GITHUB_EVENT_PATH"):
        pr = _pr_from_event_file(Path(env["GITHUB_EVENT_PATH"]))
    if pr is None and (match := _REF_PR.match(env.get("GITHUB_REF", ""))):
        pr = int(match.group(1))
    if pr is not None and pr < 1:
        raise EngineError(f"--pr must be a positive number, got {pr}", Exit.USAGE)
    return Target(api_url, repo, pr)


def _pr_from_event_file(path: Path) -> int | None:
    from reconciler.shell.github import pr_from_event

    try:
        event: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return pr_from_event(event)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except EngineError as exc:
        return output.report_error(exc)


def _run(args: argparse.Namespace) -> int:
    from reconciler.shell.github import CommentsClient, GitHubError

    result = output.load_result(Path(args.file))
    key = args.key or default_key(result)
    if not key.strip() or "\n" in key:
        raise EngineError("--key must be a non-empty single line", Exit.USAGE)
    target = resolve_target(args, os.environ)
    token = options.read_token(args.token_env)
    delivery = deliveries.from_env(os.environ, artifact=args.artifact,
                                   artifact_url=args.artifact_url, plan_name=args.plan_name,
                                   approval=args.needs_approval, approve=args.approve_command)

    def bodies(existing: Sequence[Owned], limit: int = BODY_LIMIT) -> list[str]:
        return result_bodies(result, key, existing, limit, plan_file=args.file,
                             delivery=delivery)

    bodies([])  # a result that cannot be rendered fails before anything is sent
    if not args.dry_run:
        missing = [what for what, value in (("--repo (or GITHUB_REPOSITORY)", target.repo),
                                            ("--pr (or a pull_request event)", target.pr),
                                            (args.token_env, token)) if not value]
        if missing:
            raise EngineError("reconcile comment needs " + ", ".join(missing), Exit.USAGE)
    if args.max_wait < 0:
        raise EngineError("--max-wait must be 0 or more", Exit.USAGE)

    def waiting(seconds: float, why: str) -> None:
        print(f"github: {why}; waiting {seconds:g}s", file=sys.stderr, flush=True)

    try:
        if target.repo is None or target.pr is None:
            return _dry_run(None, None, target, key, bodies, args.author)
        client = CommentsClient(target.api_url, target.repo, token,
                                wait_budget=args.max_wait, on_wait=waiting)
        with client:
            if args.dry_run:
                return _dry_run(client, target.pr, target, key, bodies, args.author)
            try:
                return _sync(client, target.pr, key, bodies, args.author)
            except GitHubError as exc:
                summary = os.environ.get("GITHUB_STEP_SUMMARY")
                if exc.status != 403 or exc.rate_limited or not summary:
                    raise
                return _to_summary(Path(summary), exc, target, bodies([]))
    except GitHubError as exc:
        raise EngineError(str(exc)) from None


def _to_summary(summary: Path, exc: Exception, target: Target, bodies: list[str]) -> int:
    """A token that may not write comments (a pull request from a fork gets a read-only
    one): the comment goes to the job summary, with a warning, and the job goes on."""
    try:
        with summary.open("a", encoding="utf-8") as handle:
            for body in bodies:
                handle.write(body.rstrip("\n") + "\n\n")
    except OSError as error:
        raise EngineError(f"{exc}; and the job summary {summary} could not be written: "
                          f"{error.strerror or error}") from None
    where = f"{safe(target.repo)}#{target.pr}"
    print(f"::warning title=reconcile comment::could not comment on {where}: "
          f"{safe(str(exc), 600)} (a read-only token, e.g. a pull request from a fork); "
          "the comment is in the job summary instead")
    return int(Exit.OK)


def _sync(client: CommentsClient, pr: int, key: str, bodies: Bodies,
          author: str | None) -> int:
    from reconciler.engine import sync_comment

    done = sync_comment(client, pr, marker_key(key), bodies, author, limit=BODY_LIMIT,
                        say=print, warn=lambda line: print(line, file=sys.stderr))
    where = f" at {safe(done.url)}" if done.url else ""
    print(f"comment on {safe(client.owner)}/{safe(client.name)}#{pr}: {done.parts} part(s) "
          f"for {safe(key)}{where}")
    return int(Exit.OK)


def _dry_run(client: CommentsClient | None, pr: int | None, target: Target, key: str,
             make: Bodies, author: str | None) -> int:
    from reconciler.shell.github import GitHubError

    where = (f"{safe(target.repo)}#{pr} via {safe(target.api_url)}" if client is not None
             else "(no repository or pull request known)")
    print(f"dry run: comment set {safe(key)} on {where}; nothing is written")
    ours: list[Owned] = []
    if client is not None and pr is not None:
        from reconciler.engine import comment_listing

        try:
            ours, foreign, whose = comment_listing(client, pr, marker_key(key), author)
            print(f"found {len(ours)} existing part(s) ({whose})"
                  + (f"; {len(foreign)} with the marker by others, left alone" if foreign else ""))
        except GitHubError as exc:
            print(f"could not list the existing comments ({exc}); all parts would be new")
    else:
        print("could not list existing comments; all parts would be new")
    bodies = make(ours, BODY_LIMIT)
    steps = comments.plan_sync(ours, bodies)
    for step in steps:
        size = f"{len(step.body):,} characters"
        if step.verb == "post":
            print(f"would post part {step.part}/{step.total} ({size})")
        elif step.verb == "edit":
            print(f"would edit comment {step.comment_id}: part {step.part}/{step.total} ({size})")
        elif step.verb == "keep":
            print(f"would keep comment {step.comment_id}: part {step.part}/{step.total} "
                  "(unchanged)")
        else:
            print(f"would delete comment {step.comment_id} ({step.why})")
    for k, body in enumerate(bodies, 1):
        print(f"----- part {k}/{len(bodies)} ({len(body):,} characters) -----")
        print(body)
    return int(Exit.OK)
