"""A signer key file that is not a key: plan and apply end with a clear error naming the
file and what it looked like (exit 1, nothing sent), never a traceback; ``config``, which
vouches for the same file, says the same problem. Against the real sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.apply.test_apply_e2e import writes
from tests.e2e_repo import Repo, repo

__all__ = ["repo"]

pytestmark = pytest.mark.integration

BAD = {
    "public-half": (b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0 ops@host\n", "public key"),
    "truncated-pem": (b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
                      b"-----END OPENSSH PRIVATE KEY-----\n", "cannot be read"),
    "rsa-sized-hex": (b"ab" * 48 + b"\n", "96 hexadecimal characters"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_plan_and_apply_name_a_bad_key_file_without_a_traceback(
        repo: Repo, sandbox: Sandbox, tmp_path: Path, name: str) -> None:
    data, seen = BAD[name]
    key = tmp_path / f"{name}.key"
    key.write_bytes(data)
    for argv in (["plan", str(repo.path)], ["apply", str(repo.path), "--auto-approve"]):
        done = repo.run(*argv, RECONCILE_SIGNER_KEY=str(key))
        assert done.code == Exit.ERROR, done.out + done.err
        assert "Traceback" not in done.err and "KeyFormatError" not in done.err
        assert len(done.err.strip().splitlines()) <= 3, done.err
        assert f"signer key {str(key)!r}" in done.err and seen in done.err
    assert writes(sandbox) == []
    config = repo.run("config", str(repo.path), RECONCILE_SIGNER_KEY=str(key))
    assert config.code == Exit.ERROR and "no problems" not in config.out
    assert seen in config.out.split("problems", 1)[1]
