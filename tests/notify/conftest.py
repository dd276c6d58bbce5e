"""End-to-end fixtures: a committed config repo pointing at a live sandbox; and
``reconcile config``'s runner over a copy of the examples."""

from tests.e2e_repo import repo, repo_factory
from tests.test_config_command import run

__all__ = ["repo", "repo_factory", "run"]
