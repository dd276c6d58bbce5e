"""``reconcile status``: the on-call view -- service × environment (and × cluster).

Owns the command's flags and exit code. The reads are ``engine.status``'s (one snapshot
per environment, batch reads, no plan); the rows ``core.status``'s; the views
``render.status``'s. In a repo with ``pipeline.yaml`` it shows every environment in
pipeline order (``--env NAME``: that one, whose previous environment is still read for
the next-promotion column); without, the repo's one root.

Exit code: 0 when every environment was read (whatever it shows), 1 when one could not
be, 64 usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.commands import options, output, stages
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the pipeline's models load when the command runs (start time)
    from reconciler.core import status as service_status
    from reconciler.core.pipeline import Environment, Freeze


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status", help="service × environment: pinned, proven on how many clusters, since "
        "when, what the next promotion waits for",
        description="Read each environment once (batch reads, no plan) and show, per "
        "service and environment, the pinned digest/tag, how many expected clusters prove "
        "it, since when, and what blocks the next promotion and when it is eligible.")
    options.add_path_argument(parser)
    stages.add_env_flag(parser)
    parser.add_argument("--clusters", action="store_true",
                        help="also show service × cluster: pinned, running, proven, since, "
                        "last error")
    parser.add_argument("--format", choices=(*options.FORMATS, "html"), default="text",
                        help="text, json (format reconcile.status 1.0), markdown, or html: "
                        "the web view (fleet, pipeline, every service) as one "
                        "self-contained file (docs/web-view.md)")
    parser.add_argument("--out", metavar="FILE",
                        help="write the view to FILE (whole or not at all) instead of "
                        "standard output")
    options.add_connection_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from reconciler import engine  # the HTTP stack loads only when the command runs
    from reconciler.render import status as views
    from reconciler.shell import environments

    roots: list[tuple[str, Path, Environment | None]]
    from reconciler.core.pipeline import Policy

    freezes: tuple[tuple[Freeze, str], ...] = ()
    policies: tuple[tuple[Policy, str, int], ...] = ()
    try:
        everything = getattr(args, "env_name", None) is None \
            and environments.find_pipeline_root(Path(args.path)) is not None
        if everything:  # every environment of the pipeline, wherever PATH is in it
            top = environments.find_pipeline_root(Path(args.path))
            assert top is not None
            rules = environments.read_rules(top)
            if rules.pipeline is None or rules.diagnostics:
                raise EngineError(f"{top / 'pipeline.yaml'}: the pipeline is invalid",
                                  Exit.ERROR, rules.diagnostics)
            stage = None
            freezes = rules.freezes
            policies = rules.policies
            roots = [(e.name, top / e.path, e if rules.pipeline.upstream_of(e.name) else None)
                     for e in rules.pipeline.environments]
        else:
            root, stage = stages.select(args, args.path, command="status")
            roots = [("default", root, None)]
            if stage is not None:
                pipeline = stage.rules.pipeline
                assert pipeline is not None
                freezes = stage.rules.freezes
                policies = stage.rules.policies
                wanted = [stage.environment] if stage.upstream is None else \
                    [stage.upstream, stage.environment]
                roots = [(e.name, stage.pipeline_root / e.path,
                          e if pipeline.upstream_of(e.name) else None) for e in wanted]
        result = engine.status(roots, overrides=options.overrides_from(args),
                               freezes=freezes, policies=policies)
        if stage is not None:
            # the previous environment was read for the next-promotion column only
            result = dataclasses.replace(result, environments=(stage.name,), rows=tuple(
                r for r in result.rows if r.environment == stage.name))
    except EngineError as exc:
        return output.report_error(exc)
    if args.format == "json":
        said = views.as_json(result)
    elif args.format == "markdown":
        said = views.markdown(result, clusters=args.clusters)
    elif args.format == "html":
        said = _html(result)
    else:
        said = views.text(result, clusters=args.clusters)
    if args.out:
        try:
            output.write_atomically(Path(args.out), said, "the status view")
        except EngineError as exc:
            return output.report_error(exc)
    else:
        sys.stdout.write(said)
    return int(Exit.ERROR) if result.errors else int(Exit.OK)


def _html(result: service_status.Status) -> str:
    """The web view of ``result`` as one file: every page, linked by anchors; an
    environment that could not be read is unknown, said at the top."""
    import time

    from reconciler.core.webview import LiveRead, View
    from reconciler.render import webview

    now = int(time.time() * 1000)
    live = LiveRead(ok=True, last_success_ms=result.taken_at)
    return webview.document(View(status=result, live=live, now_ms=now, source="status"),
                            "all", served=False)
