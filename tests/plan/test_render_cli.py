"""Renderings and the plan/show command surface: size budget, colour policy, bad files."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from reconciler import cli
from reconciler.commands import output
from reconciler.core.live import LiveSnapshot, Observation, ObservationKind
from reconciler.core.planning import plan
from reconciler.exitcodes import Exit
from reconciler.render import jsonplan, markdown, text
from tests.e2e_repo import git
from tests.plan import builders as b


def _big_plan(services: int) -> tuple[object, int]:
    """Many services, each with a promotion and evidence: a comment far over budget."""
    desired, live = b.many_services(services)
    return plan(desired, live), services + 4


def test_markdown_stays_under_githubs_limit_and_says_what_it_left_out() -> None:
    p, total = _big_plan(600)
    md = markdown.render(p)  # type: ignore[arg-type]
    assert len(md) <= markdown.BUDGET
    assert "**Truncated:**" in md and f"of {total} service section(s) left out" in md
    assert md.startswith("## reconcile plan: **GO**")
    counts = p.counts()  # type: ignore[attr-defined]
    assert f"{counts['promote']} promote" in md  # counts cover the whole plan


def test_markdown_within_budget_is_not_truncated() -> None:
    md = markdown.render(plan(b.reference_desired(), b.reference_live()))
    assert "Truncated" not in md and "<details>" in md


def test_markdown_escapes_server_strings() -> None:
    live = b.reference_live()
    rows = tuple(Observation(cluster_id=o.cluster_id, kind=ObservationKind.SILENT,
                             reason="<img src=x onerror=alert(1)> | `rm -rf` \x1b[2J")
                 if o.cluster_id == "sn1" else o for o in live.observations["search"])
    live = live.model_copy(update={"observations": {**live.observations, "search": rows}})
    md = markdown.render(plan(b.reference_desired(), live))
    assert "\x1b" not in md
    # Server strings are code spans: shown verbatim, a "|" escaped so the cell holds.
    assert "| ``<img src=x onerror=alert(1)> \\| `rm -rf` \\x1b[2J`` |" in md
    assert not re.search(r"^[^`]*<img", md, flags=re.M)  # never outside a code span


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_never_with_no_color(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert output.use_color(_Tty()) is True
    assert output.use_color(io.StringIO()) is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert output.use_color(_Tty()) is False
    p = plan(b.reference_desired(), b.reference_live())
    assert "\x1b[" in text.render(p, color=True) and "\x1b[" not in text.render(p, color=False)


def test_show_renders_a_saved_plan_without_network(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    p = plan(b.reference_desired(), b.reference_live())
    saved = tmp_path / "plan.json"
    output.save_plan(saved, p)
    assert cli.main(["show", str(saved), "--format", "markdown"]) == Exit.OK
    shown = capsys.readouterr().out
    # The saved file is named in the exact apply command, with its content digest.
    assert shown == markdown.render(p, plan_file=str(saved))
    assert f"reconcile apply {saved}" in shown
    assert json.loads(saved.read_text())["content_digest"][:19] in shown


@pytest.mark.parametrize("content, message", [
    (b"not json", "invalid JSON"),
    (b'{"format_version": "3.0"}', "major 3"),
    (b"\xff\xfe", "invalid JSON"),
    (b'{"format_version": "2.0", "changes": "x"}', "not a usable plan file"),
])
def test_show_refuses_a_bad_plan_file_with_its_path(tmp_path: Path, content: bytes,
                                                    message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    assert cli.main(["show", str(bad)]) == Exit.ERROR
    err = capsys.readouterr().err
    assert str(bad) in err and message in err and "Traceback" not in err


def test_a_tampered_verdict_is_refused(tmp_path: Path) -> None:
    p = plan(b.reference_desired(), b.reference_live())
    data = json.loads(jsonplan.dumps(p))
    data["blockers"] = [{"code": "cluster_silent", "message": "x", "service": None,
                         "cluster": "sn1", "services": []}]
    with pytest.raises(jsonplan.DigestMismatch, match="edited after it was saved"):
        jsonplan.from_wire(data)
    # Even with its digest recomputed, a verdict that does not follow is refused.
    data["content_digest"] = jsonplan.content_digest(data)
    with pytest.raises(jsonplan.WireError, match="verdict"):
        jsonplan.from_wire(data)


def test_a_plan_file_without_a_content_digest_is_refused() -> None:
    data = json.loads(jsonplan.dumps(plan(b.reference_desired(), b.reference_live())))
    del data["content_digest"]
    with pytest.raises(jsonplan.WireError, match="content_digest is missing"):
        jsonplan.from_wire(data)


@pytest.mark.parametrize("argv", [["plan", "--format", "yaml"], ["show"], ["apply", "--bogus"],
                                  ["watch", "--resync", "x"], ["nonsense"]])
def test_usage_errors_exit_64(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == Exit.USAGE
    assert "Traceback" not in capsys.readouterr().err


def test_plan_of_a_missing_or_invalid_repo_exits_1(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(tmp_path / "nope")]) == Exit.ERROR
    assert "nope: does not exist" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("apiVersion: reconcile/v1\nkind: Service\nname: [x\n")
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bad"]):  # a repository
        git(tmp_path, *step)
    assert cli.main(["plan", str(tmp_path), "--detailed-exitcode"]) == Exit.ERROR
    err = capsys.readouterr().err
    assert "bad.yaml:4:1: YAML syntax error" in err and "Traceback" not in err


def test_live_snapshot_round_trips_through_json() -> None:
    live = b.reference_live()
    assert LiveSnapshot.model_validate_json(live.model_dump_json()) == live
