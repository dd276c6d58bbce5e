"""A change kind lives in at most four files: its module in ``core/kinds/``, its
registration (``core/kinds/__init__.py``), its sender (``shell/sending.py``) and its view
(``render/kindviews.py``). Everything else -- the applier, the renderers -- dispatches
through the kind.

A file "references" a kind when its code names the kind's model (``GrantChange``) or
its module (``core.kinds.grant``, ``from reconciler.core.kinds import grant``,
``kinds.grant``); docstrings and comments do not count. The older kinds are also read by
features of their own (the planner's per-kind diff, promotion and its policy, tracing,
notifications): those files are listed in ``BEYOND_DISPATCH`` and the list may only
shrink -- a kind gaining a file, or a kind added with more than four, fails here.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.kinds import KINDS, Kind

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "reconciler"
LIMIT = 4

#: The files every kind is in: where it is dispatched from, nowhere else.
DISPATCH = frozenset({"reconciler/core/kinds/__init__.py", "reconciler/shell/sending.py",
                      "reconciler/render/kindviews.py"})

#: Files that read an older kind for a feature of that kind's own, not to send or render
#: it (issue 33: what is left to move behind ``Kind``). Only ever remove entries.
BEYOND_DISPATCH: dict[str, frozenset[str]] = {
    "egress": frozenset({"reconciler/core/evidence.py", "reconciler/core/planning.py"}),
    "release": frozenset({
        "reconciler/core/lastproven.py", "reconciler/core/notifying.py",
        "reconciler/core/planning.py", "reconciler/core/policy.py",
        "reconciler/core/promotion.py", "reconciler/shell/tracing.py"}),
    "create": frozenset({
        "reconciler/core/binding.py", "reconciler/core/notifying.py",
        "reconciler/core/planning.py", "reconciler/shell/greenfield.py",
        "reconciler/shell/tracing.py"}),
    "route": frozenset({"reconciler/shell/observing.py"}),
}

#: Where a kind must never be named: the applier and the renderers dispatch through it.
NEVER = ("reconciler/shell/applying.py", "reconciler/render/")


def _refers(tree: ast.AST, module: str, name: str, models: set[str]) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == module or node.module.startswith(module + "."):
                return True
            if any(a.name in models or (node.module == "reconciler.core.kinds"
                                        and a.name == name) for a in node.names):
                return True
        elif isinstance(node, ast.Import):
            if any(a.name == module for a in node.names):
                return True
        elif isinstance(node, ast.Name):
            if node.id in models:
                return True
        elif isinstance(node, ast.Attribute) and (
                node.attr in models or (node.attr == name and isinstance(node.value, ast.Name)
                                        and node.value.id == "kinds")):
            return True
    return False


@cache
def _trees(root: Path) -> dict[str, ast.AST]:
    return {path.relative_to(root.parent).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
            for path in sorted(root.rglob("*.py"))}


def footprint(kind: Kind[Any], root: Path = PACKAGE) -> set[str]:
    """The non-test files whose code names ``kind``'s model or module."""
    module = type(kind).__module__
    name = module.rsplit(".", 1)[-1]
    models = {m.__name__ for m in kind.models}
    return {path for path, tree in _trees(root).items()
            if _refers(tree, module, name, models)}


def _name(kind: Kind[Any]) -> str:
    return type(kind).__module__.rsplit(".", 1)[-1]


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_a_kind_lives_in_at_most_four_files(kind: Kind[Any]) -> None:
    name = _name(kind)
    files = footprint(kind)
    own = f"reconciler/core/kinds/{name}.py"
    assert own in files and files >= DISPATCH, sorted(files)
    beyond = BEYOND_DISPATCH.get(name, frozenset())
    assert beyond <= files, f"{name} no longer needs {sorted(beyond - files)}: drop them " \
        "from BEYOND_DISPATCH"
    assert len(files - beyond) <= LIMIT, \
        f"{name} is referenced in {len(files - beyond)} files: {sorted(files - beyond)}"
    assert not [f for f in files - DISPATCH if f.startswith(NEVER)], sorted(files)


def test_the_footprint_sees_a_kind_named_outside_its_files(tmp_path: Path) -> None:
    """The count fails on an injected reference: a renderer branching on a kind's model."""
    grant = next(k for k in KINDS if _name(k) == "grant")
    package = tmp_path / "reconciler"
    for path in PACKAGE.rglob("*.py"):
        copy = package / path.relative_to(PACKAGE)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    before = footprint(grant, package)
    _trees.cache_clear()
    assert len(before) <= LIMIT, sorted(before)
    text = package / "render" / "text.py"
    text.write_text(text.read_text(encoding="utf-8")
                    + "\n\ndef _grant(change: object) -> bool:\n"
                    "    return isinstance(change, GrantChange)\n", encoding="utf-8")
    after = footprint(grant, package)
    assert after - before == {"reconciler/render/text.py"}
    assert len(after) > LIMIT
