"""The layering is an import-linter contract (``[tool.importlinter]`` in pyproject.toml).

``lint-imports`` runs over the real package and must keep every contract; and the same
contracts, copied onto a throwaway package with the same layout, must break when a module
imports across a layer, so a contract that silently matches nothing cannot pass here.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports_command; "
    "sys.exit(lint_imports_command())"
)
FAKE = "fakereconciler"
# The real package's top-level layout, mirrored by the throwaway one.
MODULES = (
    "__init__.py", "cli.py", "demo.py", "exitcodes.py", "failures.py", "schemagen.py",
    "engine/__init__.py", "engine/wiring.py", "engine/reconciling.py", "engine/wayback.py",
    "engine/planning.py", "engine/applying.py", "engine/reverting.py", "engine/pins.py",
    "engine/commenting.py", "engine/promoting.py", "engine/proposer.py",
    "engine/fleetstatus.py", "engine/watchsteps.py", "engine/sharded.py",
    "commands/__init__.py", "commands/apply.py",
    "core/__init__.py", "core/planning.py", "core/diagnostics.py",
    "render/__init__.py", "render/text.py",
    "sandbox/__init__.py", "sandbox/cluster.py",
    "shell/__init__.py", "shell/watching.py", "shell/probing.py",
)


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN_LINT_IMPORTS, "--no-cache", "--no-logo"],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=300,
    )


def config_section() -> str:
    """The ``[tool.importlinter]`` tables of pyproject.toml, verbatim."""
    lines = (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    kept: list[str] = []
    inside = False
    for line in lines:
        if line.startswith("["):
            inside = line.strip("[] ").startswith("tool.importlinter")
        if inside:
            kept.append(line)
    return "\n".join(kept) + "\n"


def test_the_package_keeps_every_import_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]
    assert "0 broken" in result.stdout, result.stdout[-8000:]


def test_the_contracts_cover_the_layers_asked_for() -> None:
    config = tomllib.loads(config_section())["tool"]["importlinter"]
    assert config["root_package"] == "reconciler"
    assert config["include_external_packages"] is True
    contracts = {c["id"]: c for c in config["contracts"]}
    assert contracts["layers"]["layers"] == [
        "reconciler.cli", "reconciler.commands", "reconciler.engine", "reconciler.shell",
        "reconciler.core",
    ]
    no_io = set(contracts["pure-no-io"]["forbidden_modules"])
    assert {
        "httpx", "ruamel", "watchfiles", "sqlite3", "subprocess", "asyncio", "socket", "ssl",
        "prometheus_client", "cryptography",
    } <= no_io
    assert set(contracts["pure-no-io"]["source_modules"]) == {"reconciler.core",
                                                              "reconciler.render"}
    assert {"reconciler.engine", "reconciler.commands"} <= set(
        contracts["shell-below-engine"]["forbidden_modules"])
    assert {"reconciler.engine", "reconciler.commands", "reconciler.shell"} <= set(
        contracts["sandbox-separate"]["forbidden_modules"])
    # Every module of the engine sits in its tree, and every operation is independent.
    engine_modules = {p.stem for p in (ROOT / "reconciler" / "engine").glob("*.py")} - {
        "__init__"}
    in_tree = {m.strip(" ()").rsplit(".", 1)[-1]
               for layer in contracts["engine-modules"]["layers"] for m in layer.split("|")}
    assert in_tree == engine_modules
    operations = {m.rsplit(".", 1)[-1]
                  for m in contracts["engine-operations-independent"]["modules"]}
    assert operations == engine_modules - {"wiring", "reconciling", "wayback", "watchsteps",
                                           "sharded"}


@pytest.fixture
def throwaway(tmp_path: Path) -> Path:
    """A package laid out like ``reconciler`` with the real contracts, renamed, over it."""
    for name in MODULES:
        path = tmp_path / FAKE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('"""Throwaway."""\n', encoding="utf-8")
    # A layer's independent siblings follow a "| " inside the same string.
    section = config_section().replace('"reconciler', f'"{FAKE}').replace(
        "| reconciler.", f"| {FAKE}.")
    assert f'root_package = "{FAKE}"' in section
    (tmp_path / "pyproject.toml").write_text(section, encoding="utf-8")
    return tmp_path


@pytest.mark.integration  # starts a process of its own
def test_the_copied_contracts_pass_on_a_clean_throwaway_package(throwaway: Path) -> None:
    result = lint_imports(throwaway)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize(
    ("module", "source", "broken"),
    [
        ("core/planning.py", f"from {FAKE}.shell import watching\n",
         "commands > engine > shell > core BROKEN"),
        ("core/planning.py", "import socket\n", "core and renderers import no I/O library BROKEN"),
        ("render/text.py", "import subprocess\n",
         "core and renderers import no I/O library BROKEN"),
        ("core/diagnostics.py", "from ruamel.yaml import YAML\n",
         "core and renderers import no I/O library BROKEN"),
        ("shell/watching.py", f"from {FAKE} import engine\n",
         "the shell (watching included) never imports the engine or the commands BROKEN"),
        ("render/text.py", f"from {FAKE}.shell import probing\n",
         "renderers import only the core BROKEN"),
        ("sandbox/cluster.py", f"from {FAKE}.shell import probing\n",
         "the sandbox shares no code with the reconciler it stands in for BROKEN"),
        ("failures.py", f"from {FAKE}.commands import apply\n",
         "failures and exitcodes are leaves anyone may import BROKEN"),
        ("engine/proposer.py", f"from {FAKE}.engine import promoting\n",
         "the engine's operations import none of each other BROKEN"),
        ("engine/proposer.py", f"from {FAKE}.engine import promoting\n",
         "the engine's modules form a tree over the wiring BROKEN"),
        ("engine/wiring.py", f"from {FAKE}.engine import reconciling\n",
         "the engine's modules form a tree over the wiring BROKEN"),
        ("engine/wayback.py", f"from {FAKE}.engine import applying\n",
         "the engine's modules form a tree over the wiring BROKEN"),
    ],
    ids=["core->shell", "core->socket", "render->subprocess", "core->ruamel", "watching->engine",
         "render->shell", "sandbox->shell", "failures->commands",
         "operation->operation", "operation->operation-tree", "wiring->reconciler",
         "wayback->operation"],
)
def test_the_contracts_catch_a_violation(
    throwaway: Path, module: str, source: str, broken: str
) -> None:
    path = throwaway / FAKE / module
    path.write_text(path.read_text(encoding="utf-8") + source, encoding="utf-8")
    result = lint_imports(throwaway)
    assert result.returncode != 0, result.stdout[-8000:]
    assert broken in result.stdout, result.stdout[-8000:]


@pytest.mark.parametrize(
    "imports",
    [
        {"core/planning.py": f"from {FAKE}.core import diagnostics\n",
         "core/diagnostics.py": f"from {FAKE}.core import planning\n"},
        # A deferred import closes the circle as surely as one at the top of the file.
        {"core/planning.py": f"from {FAKE}.core import diagnostics\n",
         "core/diagnostics.py": f"def table() -> None:\n    from {FAKE}.core import planning\n"},
    ],
    ids=["top-level", "deferred"],
)
def test_the_contracts_catch_a_circle_in_the_core(
    throwaway: Path, imports: dict[str, str]
) -> None:
    for module, source in imports.items():
        path = throwaway / FAKE / module
        path.write_text(path.read_text(encoding="utf-8") + source, encoding="utf-8")
    result = lint_imports(throwaway)
    assert result.returncode != 0, result.stdout[-8000:]
    assert "the core's modules import in one direction: no circle BROKEN" in result.stdout, \
        result.stdout[-8000:]
