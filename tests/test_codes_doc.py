"""docs/codes.md is generated: it equals ``reconciler.core.codetable.table()``, and every code
the planner (or anything else in the package) emits is a row of it."""

from __future__ import annotations

import ast
from enum import StrEnum
from pathlib import Path

import pytest

from reconciler.core import codes, codetable, evidence

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "codes.md"
PACKAGE = ROOT / "reconciler"
PLANNER = PACKAGE / "core" / "planning.py"
ENUMS: dict[str, type[StrEnum]] = {
    "BlockerCode": codes.BlockerCode,
    "DriftCode": codes.DriftCode,
    "ReasonCode": codes.ReasonCode,
    "Why": evidence.Why,
}


def mentioned(path: Path) -> set[StrEnum]:
    """Every ``BlockerCode.X`` / ``DriftCode.X`` / ``ReasonCode.X`` / ``Why.X`` (also as
    ``codes.BlockerCode.X`` or ``evidence.Why.X``) in ``path``'s source."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found: set[StrEnum] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else \
            owner.attr if isinstance(owner, ast.Attribute) else None
        if name in ENUMS and not node.attr.startswith("_"):
            enum = ENUMS[name]
            assert node.attr in enum.__members__, \
                f"{where}:{node.lineno}: {name}.{node.attr} is no code"
            found.add(enum[node.attr])
    return found


def row(code: StrEnum) -> str:
    return f"| `{code.value}` |"


def test_committed_doc_is_the_generated_table() -> None:
    assert DOC.read_text(encoding="utf-8") == codetable.table(), \
        "docs/codes.md is stale: run `python -m reconciler.core.codetable > docs/codes.md`"


def test_every_code_the_planner_mentions_is_documented() -> None:
    table = codetable.table()
    used = mentioned(PLANNER)
    # Not vacuous: the planner emits codes of all three kinds and maps the judge's reasons.
    assert {type(c) for c in used} == set(ENUMS.values())
    missing = sorted(c.value for c in used if row(c) not in table)
    assert not missing, f"codes the planner emits with no row in docs/codes.md: {missing}"


def test_every_code_mentioned_anywhere_in_the_package_is_documented() -> None:
    table = codetable.table()
    missing = sorted(
        f"{path.relative_to(ROOT)}: {code.value}"
        for path in sorted(PACKAGE.rglob("*.py")) for code in mentioned(path)
        if row(code) not in table)
    assert not missing, missing


def test_every_member_of_every_code_enum_has_a_row() -> None:
    table = codetable.table()
    missing = [c.value for enum in ENUMS.values() for c in enum if row(c) not in table]
    assert not missing, missing


def test_the_scan_sees_codes_and_refuses_unknown_ones(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("x = BlockerCode.REPO_DIRTY\ny = evidence.Why.SILENT\n", encoding="utf-8")
    assert mentioned(sample) == {codes.BlockerCode.REPO_DIRTY, evidence.Why.SILENT}
    sample.write_text("x = DriftCode.NO_SUCH_CODE\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="NO_SUCH_CODE is no code"):
        mentioned(sample)
