"""End-to-end fixtures: a committed config repo pointing at a live sandbox."""

from tests.e2e_repo import repo, repo_factory

__all__ = ["repo", "repo_factory"]
