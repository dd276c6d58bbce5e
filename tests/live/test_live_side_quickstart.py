"""docs/live-side.md, run: the quick start for a live side other than the sandbox.

A sandbox is started on other ports, another gateway name and with its CA somewhere the
reference settings do not point; the reference repo is copied unedited into a git repo;
the doc's shell block is run by bash with each ``export``'s value replaced by this live
side's (the variable *names* and their order are the doc's, and nothing else is set), and
plan must read every cluster. A second run clears the settings' static addresses with the
doc's ``RECONCILE_RESOLVE=`` and answers the DNS question in-process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from reconciler.sandbox.launcher import Sandbox
from reconciler.shell.keys import load_signer_key
from tests.e2e_repo import EXAMPLES
from tests.repo_copy import committed_copy

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "live-side.md"
GATEWAY = "mesh.live-side.test"
EXPORT = re.compile(r"^export (RECONCILE_[A-Z_]+)=(\"[^\"]*\"|\S*)", re.MULTILINE)

#: Registers ``config`` when the CLI does not list it yet, then runs the CLI.
SHIM = ("import sys; from reconciler import cli; m = 'reconciler.commands.config'; "
        "cli.COMMAND_MODULES = cli.COMMAND_MODULES + ((m,) if m not in cli.COMMAND_MODULES "
        "else ()); sys.exit(cli.main(sys.argv[1:]))")


def doc_block() -> str:
    text = DOC.read_text()
    match = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert match, "docs/live-side.md has no ```sh block"
    return match.group(1)


def reference_repo(tmp: Path) -> Path:
    repo = committed_copy(EXAMPLES, tmp / "config", "the reference desired state, unedited")
    assert (repo / "settings.yaml").read_bytes() == (EXAMPLES / "settings.yaml").read_bytes()
    return repo


def live_side(sb: Sandbox, tmp: Path) -> dict[str, str]:
    """This live side's value for every variable the doc exports."""
    ca = tmp / "elsewhere" / "mesh-and-cp-ca.pem"
    ca.parent.mkdir()
    shutil.copy(sb.ca_file, ca)
    # The key as `ssh-keygen -t ed25519 -N ''` would write it (the sandbox's key pair).
    key = load_signer_key(sb.signer_key_file)
    ssh_key = tmp / "elsewhere" / "reconcile_ed25519"
    ssh_key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    ssh_key.chmod(0o600)
    token = tmp / "elsewhere" / "token"
    token.write_text(sb.token + "\n")
    return {
        "RECONCILE_CONTROL_PLANE_URL": sb.control_plane_url,
        "RECONCILE_CONTROL_PLANE_CA": str(ca),
        "RECONCILE_TOKEN": f'"$(cat {token})"',
        "RECONCILE_GATEWAY": sb.gateway,
        "RECONCILE_MESH_PORT": str(sb.mesh_port),
        "RECONCILE_MESH_CA": str(ca),
        # The doc's alternative to DNS (this gateway name is in no DNS):
        "RECONCILE_RESOLVE": f"{sb.gateway}:{sb.mesh_port}:{','.join(sb.addresses.values())}",
        "RECONCILE_SIGNER_KEY": str(ssh_key),
    }


def start_elsewhere(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    sb = sandbox_factory(gateway=GATEWAY)  # free ports: never the settings' 18443/18444
    assert sb.control_plane_port != 18443 and sb.mesh_port != 18444
    return sb


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
    env.update(NO_COLOR="1", HOME=str(tmp))
    return env


def test_the_doc_block_plans_against_a_live_side_the_settings_do_not_name(
        sandbox_factory: Callable[..., Sandbox], tmp_path: Path) -> None:
    sb = start_elsewhere(sandbox_factory)
    repo = reference_repo(tmp_path)
    values = live_side(sb, tmp_path)
    block = doc_block()
    named = EXPORT.findall(block)
    assert [name for name, _ in named] == list(values), "the doc's variables changed"

    script = EXPORT.sub(lambda m: f"export {m.group(1)}={values[m.group(1)]}", block)
    script = re.sub(r"^reconcile ", "reconcile_cli ", script, flags=re.MULTILINE)
    script = (f"set -e\nreconcile_cli() {{ {sys.executable} -c \"{SHIM}\" \"$@\"; }}\n"
              + script.replace("reconcile_cli plan", "reconcile_cli plan --format json"))
    proc = subprocess.run(["bash", "-c", script], cwd=repo, env=clean_env(tmp_path),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert sb.token not in proc.stdout + proc.stderr

    config_text, _, plan_json = proc.stdout.partition("\n{")
    assert "env RECONCILE_CONTROL_PLANE_URL" in config_text
    assert "env RECONCILE_MESH_PORT" in config_text and str(sb.mesh_port) in config_text
    assert "$RECONCILE_TOKEN is set" in config_text
    plan = json.loads("{" + plan_json)
    assert plan["verdict"] == "go", proc.stdout
    observed = json.dumps(plan)
    for cluster in ("sn1", "sn2", "sn3"):
        assert cluster in observed
    assert GATEWAY in observed and "gateway.sandbox.test" not in observed


def test_an_empty_resolve_clears_the_settings_addresses_and_asks_dns(
        sandbox_factory: Callable[..., Sandbox], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reconciler import cli
    from reconciler.shell.probing import resolving

    sb = start_elsewhere(sandbox_factory)
    repo = reference_repo(tmp_path)
    values = live_side(sb, tmp_path)
    values["RECONCILE_TOKEN"] = sb.token
    values["RECONCILE_RESOLVE"] = ""  # the doc's line as written: DNS
    asked: list[tuple[str, int]] = []

    async def dns(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return list(sb.addresses.values()) if host == GATEWAY else []

    for name in [k for k in os.environ if k.startswith("RECONCILE_")]:
        monkeypatch.delenv(name)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(resolving, "system_resolver", dns)
    monkeypatch.chdir(repo)
    assert cli.main(["plan", "--format", "json", "--detailed-exitcode"]) == 2
    plan = json.loads(capsys.readouterr().out)
    assert plan["verdict"] == "go"
    assert asked == [(GATEWAY, sb.mesh_port)]
