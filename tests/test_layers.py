"""The pure core and the renderers import no I/O library; the check walks real imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "reconciler"
PURE_PACKAGES = ("core", "render")
FORBIDDEN = {
    "httpx", "httpcore", "ruamel", "watchfiles", "socket", "ssl", "sqlite3", "subprocess",
    "asyncio", "threading", "urllib", "http", "requests", "shutil", "tempfile", "signal",
    "prometheus_client", "cryptography", "opentelemetry", "cloudevents", "githubkit",
    "reconciler.shell", "reconciler.sandbox",
    "reconciler.engine", "reconciler.commands", "reconciler.cli",
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


PURE_FILES = sorted(p for pkg in PURE_PACKAGES for p in (PACKAGE / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_module_imports_no_io_library(path: Path) -> None:
    bad = [
        name for name in _imports(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert not bad, f"{path.relative_to(PACKAGE)} imports I/O: {bad}"


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text("import httpx\nfrom ruamel.yaml import YAML\n", encoding="utf-8")
    assert _imports(sample) == ["httpx", "ruamel.yaml"]


def test_there_are_pure_modules_to_check() -> None:
    assert len(PURE_FILES) >= 4
