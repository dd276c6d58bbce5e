"""``--only`` on plan and apply: one comma-separated value, repeatable; a path after it
stays the path; an empty or unknown name is a usage error (64)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from reconciler import cli
from reconciler.commands import selection
from reconciler.exitcodes import Exit
from tests.e2e_repo import Repo, repo

__all__ = ["repo"]


def parse(*argv: str) -> tuple[argparse.Namespace, frozenset[str]]:
    args = cli.build_parser().parse_args(list(argv))
    return args, selection.only_from(args)


@pytest.mark.parametrize("command", ["plan", "apply"])
def test_comma_lists_and_repeats(command: str) -> None:
    _, only = parse(command, "--only", "checkout,search", "--only", "catalog")
    assert only == {"checkout", "search", "catalog"}
    _, only = parse(command, "--only=checkout, search")
    assert only == {"checkout", "search"}
    _, only = parse(command)
    assert only == frozenset()


def test_a_path_after_only_stays_the_path() -> None:
    args, only = parse("apply", "--only", "checkout", "some/dir")
    assert only == {"checkout"} and args.target == "some/dir"
    args, only = parse("plan", "--only", "checkout,search", "some/dir")
    assert only == {"checkout", "search"} and args.path == "some/dir"


@pytest.mark.parametrize("value", ["a,,b", "", ",", "checkout,"])
def test_an_empty_name_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "--only", value, "."]) == Exit.USAGE
    assert "none empty" in capsys.readouterr().err


def test_only_with_out_is_a_usage_error(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--only", "checkout", "--out", str(tmp_path / "p.json"), str(tmp_path)]
    assert cli.main(argv) == Exit.USAGE
    assert "--only cannot be combined with --out" in capsys.readouterr().err


def test_unknown_names_are_listed_with_the_names_there_are() -> None:
    assert selection.unknown_names({"a", "zz", "b"}, ["a", "b", "c"]) == ["zz"]
    assert selection.unknown_message(["zz"], ["b", "a"]) == (
        "--only names no service of this repo: zz (services: a, b)")


# --- against a sandbox ----------------------------------------------------------------------

def test_plan_only_shows_the_named_services(repo: Repo) -> None:
    full = repo.run("plan", "--format", "json", str(repo.path))
    assert full.code == Exit.OK, full.err
    every = {c["service"] for c in json.loads(full.out)["changes"]}
    assert len(every) > 1
    pick = sorted(every)[0]
    only = repo.run("plan", "--format", "json", "--only", pick, str(repo.path))
    assert only.code == Exit.OK, only.err
    plan = json.loads(only.out)
    assert {c["service"] for c in plan["changes"]} == {pick}
    assert {e["service"] for e in plan["evidence"]} == {pick}


def test_plan_only_an_unknown_name_exits_64(repo: Repo) -> None:
    result = repo.run("plan", "--only", "checkout,serch", str(repo.path))
    assert result.code == Exit.USAGE, result.out + result.err
    assert "serch" in result.err and "checkout" in result.err


def test_apply_only_then_path_reads_that_path(repo: Repo) -> None:
    """Run from the project (no desired state there): the repo named after --only is read,
    so the unknown name is judged against its services."""
    result = repo.run("apply", "--auto-approve", "--only", "nosuch", str(repo.path))
    assert result.code == Exit.USAGE, result.out + result.err
    assert "nosuch" in result.err and "problem" not in result.err
