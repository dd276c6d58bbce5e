"""Help and errors: every option and argument described, "did you mean", shell completion
generated from the parser, and ``sandbox up --print-env`` / ``sandbox env`` for eval."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler import cli
from reconciler.commands import completion
from reconciler.exitcodes import Exit
from reconciler.sandbox import launcher

PROJECT = Path(__file__).resolve().parents[1]


def parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("reconcile",),
            ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*path, name))


def test_every_option_argument_and_subcommand_has_help() -> None:
    missing: list[str] = []
    seen = 0
    for path, parser in parsers(cli.build_parser()):
        for action in parser._actions:
            seen += 1
            where = " ".join(path) + " " + ("/".join(action.option_strings) or action.dest)
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(where)
            if isinstance(action, argparse._SubParsersAction):
                described = {a.dest: a.help for a in action._choices_actions}
                missing.extend(f"{' '.join(path)} {name} (in the command list)"
                               for name in action.choices if not described.get(name))
    assert seen > 50
    assert missing == []


def test_sandbox_up_options_are_all_described() -> None:
    up = dict(parsers(cli.build_parser()))[("reconcile", "sandbox", "up")]
    flags = {s for a in up._actions for s in a.option_strings}
    assert {"--clusters", "--port", "--mesh-port", "--converge-delay-ms", "--seed",
            "--state", "--detach", "--print-env"} <= flags
    assert all(a.help for a in up._actions)


# --- did you mean ---------------------------------------------------------------------------

def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


def test_a_mistyped_subcommand_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["plna"], capsys)
    assert code == Exit.USAGE
    assert "did you mean 'plan'?" in err and "(see: reconcile --help)" in err
    code, err = run(["sandbox", "stauts"], capsys)
    assert code == Exit.USAGE and "did you mean 'status'?" in err


def test_a_mistyped_flag_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["apply", "--auto-aprove", "."], capsys)
    assert code == Exit.USAGE
    assert err.startswith("reconcile apply: unrecognized argument: --auto-aprove")
    assert "did you mean --auto-approve?" in err and "(see: reconcile apply --help)" in err
    code, err = run(["plan", "--detailed-exit-code"], capsys)
    assert code == Exit.USAGE and "did you mean --detailed-exitcode?" in err
    code, err = run(["--verison"], capsys)
    assert code == Exit.USAGE and "did you mean --version?" in err


def test_a_mistyped_choice_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["plan", "--format", "jsno"], capsys)
    assert code == Exit.USAGE and "did you mean 'json'?" in err


def test_nothing_close_gets_no_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["validate", "--zzzzzz"], capsys)
    assert code == Exit.USAGE and "did you mean" not in err


# --- completion -------------------------------------------------------------------------------

@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_completion_scripts_name_every_subcommand(shell: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", shell]) == Exit.OK
    script = capsys.readouterr().out
    assert len(script) > 500
    for command in ("validate", "plan", "apply", "show", "sandbox", "completion"):
        assert command in script
    if shell != "tcsh":  # shtab's tcsh script completes subcommands, not their flags
        assert "--auto-approve" in script and "--only" in script


def test_the_bash_script_is_valid_bash_and_completes() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = completion.script(cli.build_parser(), "bash")
    assert subprocess.run([bash, "-n"], input=script, text=True).returncode == 0
    probe = script + (
        '\nCOMP_WORDS=(reconcile pl); COMP_CWORD=1; COMP_LINE="reconcile pl"; '
        'COMP_POINT=${#COMP_LINE}\n_shtab_reconcile reconcile pl reconcile\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run([bash, "-c", probe], capture_output=True, text=True, timeout=30)
    assert "plan" in done.stdout.split(), done.stderr


def test_the_zsh_script_is_valid_zsh() -> None:
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.skip("no zsh")
    script = completion.script(cli.build_parser(), "zsh")
    assert subprocess.run([zsh, "-n"], input=script, text=True).returncode == 0


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["completion", "bsh"], capsys)
    assert code == Exit.USAGE and "did you mean 'bash'?" in err


# --- sandbox up --print-env -------------------------------------------------------------------

@pytest.mark.integration  # starts a process of its own
def test_sandbox_up_print_env_is_only_what_eval_takes(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    state = tmp_path / "sb"
    reconcile = f"{sys.executable} -m reconciler sandbox --state {state}"
    try:
        up = subprocess.run(
            [bash, "-c", f'eval "$({reconcile} up --print-env --port 0 --mesh-port 0 '
             '--clusters 1 --converge-delay-ms 200)" && '
             'echo "TOKEN=$RECONCILE_TOKEN" && echo "URL=$RECONCILE_CONTROL_PLANE_URL" && '
             'echo "RESOLVE=$RECONCILE_RESOLVE" && echo "CA=$RECONCILE_CA_FILE"'],
            capture_output=True, text=True, timeout=60, cwd=PROJECT)
        assert up.returncode == 0, up.stderr
        sb = launcher.attach(state)
        values = dict(line.split("=", 1) for line in up.stdout.splitlines())
        assert values["TOKEN"] == sb.token and sb.token
        assert values["URL"] == sb.control_plane_url
        assert values["RESOLVE"] == sb.resolve_arg()
        assert values["CA"] == str(sb.ca_file)
        assert "control plane" in up.stderr and "stop it with" in up.stderr  # the human part
        printed = subprocess.run(
            [sys.executable, "-m", "reconciler", "sandbox", "--state", str(state), "up",
             "--print-env", "--port", "0"], capture_output=True, text=True, timeout=60,
            cwd=PROJECT)
        assert printed.returncode == Exit.ERROR and printed.stdout == ""  # already running
        env = subprocess.run(
            [bash, "-c", f'eval "$({reconcile} env)" && echo "$RECONCILE_GATEWAY"'],
            capture_output=True, text=True, timeout=60, cwd=PROJECT)
        assert env.returncode == 0 and env.stdout.strip() == sb.gateway, env.stderr
        lines = subprocess.run(
            [sys.executable, "-m", "reconciler", "sandbox", "--state", str(state), "env"],
            capture_output=True, text=True, timeout=60, cwd=PROJECT).stdout.splitlines()
        assert lines and all(line.startswith("export RECONCILE_") for line in lines)
        assert sb.token not in "\n".join(lines)
    finally:
        subprocess.run([sys.executable, "-m", "reconciler", "sandbox", "--state", str(state),
                        "down"], capture_output=True, timeout=60, cwd=PROJECT)


def test_sandbox_env_without_a_sandbox_says_how_to_start_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["sandbox", "--state", str(tmp_path / "none"), "env"], capsys)
    assert code == Exit.ERROR and "reconcile sandbox up" in err
    assert capsys.readouterr().out == ""
