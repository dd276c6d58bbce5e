"""No parser accepts an abbreviated flag: ``apply --auto`` is a usage error (64) that
names ``--auto-approve``, never an apply. Checked for every command and subcommand the
CLI builds, and for the parsers the sandbox and the schema generator run on their own."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler import cli, schemagen
from reconciler.commands import history
from reconciler.exitcodes import Exit
from reconciler.sandbox import cluster, controlplane
from tests.test_cli_help import parsers


def prefixes(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(flag, a strict prefix of it that is no flag of the parser) for every long flag."""
    known = set(parser._option_string_actions)
    for flag in sorted(known):
        if not flag.startswith("--") or len(flag) < 5:
            continue
        prefix = flag[:-1]
        while prefix in known and len(prefix) > 3:
            prefix = prefix[:-1]
        if prefix not in known and len(prefix) > 3:
            yield flag, prefix


# Paths without the program's name: ("apply",), ("sandbox", "up"), ...
ALL = [(path[1:], parser) for path, parser in parsers(cli.build_parser())]


def test_every_command_is_checked() -> None:
    commands = {path[0] for path, _ in ALL if path}
    assert {"validate", "plan", "apply", "show", "config", "comment", "watch", "history",
            "pin", "sandbox", "completion"} <= commands
    assert ("sandbox", "up") in {path for path, _ in ALL}


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "root")
def test_no_parser_takes_a_prefix_for_a_flag(path: tuple[str, ...]) -> None:
    parser = dict(ALL)[path]
    assert parser.allow_abbrev is False
    checked = 0
    for flag, prefix in prefixes(parser):
        # argparse's own lookup: an abbreviation would come back as the flag's action.
        found = parser._parse_optional(prefix)
        assert found is not None and found[0] is None, (path, prefix, flag)
        checked += 1
    assert checked or not [f for f in parser._option_string_actions if f.startswith("--")
                           and len(f) >= 5 and f not in ("--help",)], path


@pytest.mark.parametrize("path", [p for p, _ in ALL if p], ids=" ".join)
def test_a_prefix_on_the_command_line_is_a_usage_error(
        path: tuple[str, ...], capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through ``cli.main``: exit 64, and the prefix is named unrecognised
    (or argparse stops earlier at a missing argument); never run as the longer flag."""
    monkeypatch.chdir(tmp_path)  # nothing to find here, whatever got through
    parser = dict(ALL)[path]
    for _flag, prefix in list(prefixes(parser))[:40]:
        code = cli.main([*path, prefix])
        err = capsys.readouterr().err
        assert code == Exit.USAGE, (path, prefix, err)
        assert f"unrecognized argument: {prefix}" in err or "required" in err, err


def test_apply_auto_is_not_auto_approve(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    code = cli.main(["apply", "--auto", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == Exit.USAGE
    assert "unrecognized argument: --auto" in err
    assert "did you mean --auto-approve?" in err
    code = cli.main(["plan", "--detailed", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == Exit.USAGE and "did you mean --detailed-exitcode?" in err


def test_the_full_flag_still_parses() -> None:
    args = cli.build_parser().parse_args(["apply", "--auto-approve", "."])
    assert args.auto_approve is True


@pytest.mark.parametrize(("main", "argv"), [
    (controlplane.main, ["--stat", "x"]),
    (cluster.main, ["--stat", "x", "--id", "sn1"]),
    (schemagen.main, ["--chec"]),
    (history.main, ["--jour", "x"]),
])
def test_the_standalone_parsers_take_no_prefix_either(
        main: object, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(main)
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err or "required" in err, err
