"""The promotion scenarios' GitHub stand-in over real HTTP, knowing the comment tests'
bot token (``promote --pr`` and ``watch --promote-from`` open pull requests on it), and
the soaked pipeline the freeze and hold scenarios start from."""

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.sandbox.launcher import Sandbox
from tests.comment.conftest import _serve
from tests.comment.github_standin import StandIn
from tests.promotion.pipeline_repo import PipelineRepo, make_pipeline_repo
from tests.promotion.test_soak_e2e import apply


@pytest.fixture
def standin() -> Iterator[StandIn]:
    yield from _serve("")


@pytest.fixture
def soaked(tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> PipelineRepo:
    """Staging proves the example's checkout digest; prod's soak (1s) is over."""
    repo = make_pipeline_repo(tmp_path, sandbox_factory(name="staging"),
                              sandbox_factory(name="prod"), soak="1s")
    apply(repo, "staging")
    time.sleep(1.1)
    return repo
