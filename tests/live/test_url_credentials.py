"""A password in the control-plane URL is never shown and never used.

``https://admin:PW@host`` is refused with a ``ConfigError`` that shows the URL masked
(``admin:***@``); a ``Connection`` can never hold userinfo, so no error, plan header or
saved plan downstream of it can carry the password.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from pydantic import ValidationError

from reconciler.core.desired import Settings
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell.endpoints import (
    ConfigError,
    Connection,
    Overrides,
    display_url,
    has_userinfo,
)
from tests.e2e_repo import make_repo
from tests.live.fakes import connection

SECRET = "SECRETPW"


@pytest.mark.parametrize(("url", "shown"), [
    (f"https://admin:{SECRET}@127.0.0.1:8443", "https://admin:***@127.0.0.1:8443"),
    (f"https://admin:{SECRET}@cp.example.net/base", "https://admin:***@cp.example.net/base"),
    (f"https://{SECRET}@cp.example.net", "https://***@cp.example.net"),
    (f"https://admin:p@{SECRET}/x@cp.example.net", "https://admin:***@cp.example.net"),
    ("https://cp.example.net/typedrequest", "https://cp.example.net/typedrequest"),
])
def test_display_url_masks_userinfo(url: str, shown: str) -> None:
    assert display_url(url) == shown
    assert has_userinfo(url) == (shown != url)


def _settings(url: str) -> Settings:
    return Settings.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Settings",
        "controlPlane": {"url": url, "tokenEnv": "RECONCILE_TOKEN"},
        "mesh": {"gateway": "gateway.test", "clusters": ["sn1"],
                 "signer": {"walletAddress": "rW", "appId": "reconcile",
                            "keyFileEnv": "RECONCILE_SIGNER_KEY"}},
    })


@pytest.mark.parametrize("where", ["settings", "override"])
def test_a_url_with_credentials_is_refused_without_echoing_the_password(
    tmp_path: Path, where: str,
) -> None:
    url = f"https://admin:{SECRET}@cp.example.net"
    if where == "settings":
        # The Settings document refuses it first, at validation, without the value.
        with pytest.raises(ValidationError) as refused:
            _settings(url)
        assert "must not carry credentials" in str(refused.value)
        assert "the value is not shown" in str(refused.value)
        return
    settings = _settings("https://cp.example.net")
    overrides = Overrides(control_plane_url=url)
    with pytest.raises(ConfigError) as info:
        Connection.build(settings, repo_root=tmp_path, overrides=overrides)
    message = str(info.value)
    assert SECRET not in message
    assert "https://admin:***@cp.example.net" in message
    assert "credentials" in message


def test_a_connection_cannot_hold_userinfo() -> None:
    with pytest.raises(ConfigError) as info:
        connection(control_plane_url=f"https://admin:{SECRET}@cp.test")
    assert SECRET not in str(info.value)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _assert_clean(result_out: str, result_err: str, plan_file: Path) -> None:
    assert SECRET not in result_out
    assert SECRET not in result_err
    if plan_file.exists():
        assert SECRET not in plan_file.read_text()


@pytest.mark.integration
@pytest.mark.parametrize("target", ["sandbox", "unreachable"])
def test_plan_with_a_password_in_the_url_never_shows_it(
    tmp_path: Path, sandbox: Sandbox, target: str,
) -> None:
    repo = make_repo(tmp_path, sandbox)
    port = sandbox.control_plane_port if target == "sandbox" else _free_port()
    url = f"https://admin:{SECRET}@127.0.0.1:{port}"
    plan_file = tmp_path / "plan.json"

    by_flag = repo.run("plan", str(repo.path), "--control-plane", url,
                       "--out", str(plan_file))
    _assert_clean(by_flag.out, by_flag.err, plan_file)
    assert by_flag.code != 0, by_flag.out + by_flag.err
    assert "admin:***@" in by_flag.err and "credentials" in by_flag.err, by_flag.err

    by_env = repo.run("plan", str(repo.path), "--out", str(plan_file),
                      RECONCILE_CONTROL_PLANE_URL=url)
    _assert_clean(by_env.out, by_env.err, plan_file)
    assert by_env.code != 0 and "admin:***@" in by_env.err, by_env.out + by_env.err

    applied = repo.run("apply", str(repo.path), "--auto-approve", "--control-plane", url)
    _assert_clean(applied.out, applied.err, plan_file)
    assert applied.code != 0, applied.out + applied.err


@pytest.mark.integration
def test_a_password_in_settings_url_never_shows_either(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path, sandbox)
    settings_file = repo.path / "settings.yaml"
    settings = json.loads(settings_file.read_text())
    settings["controlPlane"]["url"] = (
        f"https://admin:{SECRET}@127.0.0.1:{sandbox.control_plane_port}")
    settings_file.write_text(json.dumps(settings, indent=2) + "\n")
    repo.commit("credentials in the URL")
    plan_file = tmp_path / "plan.json"
    # An empty override variable counts as unset: the settings' URL is the one used.
    result = repo.run("plan", str(repo.path), "--out", str(plan_file),
                      RECONCILE_CONTROL_PLANE_URL="")
    _assert_clean(result.out, result.err, plan_file)
    assert result.code != 0 and "settings.yaml:" in result.err, result.out + result.err
    assert "must not carry credentials" in result.err
