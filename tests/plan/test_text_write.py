"""``render.text.write``: the text plan written to a stream, all or nothing.

The commands write the text plan through ``write`` (``commands.output.show``), which
puts UTF-8 bytes under a text file's text layer instead of building one large string:
what reaches the stream must be ``render``'s text exactly, in order with what was written
before it, and nothing at all when rendering fails part way.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from reconciler import cli
from reconciler.commands import output
from reconciler.core.planning import plan
from reconciler.core.plans import Plan
from reconciler.render import common, text
from tests.plan import builders as b
from tests.plan.test_output_safety import _plans
from tests.plan.test_render_cli import _big_plan


def _reference() -> list[Plan]:
    live = b.reference_live()
    return [plan(b.reference_desired(), live), *_plans()]


@pytest.mark.parametrize("color", [False, True])
def test_written_bytes_are_the_rendered_text_after_what_came_before(color: bool) -> None:
    for p in _reference():
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding="utf-8")
        stream.write("before ✓\n")  # still in the text layer's buffer
        text.write(p, stream, color=color)
        stream.write("after\n")
        stream.flush()
        assert raw.getvalue().decode() == f"before ✓\n{text.render(p, color=color)}after\n"


def test_a_stream_that_is_not_a_utf8_file_gets_the_same_text() -> None:
    p = _reference()[1]
    plain = io.StringIO()
    text.write(p, plain)
    assert plain.getvalue() == text.render(p)
    raw = io.BytesIO()
    ascii_file = io.TextIOWrapper(raw, encoding="ascii", errors="backslashreplace")
    text.write(p, ascii_file)
    assert raw.getvalue() == text.render(p).encode("ascii", "backslashreplace")


@pytest.mark.parametrize("utf8", [True, False])
def test_nothing_is_written_when_rendering_fails_part_way(
        utf8: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    many, _ = _big_plan(100)
    assert isinstance(many, Plan)
    assert len(list(text._pieces(many, False))) > 1  # the failure comes after a piece is made

    def broken(plan: Plan) -> str:  # the summary is the last line rendered
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(common, "summary_line", broken)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8") if utf8 else io.StringIO()
    with pytest.raises(RuntimeError, match="renderer bug"):
        text.write(many, stream)
    stream.flush()
    assert (raw.getvalue() if utf8 else stream.getvalue()) in (b"", "")


def test_show_of_a_saved_plan_prints_the_rendered_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _reference()[0]
    saved = tmp_path / "plan.json"
    output.save_plan(saved, p)
    assert cli.main(["show", str(saved)]) == 0
    assert capsys.readouterr().out == text.render(output.load_plan(saved))
