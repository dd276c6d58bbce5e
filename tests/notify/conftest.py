"""End-to-end fixtures: a committed config repo pointing at a live sandbox; the GitHub
stand-in with the notifier's bot user; and ``reconcile config``'s runner over a copy of
the examples."""

from collections.abc import Iterator

import pytest

from tests.comment.github_standin import StandIn
from tests.e2e_repo import repo, repo_factory
from tests.test_config_command import run

__all__ = ["TOKEN", "github", "repo", "repo_factory", "run"]

#: The token the notifier sends to the stand-in (a secret: never in any output).
TOKEN = "ghp_e2eN0tifyT0ken0123456789abcdefghij"


@pytest.fixture
def github() -> Iterator[StandIn]:
    """The GitHub stand-in over real HTTP, knowing ``TOKEN`` as the bot user."""
    standin = StandIn().start()
    standin.add_user(TOKEN, "reconcile-bot", bot=True)
    yield standin
    standin.stop()
