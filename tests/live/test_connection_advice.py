"""Errors that name the fix (the real sandbox over real TLS, the real CLI): ``http://``
against the HTTPS control plane says so and says ``https://``; a certificate that does not
verify names the CA file in use and where it was set (flag, env or settings); neither is
retried (retrying cannot help); the sandbox hint appears only for a loopback URL."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox import pki
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell.connectadvice import next_step
from reconciler.shell.controlplane.errors import TlsVerificationFailed, TransportError
from tests.e2e_repo import PROJECT, Repo, git, repo

__all__ = ["repo"]  # the fixture
from tests.live.fakes import connection


def other_ca(tmp_path: Path) -> Path:
    """A CA that signed nothing the sandbox serves."""
    path = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(path), "-subj", "/CN=another CA", "-days", "2"],
                   check=True, capture_output=True)
    return path


@pytest.mark.integration
def test_http_against_the_https_control_plane_says_use_https_once(
        repo: Repo, sandbox: Sandbox) -> None:
    url = sandbox.control_plane_url
    plain = url.replace("https://", "http://")
    started = time.monotonic()
    done = repo.run("plan", str(repo.path), RECONCILE_CONTROL_PLANE_URL=plain, timeout=60)
    assert done.code == Exit.ERROR, done.out + done.err
    assert "speaks TLS (HTTPS), but the URL says http://" in done.err
    assert f"use {url} as the control plane URL" in done.err
    assert "(set by env RECONCILE_CONTROL_PLANE_URL)" in done.err
    assert "attempts" not in done.err and "ReadError" not in done.err
    assert "sandbox up" not in done.err
    assert time.monotonic() - started < 30


@pytest.mark.integration  # starts a process of its own
@pytest.mark.integration
def test_a_certificate_that_does_not_verify_names_the_ca_and_where_it_was_set(
        repo: Repo, sandbox: Sandbox, tmp_path: Path) -> None:
    wrong = other_ca(tmp_path)
    by_env = repo.run("plan", str(repo.path), RECONCILE_CA_FILE=str(wrong), timeout=60)
    assert by_env.code == Exit.ERROR
    assert "the server's certificate did not verify" in by_env.err
    assert f"not signed by the CA in {wrong} (set by env RECONCILE_CA_FILE)" in by_env.err
    assert "--control-plane-ca PATH" in by_env.err and "retrying cannot help" in by_env.err
    assert "attempts" not in by_env.err  # not retried three times

    by_flag = repo.run("plan", str(repo.path), "--control-plane-ca", str(wrong), timeout=60)
    assert f"the CA in {wrong} (set by flag --control-plane-ca)" in by_flag.err

    # In the settings: the env's CA removed, the repo's settings name the wrong one.
    settings = json.loads((repo.path / "settings.yaml").read_text())
    settings["controlPlane"]["caFile"] = str(wrong)
    (repo.path / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")
    git(repo.path, "commit", "-qam", "the wrong CA")
    env = {k: v for k, v in repo.env().items() if k != "RECONCILE_CA_FILE"}
    by_settings = subprocess.run([sys.executable, "-m", "reconciler", "plan", str(repo.path)],
                                 cwd=PROJECT, env=env, capture_output=True, text=True,
                                 timeout=60)
    assert f"the CA in {wrong} (set by settings controlPlane.caFile)" in by_settings.stderr

    system = repo.run("plan", str(repo.path), "--control-plane-ca", "system", timeout=60)
    assert "not signed by the system trust store (set by flag --control-plane-ca" \
        in system.err
    assert (sandbox.state_dir / pki.CA_FILE).exists()  # the right one was there all along


def test_the_sandbox_hint_is_only_for_a_loopback_url() -> None:
    refused = TransportError("getIdentityByToken: unreachable: connection refused",
                             transient=True)
    local = next_step(refused, connection(control_plane_url="https://127.0.0.1:18443"))
    assert "reconcile sandbox up" in local
    remote = next_step(refused, connection(control_plane_url="https://cp.example.net"))
    assert "sandbox" not in remote and "cp.example.net" in remote


def test_a_hostname_mismatch_says_to_use_the_name_on_the_certificate() -> None:
    failed = TlsVerificationFailed("getIdentityByToken: TLS: the server's certificate did "
                                   "not verify (Hostname mismatch)", hostname_mismatch=True)
    said = next_step(failed, connection(control_plane_url="https://10.1.2.3:8443"))
    assert "does not name 10.1.2.3" in said and "CA" not in said
