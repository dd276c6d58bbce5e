"""One environment context: every subcommand that reads or writes an environment takes
``--env`` (``promote`` names its target with ``--to``), into the same destination, so
``commands.stages.select`` resolves it once for the whole invocation. A new subcommand
must be classified here, so it cannot be added without deciding."""

from __future__ import annotations

import argparse

from reconciler import cli
from tests.test_cli_help import parsers

#: Subcommands that read or write an environment's files, journal or live world.
WITH_ENV = frozenset({"validate", "plan", "config", "apply", "watch", "history", "pin",
                      "revert", "release-hold", "freeze", "unfreeze", "status"})
#: ... whose environment is the one they write into, named by ``--to``.
WITH_TO = frozenset({"promote"})
#: Subcommands that touch no environment: a saved plan file (show, comment), a running
#: watcher's endpoints (watch-status, watch-ctl), the local sandbox, completion.
WITHOUT = frozenset({"show", "comment", "watch-status", "watch-ctl", "sandbox", "sandbox up",
                     "sandbox env", "sandbox down", "sandbox stop", "sandbox start",
                     "sandbox status", "sandbox fault", "sandbox push", "sandbox seed",
                     "completion"})


def _options(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {o: a.dest for a in parser._actions for o in a.option_strings}


def test_every_subcommand_that_touches_an_environment_takes_env() -> None:
    seen: set[str] = set()
    problems: list[str] = []
    for path, parser in parsers(cli.build_parser()):
        if len(path) == 1:
            continue
        name = " ".join(path[1:])
        seen.add(name)
        options = _options(parser)
        if name in WITH_ENV and options.get("--env") != "env_name":
            problems.append(f"{name}: no --env (into env_name)")
        elif name in WITH_TO and options.get("--to") != "env_name":
            problems.append(f"{name}: no --to ENV (into env_name)")
        elif name not in WITH_ENV | WITH_TO | WITHOUT:
            problems.append(f"{name}: not classified (does it touch an environment?)")
    assert not problems, problems
    assert seen >= WITH_ENV | WITH_TO, sorted(WITH_ENV | WITH_TO - seen)


def test_the_env_flag_says_the_same_default_rule_everywhere() -> None:
    """One default rule (freeze and unfreeze name the environments they act on: no
    default)."""
    helps = {" ".join(path[1:]): next(a.help for a in parser._actions
                                      if "--env" in a.option_strings)
             for path, parser in parsers(cli.build_parser())
             if " ".join(path[1:]) in WITH_ENV - {"freeze", "unfreeze"}}
    assert len(set(helps.values())) == 1, helps
    assert "the one PATH lies in, else the only one" in next(iter(helps.values()))
