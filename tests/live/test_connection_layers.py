"""Every connection setting through every layer: settings < environment < flags, each
layer able to set it and to unset it (empty value or keyword), through the real flags."""

from __future__ import annotations

import argparse
import copy
import ssl
from pathlib import Path
from typing import Any

import pytest

from reconciler.commands import options
from reconciler.core.desired import Settings
from reconciler.shell.endpoints import ConfigError, Connection, Overrides, ssl_context
from tests.live.fakes import SETTINGS


def settings(**mesh: Any) -> Settings:
    doc = copy.deepcopy(SETTINGS)
    cp = mesh.pop("control_plane", {})
    doc["controlPlane"].update(cp)
    doc["mesh"].update(mesh)
    for section in (doc["controlPlane"], doc["mesh"]):
        for key in [k for k, v in section.items() if v is None]:
            del section[key]
    return Settings.model_validate(doc)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    options.add_connection_flags(p)
    return p


def build(tmp: Path, flags: list[str] | None = None, env: dict[str, str] | None = None,
          doc: Settings | None = None) -> Connection:
    args = parser().parse_args(flags or [])
    overrides = options.overrides_from(args, env=env or {})
    return Connection.build(doc or settings(), repo_root=tmp, overrides=overrides)


def explain(tmp: Path, flags: list[str] | None = None, env: dict[str, str] | None = None,
            doc: Settings | None = None) -> dict[str, str]:
    args = parser().parse_args(flags or [])
    found = Connection.explain(doc or settings(), repo_root=tmp,
                               overrides=options.overrides_from(args, env=env or {}))
    return {k: str(v.source) for k, v in found.values.items()}


@pytest.fixture
def cas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """settings' CA (ca.pem, as SETTINGS names it), an env CA and a flag CA."""
    monkeypatch.chdir(tmp_path)
    files = {}
    for name in ("ca.pem", "env.pem", "flag.pem", "cp.pem", "mesh.pem"):
        (tmp_path / name).write_text("x")
        files[name] = (tmp_path / name).resolve()
    return files


# -- control-plane URL ---------------------------------------------------------------------


def test_url_settings_env_flag(tmp_path: Path, cas: dict[str, Path]) -> None:
    assert build(tmp_path).control_plane_url == "https://127.0.0.1:18443"
    env = {"RECONCILE_CONTROL_PLANE_URL": "https://env.test"}
    assert build(tmp_path, env=env).control_plane_url == "https://env.test"
    assert build(tmp_path, ["--control-plane", "https://flag.test"],
                 env=env).control_plane_url == "https://flag.test"
    # No default to fall back to: an empty value is "not given", never an empty URL.
    assert build(tmp_path, env={"RECONCILE_CONTROL_PLANE_URL": ""}).control_plane_url == (
        "https://127.0.0.1:18443")
    assert build(tmp_path, ["--control-plane", ""], env=env).control_plane_url == (
        "https://env.test")


def test_an_http_control_plane_needs_no_ca_file(tmp_path: Path, cas: dict[str, Path]) -> None:
    missing = settings(control_plane={"caFile": "nowhere/ca.pem"})
    with pytest.raises(ConfigError, match=r"controlPlane\.caFile"):
        build(tmp_path, doc=missing)
    conn = build(tmp_path, ["--control-plane", "http://cp.test:8080", "--allow-insecure-http"],
                 doc=missing)
    assert conn.control_plane_ca is None
    conn = build(tmp_path, env={"RECONCILE_CONTROL_PLANE_URL": "http://127.0.0.1:8080",
                                "RECONCILE_CONTROL_PLANE_CA": "/does/not/exist.pem"})
    assert conn.control_plane_ca is None
    assert "not used" in str(Connection.explain(
        missing, repo_root=tmp_path, overrides=Overrides(control_plane_url="http://x")
    ).values["control_plane_ca"].note)
    # The mesh is always TLS: its CA is still checked.
    with pytest.raises(ConfigError, match=r"mesh\.caFile"):
        build(tmp_path, ["--control-plane", "http://localhost"],
              doc=settings(caFile="nowhere/mesh.pem"))


