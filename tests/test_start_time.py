"""Start time: building the parser loads no planner, no models and no HTTP stack.

``reconcile --version`` and ``--help`` import no command module (the others are stubs
named and helped from ``cli.COMMANDS``), ``reconcile plan --help`` imports only its own,
and ``completion`` builds every command's parser. A command that imported the engine,
pydantic or httpx at the top of its module would make them pay for it (0.65 s of CPU
where a bare interpreter takes 0.02 s). Each case runs a fresh interpreter and lists what
it imported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from reconciler import cli

#: What only running a command may load (the prefix matches the package's submodules).
HEAVY = ("httpx", "pydantic", "reconciler.core.planning", "reconciler.engine",
         "reconciler.core.plans", "croniter", "githubkit", "ruamel", "cryptography", "asyncio")

PROBE = """
import json, sys
from reconciler.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.__stderr__)
"""


def loaded(*argv: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                          text=True, timeout=60, check=False)
    return list(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def commands_in(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if m.startswith("reconciler.commands."))


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize("argv", [("--version",), ("--help",), ("plan", "--help"),
                                  ("completion", "bash"), ("sandbox", "up", "--help"),
                                  ("pln",)])
def test_building_the_parser_loads_nothing_a_command_needs_only_to_run(
        argv: tuple[str, ...]) -> None:
    assert heavy_in(loaded(*argv)) == []


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize("argv", [("--version",), ("--help",), ("pln",)])
def test_version_help_and_a_mistyped_command_import_no_command_module(
        argv: tuple[str, ...]) -> None:
    assert commands_in(loaded(*argv)) == []


@pytest.mark.integration  # starts a process of its own
def test_a_commands_help_imports_that_command_and_what_it_imports_only() -> None:
    modules = loaded("plan", "--help")
    assert "reconciler.commands.plan" in modules
    others = {module for _, module, _ in cli.COMMANDS} - {"reconciler.commands.plan"}
    assert sorted(others & set(modules)) == []


@pytest.mark.integration  # starts a process of its own
def test_completion_builds_every_commands_parser() -> None:
    modules = loaded("completion", "bash")
    assert sorted({module for _, module, _ in cli.COMMANDS} - set(modules)) == []


def registered(module_name: str) -> list[tuple[str, str, str]]:
    """(name, module, help) of each command ``module_name`` registers, in its order."""
    root = cli.Parser(prog="reconcile")
    subparsers = root.add_subparsers(dest="command", parser_class=cli.Parser)
    importlib.import_module(module_name).register(subparsers)
    return [(action.dest, module_name, str(action.help))
            for action in subparsers._choices_actions]


def test_the_static_table_is_what_each_module_registers_in_order() -> None:
    # The stubs stand in for the modules in --help and in "did you mean": a command
    # renamed, added or re-helped in its module must be renamed there too.
    assert list(cli.COMMANDS) == [entry for module in cli.COMMAND_MODULES
                                  for entry in registered(module)]


@pytest.mark.parametrize("argv", [[], ["--help"], ["pln"], ["--version"], ["plan", "--help"]])
def test_the_stub_parser_reads_as_the_whole_one(argv: list[str]) -> None:
    # Every parser the top level holds, stubs or real, names the same commands with the
    # same help in the same order.
    def listing(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
        action = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction))
        return [(str(a.dest), str(a.help)) for a in action._choices_actions]
    words = [w for w in argv if not w.startswith("-")]
    lazy = cli.build_parser(words[0] if words else "")
    assert listing(lazy) == listing(cli.build_parser())
    assert lazy.format_help() == cli.build_parser().format_help()


@pytest.mark.integration  # starts a process of its own
def test_the_probe_sees_what_a_command_loads_when_it_runs() -> None:
    # The same probe on a command that runs: the planner does load, so an empty list
    # above means the parser did not load it, not that the probe cannot see it.
    modules = loaded("show", "/nonexistent-plan.json")
    assert "reconciler.shell.discovery" in modules
    assert "pydantic" in modules


def test_the_early_version_answer_is_the_parsers(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    early = capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr() == early
