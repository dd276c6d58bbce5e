"""Flags shared by the commands that reach the live world (plan, apply, watch, config).

Owns the connection-override flags. Their precedence (flag > environment > settings,
each layer able to unset) is ``shell.endpoints``'s; this module only names the flags.
Also owns how the commands that talk to GitHub (comment, promote --pr, revert,
watch --promote-from) resolve its API, the repository and the token: flag > GitHub
Actions' variable > default, the same in each (githubkit itself is loaded only by the
shell, when a pull request or comment is made).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the parser is built without the settings models (start time)
    from reconciler.shell.endpoints import Overrides

FORMATS = ("text", "json", "markdown")
#: GitHub's API when neither a flag nor GITHUB_API_URL names one (GitHub Enterprise:
#: https://HOST/api/v3)
GITHUB_API = "https://api.github.com"


def github_api_url(flag: str | None, env: Mapping[str, str] = os.environ) -> str:
    """``--api-url`` > ``GITHUB_API_URL`` > GitHub's own."""
    return flag or env.get("GITHUB_API_URL") or GITHUB_API


def github_repository(flag: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    """``--repo OWNER/NAME`` > ``GITHUB_REPOSITORY``; None when neither names one."""
    return flag or env.get("GITHUB_REPOSITORY") or None


def read_token(name: str) -> str | None:
    """The GitHub token in the environment variable ``name`` (None: unset or blank); a
    usage error when it holds whitespace or non-ASCII inside."""
    token = os.environ.get(name, "").strip()
    if not token:
        return None
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        # Checked here so that no HTTP library ever echoes a malformed header value.
        raise EngineError(f"{name} does not hold a token (whitespace or non-ASCII inside)",
                          Exit.USAGE)
    return token


def add_path_argument(parser: argparse.ArgumentParser,
                      help: str = "inside the repo (default: the current directory)") -> None:
    """The optional PATH most commands take first: where the desired state (or the repo)
    is, the current directory when left out; ``help`` says what the command reads there."""
    parser.add_argument("path", nargs="?", default=".", metavar="PATH", help=help)


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "live-world overrides",
        "flag > environment > settings; an empty value unsets the setting ('' or the "
        "keyword shown) so the default applies. `reconcile config` shows the result.")
    group.add_argument("--control-plane", metavar="URL", dest="control_plane_url",
                       help="control-plane URL, https:// or http:// "
                       "(env RECONCILE_CONTROL_PLANE_URL; settings controlPlane.url)")
    group.add_argument("--control-plane-ca", metavar="PATH|system",
                       help="CA bundle (PEM) for the control plane's TLS, or 'system' for the "
                       "system trust store; unused for http:// "
                       "(env RECONCILE_CONTROL_PLANE_CA; settings controlPlane.caFile)")
    group.add_argument("--mesh-ca", metavar="PATH|system",
                       help="CA bundle (PEM) for the clusters' TLS, or 'system' "
                       "(env RECONCILE_MESH_CA; settings mesh.caFile)")
    group.add_argument("--ca-file", metavar="PATH|system",
                       help="one CA for both the control plane and the mesh; in the same "
                       "layer --control-plane-ca/--mesh-ca win over it (env RECONCILE_CA_FILE)")
    group.add_argument("--gateway", metavar="HOST",
                       help="the mesh gateway hostname: TLS SNI and HTTP Host "
                       "(env RECONCILE_GATEWAY; settings mesh.gateway)")
    group.add_argument("--mesh-port", metavar="PORT|default",
                       help="the port dialled on every cluster address; 'default' = 443 "
                       "(env RECONCILE_MESH_PORT; settings mesh.port)")
    group.add_argument("--resolve", metavar="HOST:PORT:ADDR[,ADDR...]|none",
                       help="dial these addresses for the gateway HOST instead of asking DNS; "
                       "'none' uses DNS even when the settings list addresses. Curl's syntax, "
                       "but PORT is the port dialled (as if given with --mesh-port at this "
                       "layer) (env RECONCILE_RESOLVE; settings mesh.resolve + mesh.port)")
    group.add_argument("--allow-insecure-http", action="store_const", const="1", default=None,
                       help="allow an http:// control-plane URL to a host that is not "
                       "loopback: the token then crosses the network in clear text; "
                       "refused without it (env RECONCILE_ALLOW_INSECURE_HTTP=1; no "
                       "settings field: a repo cannot allow it for its readers)")


def add_tracing_flag(parser: argparse.ArgumentParser) -> None:
    """``--otlp-endpoint`` (plan, apply, watch): where this run's trace goes."""
    parser.add_argument("--otlp-endpoint", metavar="URL",
                        help="export an OpenTelemetry trace of this run (of each watch "
                        "cycle) to this OTLP/HTTP collector, e.g. http://127.0.0.1:4318; "
                        "needs the optional extra reconcile[otlp]; '' turns it off. Off by "
                        "default (env RECONCILE_OTLP_ENDPOINT; settings tracing.otlpEndpoint)")


def overrides_from(args: argparse.Namespace,
                   env: Mapping[str, str] | None = None) -> Overrides:
    """The flags over the environment (``os.environ`` unless ``env`` is given). Also
    hands ``--otlp-endpoint``, where the command has it, to ``shell.tracing`` (it wins
    over the environment and the settings there)."""
    from reconciler.shell.endpoints import Overrides

    endpoint = getattr(args, "otlp_endpoint", None)
    if endpoint is not None:
        from reconciler.shell import tracing

        tracing.request(endpoint)
    flags = Overrides.from_flags(
        control_plane_url=args.control_plane_url, ca_file=args.ca_file,
        control_plane_ca=getattr(args, "control_plane_ca", None),
        mesh_ca=getattr(args, "mesh_ca", None), gateway=args.gateway,
        mesh_port=getattr(args, "mesh_port", None), resolve=args.resolve,
        allow_insecure_http=getattr(args, "allow_insecure_http", None))
    return flags.over(Overrides.from_env(os.environ if env is None else env))