# -- CAs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("attr", "specific_env", "specific_flag", "settings_key"), [
    ("control_plane_ca", "RECONCILE_CONTROL_PLANE_CA", "--control-plane-ca", "control_plane"),
    ("mesh_ca", "RECONCILE_MESH_CA", "--mesh-ca", "mesh"),
])
def test_each_ca_through_every_layer(tmp_path: Path, cas: dict[str, Path], attr: str,
                                     specific_env: str, specific_flag: str,
                                     settings_key: str) -> None:
    def ca(flags: list[str] | None = None, env: dict[str, str] | None = None,
           doc: Settings | None = None) -> Path | None:
        value: Path | None = getattr(build(tmp_path, flags, env, doc), attr)
        return value

    assert ca() == cas["ca.pem"]  # settings
    assert ca(env={specific_env: "env.pem"}) == cas["env.pem"]
    assert ca(["--" + specific_flag.lstrip("-"), "flag.pem"],
              env={specific_env: "env.pem"}) == cas["flag.pem"]
    # "Both" variable / flag.
    assert ca(env={"RECONCILE_CA_FILE": "env.pem"}) == cas["env.pem"]
    assert ca(["--ca-file", "flag.pem"], env={specific_env: "env.pem"}) == cas["flag.pem"]
    # Within one layer the specific one wins over "both".
    assert ca(env={"RECONCILE_CA_FILE": "flag.pem", specific_env: "env.pem"}) == cas["env.pem"]
    assert ca([specific_flag, "env.pem", "--ca-file", "flag.pem"]) == cas["env.pem"]
    # Unsetting: empty env, keyword, flag keyword over env -> the system trust store.
    assert ca(env={specific_env: ""}) is None
    assert ca(env={"RECONCILE_CA_FILE": "system"}) is None
    assert ca([specific_flag, "system"], env={specific_env: "env.pem"}) is None
    assert ca(["--ca-file", "system"], env={"RECONCILE_CA_FILE": "env.pem"}) is None
    assert ca([specific_flag, ""], env={specific_env: "env.pem"}) is None
    # Settings that say nothing, or say "system".
    none_doc = (settings(control_plane={"caFile": None}) if settings_key == "control_plane"
                else settings(caFile=None))
    assert ca(doc=none_doc) is None
    system_doc = (settings(control_plane={"caFile": "system"})
                  if settings_key == "control_plane" else settings(caFile="system"))
    assert ca(doc=system_doc) is None
    # A missing file is named with where it came from.
    with pytest.raises(ConfigError, match=specific_env):
        ca(env={specific_env: "absent.pem"})
    with pytest.raises(ConfigError, match=specific_flag):
        ca([specific_flag, "absent.pem"])


def test_separate_cas_for_a_public_control_plane_and_a_private_mesh(
        tmp_path: Path, cas: dict[str, Path]) -> None:
    conn = build(tmp_path, ["--control-plane-ca", "system", "--mesh-ca", "mesh.pem"])
    assert conn.control_plane_ca is None and conn.mesh_ca == cas["mesh.pem"]
    sources = explain(tmp_path, ["--control-plane-ca", "system"],
                      env={"RECONCILE_MESH_CA": "mesh.pem"})
    assert sources["control_plane_ca"] == "flag --control-plane-ca (unset: the default applies)"
    assert sources["mesh_ca"] == "env RECONCILE_MESH_CA"


def test_the_system_trust_store_is_a_verifying_context() -> None:
    context = ssl_context(None)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname


# -- gateway -------------------------------------------------------------------------------


def test_gateway_settings_env_flag(tmp_path: Path, cas: dict[str, Path]) -> None:
    assert build(tmp_path).gateway == "gateway.sandbox.test"
    env = {"RECONCILE_GATEWAY": "GW.Env.Test."}
    assert build(tmp_path, env=env).gateway == "gw.env.test"
    assert build(tmp_path, ["--gateway", "gw.flag.test"], env=env).gateway == "gw.flag.test"
    assert build(tmp_path, env={"RECONCILE_GATEWAY": ""}).gateway == "gateway.sandbox.test"


# -- mesh port -----------------------------------------------------------------------------


