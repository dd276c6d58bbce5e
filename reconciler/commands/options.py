"""Flags shared by the commands that reach the live world (plan, apply, watch).

Owns the connection-override flags and their precedence: a flag wins over its
environment variable, which wins over the settings document.
"""

from __future__ import annotations

import argparse
import os

from reconciler.shell.endpoints import Overrides

FORMATS = ("text", "json", "markdown")


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("live-world overrides (flag > environment > settings)")
    group.add_argument("--control-plane", metavar="URL", dest="control_plane_url",
                       help="control-plane URL (env RECONCILE_CONTROL_PLANE_URL)")
    group.add_argument("--gateway", metavar="HOST",
                       help="gateway hostname (env RECONCILE_GATEWAY)")
    group.add_argument("--resolve", metavar="HOST:PORT:ADDR[,ADDR...]",
                       help="static gateway addresses, like curl --resolve (env RECONCILE_RESOLVE)")
    group.add_argument("--ca-file", metavar="PATH",
                       help="CA bundle for the control plane and the mesh (env RECONCILE_CA_FILE)")


def overrides_from(args: argparse.Namespace) -> Overrides:
    flags = Overrides(control_plane_url=args.control_plane_url, ca_file=args.ca_file,
                      gateway=args.gateway, resolve=args.resolve)
    return flags.over(Overrides.from_env(os.environ))
