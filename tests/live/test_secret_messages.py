"""Messages about secrets never carry them: a seed pasted where a path belongs, a bad URL."""

from __future__ import annotations

import pytest

from reconciler.shell import github, observing
from reconciler.shell.endpoints import ConfigError
from tests.live.fakes import connection


def test_a_seed_pasted_where_the_signer_key_path_belongs_is_not_echoed() -> None:
    conn = connection()
    seed = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    with pytest.raises(ConfigError) as info:
        observing.signer_key_path(conn, {conn.signer_key_env: seed})
    message = str(info.value)
    assert seed not in message and "value is not shown" in message and "PATH" in message


def test_a_malformed_github_api_url_is_a_clear_error_not_a_traceback() -> None:
    with pytest.raises(github.GitHubError, match="malformed"):
        github.check_api_url("http://[::1", with_token=True)
