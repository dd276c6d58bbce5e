"""Fixtures of the verification tests: the validation tests' reference repo and runner."""

from tests.validation.conftest import repo, validate

__all__ = ["repo", "validate"]
