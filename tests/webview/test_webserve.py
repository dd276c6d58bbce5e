"""``shell.webserve``: the watcher's answers for the web view -- read-only, the token,
the query's filters and page, unknown before anything was observed -- and ``watch
--view``'s safe defaults (a port beyond loopback only with a token)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from reconciler.commands import watch
from reconciler.core import sanitize
from reconciler.core.webview import LiveRead, View
from reconciler.failures import EngineError
from reconciler.render import webview
from reconciler.shell.webserve import WebView, is_view_path
from tests.webview.builders import NOW, fleet


def served(web: WebView, path: str, method: str = "GET",
           authorization: str | None = None) -> tuple[int, dict[str, str], str]:
    status, headers, body = web.answer(method, path, authorization, NOW)
    return status, dict(headers), body.decode()


def test_only_get_and_head_are_answered() -> None:
    web = WebView()
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        status, headers, _ = served(web, "/", method)
        assert status == 405 and headers["Allow"] == "GET, HEAD"
    assert served(web, "/", "HEAD")[0] == 200
    assert is_view_path("/") and is_view_path("/service/x") and is_view_path("/pipeline")
    assert not is_view_path("/metrics") and not is_view_path("/suspend")


def test_nothing_observed_yet_is_unknown_not_empty_green() -> None:
    status, headers, body = served(WebView(), "/")
    assert status == 200
    assert "UNKNOWN since" in body and "no observation of the live side yet" in body
    assert headers["Content-Security-Policy"] == webview.CSP
    assert headers["Cache-Control"] == "no-store" and headers["X-Frame-Options"] == "DENY"


def test_a_token_is_asked_for_compared_and_never_shown() -> None:
    web = WebView(token="s3cret-view-token")
    assert served(web, "/")[0] == 401
    assert served(web, "/", authorization="Bearer wrong")[0] == 401
    assert served(web, "/", authorization="Basic s3cret-view-token")[0] == 401
    status, _, body = served(web, "/", authorization="Bearer s3cret-view-token")
    assert status == 200
    assert "s3cret-view-token" in sanitize.known_secrets()
    web.publish(View(status=fleet(services=2), live=LiveRead(ok=False, reason=(
        "control plane said s3cret-view-token")), now_ms=NOW, source="watch"))
    body = served(web, "/", authorization="Bearer s3cret-view-token")[2]
    assert "s3cret-view-token" not in body and "&lt;redacted&gt;" in body


def test_the_query_filters_and_pages_and_part_main_is_the_main_only() -> None:
    web = WebView()
    web.publish(View(status=fleet(services=1_100), live=LiveRead(ok=True), now_ms=NOW,
                     source="watch"))
    status, headers, body = served(web, "/?part=main&page=2")
    assert status == 200 and headers["X-Reconcile-Generation"] == "1"
    assert not body.startswith("<!doctype") and "services 1001–1100 of 1100" in body
    body = served(web, "/?name=svc-0004&state=failing&env=prod")[2]
    assert "<!doctype html>" in body and 'value="svc-0004"' in body
    assert body.count('data-state="failing"') == 2  # svc-00042 and svc-00046
    assert served(web, "/service/svc-00003")[0] == 200
    assert served(web, "/service/nope")[0] == 404
    web.publish(View(status=fleet(services=1), live=LiveRead(ok=True), now_ms=NOW))
    assert served(web, "/pipeline")[1]["X-Reconcile-Generation"] == "2"


def args(**given: object) -> argparse.Namespace:
    values: dict[str, object] = {"view": True, "metrics_port": 0, "metrics_addr": "127.0.0.1",
                                 "view_token_file": None, "view_commit_url": None}
    values.update(given)
    return argparse.Namespace(**values)


def test_watch_view_is_safe_by_default(tmp_path: Path) -> None:
    assert watch._web_view(args(view=False), object()) is None
    assert isinstance(watch._web_view(args(), object()), WebView)
    for wrong, said in ((args(metrics_port=None), "--view needs --metrics-port"),
                        (args(metrics_addr="0.0.0.0"), "needs --view-token-file"),
                        (args(view_commit_url="http://x/{commit}"), "https://")):
        with pytest.raises(EngineError, match=said) as caught:
            watch._web_view(wrong, object())
        assert caught.value.code == 64
    token = tmp_path / "token"
    token.write_text("abc123\n")
    web = watch._web_view(args(metrics_addr="0.0.0.0", view_token_file=str(token)), object())
    assert web is not None and web.token == "abc123"
    with pytest.raises(EngineError, match="view token"):
        watch._web_view(args(view_token_file=str(tmp_path / "missing")), object())
