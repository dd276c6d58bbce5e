"""Start time: building the parser loads no planner, no models and no HTTP stack.

``reconcile --version``, ``--help`` and ``completion`` build every command's parser; a
command that imported the engine, pydantic or httpx at the top of its module would make
all of them pay for it (0.65 s of CPU where a bare interpreter takes 0.02 s). Each case
runs a fresh interpreter and lists what it imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize("argv", [("--version",), ("--help",), ("plan", "--help"),
                                  ("completion", "bash"), ("sandbox", "up", "--help")])
def test_building_the_parser_loads_nothing_a_command_needs_only_to_run(
        argv: tuple[str, ...]) -> None:
    modules = loaded(*argv)
    assert "reconciler.commands.plan" in modules  # the whole parser was built
    assert heavy_in(modules) == []


@pytest.mark.integration  # starts a process of its own
def test_the_probe_sees_what_a_command_loads_when_it_runs() -> None:
    # The same probe on a command that runs: the planner does load, so an empty list
    # above means the parser did not load it, not that the probe cannot see it.
    modules = loaded("show", "/nonexistent-plan.json")
    assert "reconciler.shell.discovery" in modules
    assert "pydantic" in modules
