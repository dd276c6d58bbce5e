"""The two Route documents the route scenarios start from, for any hostname: the shop's
web route, and the HTTP-01 forward a certificate manager adds beside it (seed 11.2)."""

from __future__ import annotations


def web_route(host: str) -> str:
    """shop-web: checkout's ports 80 and 443 at ``host``, priority 100."""
    return f"""\
apiVersion: reconcile/v1
kind: Route
name: shop-web
owner:
  service: checkout
  hostname: {host}
match:
  ports: [80, 443]
action:
  port: 8080
priority: 100
"""


def acme_route(host: str) -> str:
    """shop-acme: the managed ACME challenge forward on port 80 at ``host``, priority 200."""
    return f"""\
apiVersion: reconcile/v1
kind: Route
name: shop-acme
owner:
  service: checkout
  hostname: {host}
  routeRef: acme
match:
  ports: [80]
  path: /.well-known/acme-challenge/
action:
  port: 8089
priority: 200
managedRouteKind: letsencrypt-http01-forward
"""