def test_mesh_port_through_every_layer(tmp_path: Path, cas: dict[str, Path]) -> None:
    assert build(tmp_path).mesh_port == 18444
    assert build(tmp_path, env={"RECONCILE_MESH_PORT": "9443"}).mesh_port == 9443
    assert build(tmp_path, ["--mesh-port", "8443"],
                 env={"RECONCILE_MESH_PORT": "9443"}).mesh_port == 8443
    assert build(tmp_path, env={"RECONCILE_MESH_PORT": ""}).mesh_port == 443
    assert build(tmp_path, ["--mesh-port", "default"],
                 env={"RECONCILE_MESH_PORT": "9443"}).mesh_port == 443
    with pytest.raises(ConfigError, match="RECONCILE_MESH_PORT: port 'x' is not a number"):
        build(tmp_path, env={"RECONCILE_MESH_PORT": "x"})
    with pytest.raises(ConfigError, match="--mesh-port: port 70000 is outside"):
        build(tmp_path, ["--mesh-port", "70000"])
    # Changing the port keeps the settings' static addresses.
    conn = build(tmp_path, ["--mesh-port", "8443"])
    assert conn.static_addresses == ("127.0.0.2", "127.0.0.3", "127.0.0.4")


# -- static addresses / DNS ----------------------------------------------------------------


def test_resolve_through_every_layer(tmp_path: Path, cas: dict[str, Path]) -> None:
    settings_list = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    assert build(tmp_path).static_addresses == settings_list
    env = {"RECONCILE_RESOLVE": "gateway.sandbox.test:18444:127.0.0.8"}
    assert build(tmp_path, env=env).static_addresses == ("127.0.0.8",)
    assert build(tmp_path, ["--resolve", "gateway.sandbox.test:18444:127.0.0.9"],
                 env=env).static_addresses == ("127.0.0.9",)
    # Unsetting: DNS, even though the settings list addresses.
    assert build(tmp_path, env={"RECONCILE_RESOLVE": ""}).static_addresses is None
    assert build(tmp_path, env={"RECONCILE_RESOLVE": "none"}).static_addresses is None
    assert build(tmp_path, ["--resolve", "none"], env=env).static_addresses is None
    assert build(tmp_path, ["--resolve", ""], env=env).static_addresses is None
    assert build(tmp_path, ["--resolve", "NONE"]).mesh_port == 18444  # port untouched
    # A gateway override alone keeps the static list when the settings give one...
    assert build(tmp_path, ["--gateway", "gw.other.test"]).static_addresses == settings_list
    # ...and `--resolve none` with it asks DNS for the new name.
    conn = build(tmp_path, ["--gateway", "gw.other.test", "--resolve", "none"])
    assert conn.static_addresses is None and conn.gateway == "gw.other.test"
    assert build(tmp_path, doc=settings(resolve=None)).static_addresses is None


def test_resolve_port_is_the_port_dialled_and_weighed_by_layer(
        tmp_path: Path, cas: dict[str, Path]) -> None:
    gw = "gateway.sandbox.test"
    # PORT of --resolve counts as a mesh port at its layer: it wins over the settings'.
    assert build(tmp_path, ["--resolve", f"{gw}:2443:127.0.0.9"]).mesh_port == 2443
    # A higher layer's --mesh-port wins over a lower layer's --resolve PORT.
    assert build(tmp_path, ["--mesh-port", "9443"],
                 env={"RECONCILE_RESOLVE": f"{gw}:2443:127.0.0.9"}).mesh_port == 9443
    # ...and a higher layer's --resolve PORT over a lower layer's --mesh-port.
    assert build(tmp_path, ["--resolve", f"{gw}:2443:127.0.0.9"],
                 env={"RECONCILE_MESH_PORT": "9443"}).mesh_port == 2443
    # The same layer must agree.
    assert build(tmp_path, ["--mesh-port", "2443", "--resolve", f"{gw}:2443:127.0.0.9"]
                 ).mesh_port == 2443
    with pytest.raises(ConfigError, match="--mesh-port says port 9443 and --resolve says"):
        build(tmp_path, ["--mesh-port", "9443", "--resolve", f"{gw}:2443:127.0.0.9"])
    with pytest.raises(ConfigError, match="RECONCILE_MESH_PORT says port 1"):
        build(tmp_path, env={"RECONCILE_MESH_PORT": "1",
                             "RECONCILE_RESOLVE": f"{gw}:2443:127.0.0.9"})
    sources = explain(tmp_path, ["--resolve", f"{gw}:2443:127.0.0.9"])
    assert sources["mesh_port"] == "flag --resolve"
    with pytest.raises(ConfigError, match=r"names host 'other\.test'"):
        build(tmp_path, ["--resolve", "other.test:1:127.0.0.1"])


