"""Hostile strings in a plan never reach a terminal or a PR comment live.

A saved plan file is untrusted (a server's words, or a hand edit): ``show`` and
``apply FILE`` render its strings, so every renderer must pass each one through
``safe`` (text, Markdown, JSON to a terminal), and the Markdown renderer must keep
each one inert for GitHub (no links, no mentions, no tags, no broken tables).
Refusals with several lines print as lines, each made safe on its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from reconciler.commands import output
from reconciler.core.live import ObservationKind
from reconciler.core.planning import plan
from reconciler.core.plans import Plan
from reconciler.core.sanitize import safe, safe_json_text
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.render import jsonplan, markdown, text
from tests.plan import builders as b


def _markdown_it() -> Any:
    """markdown-it-py with linkify (test extra ``markdown-it-py[linkify]``), or a skip."""
    module = pytest.importorskip("markdown_it")
    pytest.importorskip("linkify_it")  # autolinks bare URLs and www. like GitHub does
    return module

OSC8 = "\x1b]8;;http://evil.example/osc\x1b\\click\x1b]8;;\x1b\\"
HOSTILE = (
    f" \x1b[31mRED\x1b[0m {OSC8} \x07bell \x9b2J \x9d8;;x\x9c \x85nel"
    " \u202eevil\u202c \u2066iso\u2069 \u200e\u200b\ufeff \U000e0041tag"
    " <img src=x onerror=alert(1)> </details> <a href='http://evil.example/a'>a</a>"
    " | `tick` ``two`` *b* _i_ ~~s~~ [l](http://evil.example/md) ![i](http://evil.example/i)"
    " @org/team @someone #123 GH-7 org/repo#9 https://evil.example/u www.evil.example"
    " mail@evil.example :shipit: &amp; \\| \\"
    "\nforged: line\r\n  ✗ forged\u2028sep\u2029para"
)
# What must never reach an output raw: every Cc (but the newline a renderer writes), Cf,
# Cs, Zl, Zp character, i.e. ESC, BEL, C1, bidi controls, zero-width and tag characters.
_RAW_CONTROL = re.compile(
    "[" + "".join(re.escape(chr(c)) for c in range(0x110000) if c != 0x0A
                  and unicodedata.category(chr(c)) in ("Cc", "Cf", "Cs", "Zl", "Zp")) + "]")


def _taint(value: Any) -> Any:
    """Every plain string of the value with HOSTILE appended (enum values stay valid)."""
    if type(value) is str:
        return value + HOSTILE
    if isinstance(value, tuple):
        return tuple(_taint(v) for v in value)
    if isinstance(value, BaseModel):
        return value.model_copy(update={name: _taint(getattr(value, name))
                                        for name in type(value).model_fields})
    return value


def _plans() -> list[Plan]:
    """A GO plan and a NO-GO plan (silent cluster), every string of each tainted."""
    live = b.reference_live()
    obs = live.observations["checkout"]
    silent = tuple(o.model_copy(update={"kind": ObservationKind.SILENT, "runtime": None,
                                        "reason": "down"})
                   if o.cluster_id == "sn2" else o for o in obs)
    no_go = live.model_copy(update={"observations": {**live.observations, "checkout": silent}})
    return [_taint(plan(b.reference_desired(), live)),
            _taint(plan(b.reference_desired(), no_go))]


def _clean_plans() -> list[Plan]:
    live = b.reference_live()
    return [plan(b.reference_desired(), live)]


def _assert_no_raw_controls(out: str) -> None:
    found = _RAW_CONTROL.findall(out)
    assert not found, f"raw controls reached the output: {sorted(set(found))!r}"


# --- safe() itself ------------------------------------------------------------------


def test_safe_escapes_every_control_format_surrogate_and_separator_character() -> None:
    missed = [f"U+{c:04X}" for c in range(0x110000)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Cs", "Zl", "Zp")
              and chr(c) in safe(chr(c))]
    assert not missed


def test_safe_makes_escapes_visible_and_bounds_length() -> None:
    assert safe(OSC8) == "\\x1b]8;;http://evil.example/osc\\x1b\\click\\x1b]8;;\\x1b\\"
    assert safe("a\u202eb\U000e0041") == "a\\u202eb\\U000e0041"
    assert safe("x" * 500, 10) == "x" * 10 + "…(+490 chars)"
    assert safe("plain words: ok → fine", 100) == "plain words: ok → fine"


def test_json_text_escaping_is_lossless_and_leaves_no_raw_control() -> None:
    doc = {"m": HOSTILE, "n": ["\ud800", "\U000e0041"]}
    raw = json.dumps(doc, indent=2, ensure_ascii=False)
    escaped = safe_json_text(raw)
    assert json.loads(escaped) == doc
    _assert_no_raw_controls(escaped)


# --- the renderers ------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1])
def test_text_rendering_of_a_hostile_plan_is_inert(index: int) -> None:
    hostile = _plans()[index]
    clean = plan(b.reference_desired(), b.reference_live()) if index == 0 else None
    out = text.render(hostile)
    _assert_no_raw_controls(out)
    assert "\\x1b]8;;" in out and "\\u202e" in out  # shown, not acted on
    assert not any(line.startswith(("forged", "  ✗ forged")) for line in out.splitlines())
    if clean is not None:  # one line per line of the clean plan: none forged
        assert len(out.splitlines()) == len(text.render(clean).splitlines())
    coloured = text.render(hostile, color=True)
    # The only escape sequences are the renderer's own SGR colours.
    assert not re.findall(r"\x1b(?!\[[0-9;]*m)", coloured)
    _assert_no_raw_controls(re.sub(r"\x1b\[[0-9;]*m", "", coloured))


def _outside_code(html: str) -> str:
    return re.sub(r"<code>.*?</code>", "", html, flags=re.S)


@pytest.mark.parametrize("index", [0, 1])
def test_markdown_of_a_hostile_plan_is_inert_on_github(index: int) -> None:
    hostile = _plans()[index]
    md = markdown.render(hostile)
    _assert_no_raw_controls(md)
    html = _markdown_it().MarkdownIt("gfm-like").render(md)  # html on, linkify on, tables
    assert not re.search(r"<(a|img)\b|<[^>]*\b(href|src)=", html)  # no link, no image
    tags = set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", html))
    assert tags <= {"h2", "h3", "p", "strong", "em", "ul", "li", "code", "table", "thead",
                    "tbody", "tr", "th", "td", "details", "summary", "sub", "br",
                    "blockquote"}, tags
    prose = _outside_code(html)
    for live_text in ("@org/team", "@someone", "#123", "GH-7", "evil.example", "forged",
                      "RED", ":shipit:"):
        assert live_text not in prose, live_text
    assert "evil.example" in html  # still shown, inside code, where GitHub links nothing
    for row in re.findall(r"<tr>(.*?)</tr>", html, flags=re.S):
        assert len(re.findall(r"<t[hd]>", row)) == 7  # no cell split by a server's "|"
    assert html.count("<details>") == html.count("</details>") == md.count("<details>")


def test_markdown_of_a_clean_plan_stays_readable() -> None:
    md = markdown.render(_clean_plans()[0])
    assert "- **promote** — `promote checkout to v2.4.0 (sha256:b10540cb4377)`" in md
    assert "| `sn1` | `127.0.0.2` | answered |" in md


def test_code_spans_hold_any_backticks_and_spaces() -> None:
    render = _markdown_it().MarkdownIt("commonmark").renderInline
    for value in ["`", "a``b", "` x `", " lead", "trail ", "```", "x`"]:
        assert render(markdown.code(value)) == f"<code>{value}</code>", value


@pytest.mark.parametrize("index", [0, 1])
def test_json_to_a_terminal_is_lossless_and_inert(index: int) -> None:
    hostile = _plans()[index]
    out = output.render(hostile, "json", sys.stdout)
    _assert_no_raw_controls(out)
    assert json.loads(out) == json.loads(jsonplan.dumps(hostile))


def test_a_clean_plan_renders_as_before_through_the_safe_view() -> None:
    from reconciler.render import common
    p = _clean_plans()[0]
    assert common.untrusted(p) == p
    assert output.render(p, "json", sys.stdout) == jsonplan.dumps(p)


# --- the CLI, end to end ------------------------------------------------------------


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_show_of_a_hostile_saved_plan_prints_no_control(tmp_path: Path, fmt: str) -> None:
    for index, hostile in enumerate(_plans()):
        saved = tmp_path / f"plan{index}.json"
        output.save_plan(saved, hostile)
        _assert_no_raw_controls(saved.read_text(encoding="utf-8"))  # `cat FILE` too
        assert output.load_plan(saved) == hostile  # the file keeps the plan exactly
        done = subprocess.run([sys.executable, "-m", "reconciler", "show", str(saved),
                               "--format", fmt], capture_output=True, timeout=60, check=False)
        assert done.returncode == Exit.OK, done.stderr.decode(errors="replace")
        out = done.stdout.decode("utf-8")
        _assert_no_raw_controls(out)
        for forbidden in ("\x1b", "\x07", "\x9b", "\x9d", "\u202e", "\u2066"):
            assert forbidden not in out
        assert "evil.example" in out  # shown, escaped, not dropped


# --- refusals over several lines ----------------------------------------------------


def test_a_multi_line_refusal_prints_as_lines(capsys: pytest.CaptureFixture[str]) -> None:
    untrusted = "sn1 said: fine\n  ✗ forged: all good \x1b[2J"
    exc = EngineError("refusing to apply: the plan is NO-GO; nothing was sent\n"
                      f"  ✗ cluster_silent: checkout: {safe(untrusted)}\n"
                      "  ✗ rollout_failed: search: \x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\",
                      Exit.REFUSED_NO_GO)
    assert output.report_error(exc) == Exit.REFUSED_NO_GO
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: refusing to apply: the plan is NO-GO; nothing was sent",
        "  ✗ cluster_silent: checkout: sn1 said: fine\\x0a  ✗ forged: all good \\x1b[2J",
        "  ✗ rollout_failed: search: \\x1b]8;;http://evil\\x1b\\x\\x1b]8;;\\x1b\\",
    ]
    _assert_no_raw_controls(err)


def test_a_one_line_error_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    assert output.report_error(EngineError("plan.json: cannot read the plan: gone")) == 1
    assert capsys.readouterr().err == "error: plan.json: cannot read the plan: gone\n"
