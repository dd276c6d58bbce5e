"""``reconcile pin`` before any network: usage errors, an invalid working tree, a service
the repo does not declare, and the help text (the exit codes are documented there)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconciler import cli
from reconciler.exitcodes import Exit
from tests.e2e_repo import git

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "desired-state"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    shutil.copytree(EXAMPLES, path)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["pin", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_service_is_required_without_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys)
    assert code == Exit.USAGE and "SERVICE is required" in err


@pytest.mark.parametrize("extra", [["v2.5.0"], ["--dry-run"], ["--allow-moved"]])
def test_check_takes_only_a_service(capsys: pytest.CaptureFixture[str],
                                    extra: list[str]) -> None:
    code, _, err = run(capsys, "--check", "checkout", *extra)
    assert code == Exit.USAGE and "--check takes at most SERVICE" in err


def test_an_invalid_working_tree_is_refused_with_its_problems(
        config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkout = config / "services" / "checkout.yaml"
    checkout.write_text(checkout.read_text().replace("  tag: v2.4.0\n", "  tag: v2.4.0\n"
                                                     "  tga: typo\n"))
    before = checkout.read_bytes()
    code, out, err = run(capsys, "checkout", "v2.5.0", "-C", str(config))
    assert code == Exit.ERROR and out == ""
    assert "services/checkout.yaml:13:" in err and "tga" in err
    assert "the desired state in the working tree is invalid" in err
    assert checkout.read_bytes() == before


def test_a_service_the_repo_does_not_declare_is_a_usage_error(
        config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "billing", "-C", str(config))
    assert code == Exit.USAGE
    assert "no service named billing in the working tree (services: catalog, checkout" in err


def test_the_working_tree_is_read_not_the_commit(config: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILE_TOKEN", "sbx_not-a-real-token")
    # A service in no commit yet is found (then the control plane, unreachable here, stops
    # the run before any write): pin edits the working tree, so it reads the working tree.
    git(config, "init", "-q")
    git(config, "add", "-A")
    git(config, "commit", "-qm", "desired state")
    (config / "services" / "billing.yaml").write_text(
        (config / "services" / "search.yaml").read_text().replace("search", "billing"))
    code, _, err = run(capsys, "billing", "-C", str(config), "--control-plane",
                       "http://127.0.0.1:9", "--ca-file", "system")
    assert code == Exit.ERROR, err
    assert "no service named" not in err and "control plane http://127.0.0.1:9" in err


def test_help_names_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["pin", "--help"])
    text = capsys.readouterr().out
    for needle in ("exit 21", "(22)", "(23)", "exit 20", "--allow-moved", "--dry-run",
                   "--check", "--no-plan", "firstObservedAt"):
        assert needle in text


def test_the_diff_is_safe_for_a_terminal_and_hides_line_endings() -> None:
    from reconciler.commands.pin import unified_diff

    crlf = "".join(unified_diff("a.yaml", b"x: 1\r\ny: 2\r\n", b"x: 1\r\ny: 3\r\n"))
    assert crlf == "--- a/a.yaml\n+++ b/a.yaml\n@@ -1,2 +1,2 @@\n x: 1\n-y: 2\n+y: 3\n"
    hostile = "".join(unified_diff("a\x1b[2J.yaml", b"y: \x1b]0;x\x07\n", b"y: 3\n"))
    assert "\x1b" not in hostile and "\x07" not in hostile