def test_every_problem_is_reported_at_once(tmp_path: Path, cas: dict[str, Path]) -> None:
    with pytest.raises(ConfigError) as info:
        build(tmp_path, ["--mesh-port", "x", "--mesh-ca", "absent.pem"],
              env={"RECONCILE_CONTROL_PLANE_CA": "absent.pem"})
    message = str(info.value)
    assert "--mesh-port" in message and "--mesh-ca" in message
    assert "RECONCILE_CONTROL_PLANE_CA" in message


def test_sources_name_settings_env_flag_and_default(tmp_path: Path, cas: dict[str, Path]) -> None:
    sources = explain(tmp_path, ["--gateway", "gw.flag.test", "--resolve", "none"],
                      env={"RECONCILE_CONTROL_PLANE_URL": "https://env.test",
                           "RECONCILE_MESH_PORT": ""}, doc=settings())
    assert sources["control_plane_url"] == "env RECONCILE_CONTROL_PLANE_URL"
    assert sources["gateway"] == "flag --gateway"
    assert sources["static_addresses"] == "flag --resolve (unset: the default applies)"
    assert sources["mesh_port"] == "env RECONCILE_MESH_PORT (unset: the default applies)"
    assert sources["control_plane_ca"] == "settings controlPlane.caFile"
    assert sources["wallet_address"] == "settings mesh.signer.walletAddress"


# -- plain http beyond loopback --------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://cp.test:8080", "http://10.0.0.5", "http://[2001:db8::1]:80",
                                 "http://localhost.evil.test", "HTTP://cp.test"])
def test_plain_http_beyond_loopback_is_refused_without_an_explicit_allow(
        tmp_path: Path, cas: dict[str, Path], url: str) -> None:
    layers: list[tuple[list[str] | None, dict[str, str] | None]] = [
        (["--control-plane", url], None), (None, {"RECONCILE_CONTROL_PLANE_URL": url})]
    for flags, env in layers:
        if url.startswith("HTTP"):  # not http:// at all: the scheme check refuses it
            with pytest.raises(ConfigError, match="must start with"):
                build(tmp_path, flags, env)
            continue
        with pytest.raises(ConfigError, match="clear text") as refused:
            build(tmp_path, flags, env)
        message = str(refused.value)
        assert "--allow-insecure-http" in message and "RECONCILE_ALLOW_INSECURE_HTTP" in message
        assert "not a loopback host" in message


@pytest.mark.parametrize("url", ["http://127.0.0.1:18443", "http://127.9.8.7", "http://[::1]:80",
                                 "http://localhost:8080", "http://api.localhost", "https://cp.test"])
def test_loopback_http_and_https_need_no_allow(tmp_path: Path, cas: dict[str, Path],
                                               url: str) -> None:
    conn = build(tmp_path, ["--control-plane", url])
    assert conn.control_plane_url == url


def test_the_allow_comes_from_the_flag_or_the_environment_and_can_be_unset(
        tmp_path: Path, cas: dict[str, Path]) -> None:
    url = ["--control-plane", "http://cp.test:8080"]
    assert build(tmp_path, [*url, "--allow-insecure-http"]).control_plane_url.startswith("http:")
    for word in ("1", "true", "YES", "on"):
        assert build(tmp_path, url, env={"RECONCILE_ALLOW_INSECURE_HTTP": word})
    for word in ("0", "false", "no", ""):
        with pytest.raises(ConfigError, match="clear text"):
            build(tmp_path, url, env={"RECONCILE_ALLOW_INSECURE_HTTP": word})
    with pytest.raises(ConfigError, match="expected 1, true or yes"):
        build(tmp_path, [*url], env={"RECONCILE_ALLOW_INSECURE_HTTP": "maybe"})
    # The flag wins over an environment that refuses.
    assert build(tmp_path, [*url, "--allow-insecure-http"],
                 env={"RECONCILE_ALLOW_INSECURE_HTTP": "0"})
    shown = Connection.explain(settings(), repo_root=tmp_path, overrides=options.overrides_from(
        parser().parse_args(url), env={"RECONCILE_ALLOW_INSECURE_HTTP": "1"}))
    allowed = shown.values["allow_insecure_http"]
    assert allowed.value is True and str(allowed.source) == "env RECONCILE_ALLOW_INSECURE_HTTP"
    assert "clear text" in allowed.note
