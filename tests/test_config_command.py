"""``reconcile config``: effective connection values, each with its source; secrets never."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler import cli
from reconciler.exitcodes import Exit
from reconciler.sandbox import pki

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "desired-state"
TOKEN = "canary-token-5e1f0c9a7b3d"
KEY_PATH_CANARY = "canary-keydir-91b2"
MODULE = "reconciler.commands.config"


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path):  # type: ignore[no-untyped-def]
    if MODULE not in cli.COMMAND_MODULES:  # until cli.py lists it
        monkeypatch.setattr(cli, "COMMAND_MODULES", (*cli.COMMAND_MODULES, MODULE))
    for name in [k for k in os.environ if k.startswith("RECONCILE_")]:
        monkeypatch.delenv(name)
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    pki.ensure_ca(tmp_path)  # a real CA bundle and a real key: config loads both
    ca = tmp_path / pki.CA_FILE
    key_dir = tmp_path / KEY_PATH_CANARY
    key_dir.mkdir()
    (key_dir / "signer").write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    monkeypatch.setenv("RECONCILE_TOKEN", TOKEN)
    monkeypatch.setenv("RECONCILE_SIGNER_KEY", str(key_dir / "signer"))
    monkeypatch.setenv("RECONCILE_CA_FILE", str(ca))
    monkeypatch.chdir(tmp_path)

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["config", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    invoke.repo = repo  # type: ignore[attr-defined]
    invoke.ca = ca  # type: ignore[attr-defined]
    return invoke


def test_text_names_each_source_and_redacts_secrets(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RECONCILE_MESH_PORT", "9443")
    code, out, err = run("repo", "--resolve", "none", "--control-plane-ca", "system")
    assert code == Exit.OK, err
    assert TOKEN not in out + err and KEY_PATH_CANARY not in out + err
    assert "$RECONCILE_TOKEN is set (value never shown)" in out
    assert "$RECONCILE_SIGNER_KEY is set, names an existing file (value never shown)" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "settings.yaml:7 controlPlane.url" in lines["url"]
    assert "flag --control-plane-ca (unset: the default applies)" in out
    assert "env RECONCILE_MESH_PORT" in lines["port"] and "9443" in lines["port"]
    assert "DNS (system resolver)" in lines["addresses"]
    assert "flag --resolve (unset: the default applies)" in lines["addresses"]
    assert "env RECONCILE_CA_FILE" in out  # the mesh CA, from the "both" variable
    assert "settings.yaml:17 mesh.signer.walletAddress" in out
    assert "mesh.concurrency not written (its default)" in out
    assert "no problems" in out


def test_json_has_values_sources_and_no_secret(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RECONCILE_CONTROL_PLANE_URL", f"https://bot:{TOKEN}@cp.example.net")
    code, out, _ = run("repo", "--format", "json")
    report = json.loads(out)
    assert TOKEN not in out and KEY_PATH_CANARY not in out
    values = report["values"]
    assert code == Exit.ERROR and not report["usable"]
    assert any("carries credentials" in p for p in report["problems"])
    assert values["control_plane_url"]["value"] == "https://bot:***@cp.example.net"
    assert values["control_plane_url"]["source"] == {
        "kind": "env", "name": "RECONCILE_CONTROL_PLANE_URL"}
    assert values["mesh_port"]["source"] == {"kind": "settings", "name": "mesh.port",
                                             "file": "settings.yaml", "line": 12}
    assert values["static_addresses"]["value"] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert values["token_env"]["value"] == "RECONCILE_TOKEN" and values["token_env"]["set"]
    assert values["signer_key_env"] == {
        "value": "RECONCILE_SIGNER_KEY", "set": True, "file_exists": True,
        "source": {"kind": "settings", "name": "mesh.signer.keyFileEnv",
                   "file": "settings.yaml", "line": 19}}


def test_unset_secrets_and_problems_are_listed(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("RECONCILE_TOKEN")
    monkeypatch.setenv("RECONCILE_SIGNER_KEY", "/nowhere/key")
    monkeypatch.delenv("RECONCILE_CA_FILE")
    code, out, _ = run("repo", "--mesh-port", "x")
    assert code == Exit.ERROR
    assert "$RECONCILE_TOKEN is NOT set" in out
    assert "$RECONCILE_SIGNER_KEY is set, names no existing file" in out
    assert "/nowhere/key" not in out
    problems = out.split("problems", 1)[1]
    assert "controlPlane.caFile" in problems and "mesh.caFile" in problems
    assert "--mesh-port: port 'x' is not a number" in problems


def test_found_from_a_subdirectory(run) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run("repo/services")
    assert code == Exit.OK, err
    assert "settings.yaml:11 mesh.gateway" in out


def test_no_settings_is_an_error(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run("empty")
    assert code == Exit.ERROR and "Settings" in err


# -- config vouches only for what loads ------------------------------------------------------

MALFORMED_KEYS = {
    "public-key": b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0 someone@host\n",
    "short-hex": b"abcd" * 8 + b"\n",
    "garbage-pem": b"-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n",
    "text": b"this is not a key\n",
}


@pytest.mark.parametrize("name", list(MALFORMED_KEYS))
def test_a_malformed_signer_key_is_a_problem_not_no_problems(
        run, monkeypatch, tmp_path: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / f"bad-{name}.key"
    bad.write_bytes(MALFORMED_KEYS[name])
    monkeypatch.setenv("RECONCILE_SIGNER_KEY", str(bad))
    code, out, _ = run("repo")
    assert code == Exit.ERROR
    assert "no problems" not in out
    problems = out.split("problems (plan, apply and watch would stop here):", 1)[1]
    assert "RECONCILE_SIGNER_KEY" in problems and str(bad) in problems and "saw " in problems
    code, out, _ = run("repo", "--format", "json")
    report = json.loads(out)
    assert code == Exit.ERROR and not report["usable"]
    assert any("saw " in p for p in report["problems"])


def test_a_ca_file_that_does_not_load_is_a_problem(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    code, out, _ = run("repo", "--mesh-ca", str(junk))
    assert code == Exit.ERROR
    problems = out.split("problems", 1)[1]
    assert "mesh CA" in problems and "cannot be loaded" in problems and str(junk) in problems
    assert "controlPlane CA" not in problems  # that one (the real CA) loads


def test_an_unset_token_is_a_problem(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("RECONCILE_TOKEN")
    code, out, _ = run("repo")
    assert code == Exit.ERROR and "no problems" not in out
    assert "control-plane token is missing" in out.split("problems", 1)[1]


def test_the_journal_path_and_what_chose_it(run, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    code, out, _ = run("repo", "--format", "json")
    assert code == Exit.OK
    journal = json.loads(out)["values"]["journal"]
    assert journal["source"]["kind"] == "default"
    assert journal["value"].startswith(str(tmp_path / "xdg" / "reconcile"))
    assert journal["value"].endswith("/journal.jsonl")

    settings = run.repo / "settings.yaml"
    settings.write_text(settings.read_text() + "stateDir: ../state\n")
    line = len(settings.read_text().splitlines())
    code, out, _ = run("repo")
    assert code == Exit.OK
    row = next(x for x in out.splitlines() if x.strip().startswith("journal"))
    assert str((run.repo / ".." / "state").resolve() / "journal.jsonl") in row
    assert f"settings.yaml:{line} stateDir" in row

    monkeypatch.setenv("RECONCILE_STATE_DIR", str(tmp_path / "elsewhere"))
    code, out, _ = run("repo")
    assert code == Exit.OK
    row = next(x for x in out.splitlines() if x.strip().startswith("journal"))
    assert str(tmp_path / "elsewhere" / "journal.jsonl") in row
    assert "env RECONCILE_STATE_DIR" in row
