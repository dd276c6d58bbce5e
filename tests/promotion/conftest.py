"""The promotion scenarios' GitHub stand-in over real HTTP, knowing the comment tests'
bot token (``promote --pr`` and ``watch --promote-from`` open pull requests on it)."""

from collections.abc import Iterator

import pytest

from tests.comment.conftest import BOT, TOKEN
from tests.comment.github_standin import StandIn


@pytest.fixture
def standin() -> Iterator[StandIn]:
    server = StandIn("").start()
    server.add_user(TOKEN, BOT, bot=True)
    try:
        yield server
    finally:
        server.stop()
