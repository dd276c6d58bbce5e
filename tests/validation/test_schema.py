"""The published JSON Schema and the models cannot drift apart.

The committed schema must be exactly what the models generate, every example must
pass both, and no corpus case that the schema rejects may pass the models.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from reconciler import schemagen
from reconciler.shell import loading, validating
from tests.validation.conftest import EXAMPLES
from tests.validation.test_corpus import CASES, Case

SCHEMA = json.loads(schemagen.SCHEMA_PATH.read_text(encoding="utf-8"))
VALIDATOR = Draft202012Validator(SCHEMA)
EXAMPLE_FILES = sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".yaml", ".yml"))


def test_committed_schema_is_what_the_models_generate() -> None:
    assert schemagen.SCHEMA_PATH.read_text(encoding="utf-8") == schemagen.render()
    assert schemagen.main(["--check"]) == 0


def test_the_check_fails_on_a_stale_schema(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "stale.json"
    stale.write_text(schemagen.render().replace("sha256", "sha512"), encoding="utf-8")
    monkeypatch.setattr(schemagen, "SCHEMA_PATH", stale)
    assert schemagen.main(["--check"]) == 1


def test_schema_is_a_valid_2020_12_schema_with_one_branch_per_kind() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["$id"]
    kinds = [SCHEMA["$defs"][ref["$ref"].rsplit("/", 1)[1]]["properties"]["kind"]["const"]
             for ref in SCHEMA["oneOf"]]
    assert kinds == ["Settings", "Service", "Grant", "Hold", "Route", "Verification"]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_every_example_has_the_schema_line_and_passes_schema_and_models(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    target = (path.parent / first.split("$schema=", 1)[1]).resolve()
    assert target == schemagen.SCHEMA_PATH
    documents, problems = loading.parse_bytes(path.read_bytes(), path.name)
    assert not problems and documents
    for document in documents:
        assert list(VALIDATOR.iter_errors(document.value)) == []
        model, diagnostics = validating.validate_document(document)
        assert model is not None and diagnostics == []


def _documents(root: Path) -> Iterator[loading.YamlDocument]:
    paths, _ = loading.discover(root)
    for rel in paths:
        yield from loading.load_file(root, rel).documents


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_schema_never_rejects_what_the_models_accept(case: Case, repo: Path) -> None:
    case.setup(repo)
    for document in _documents(repo):
        schema_ok = VALIDATOR.is_valid(document.value)
        model, _ = validating.validate_document(document)
        if not schema_ok:
            assert model is None, f"{document.path}: schema rejects, models accept"
        if model is not None and document.path == case.path:
            # What the models accept in the broken file, the schema accepts too.
            assert schema_ok


def test_the_schema_catches_most_of_the_corpus(tmp_path: Path) -> None:
    """The schema is useful on its own (editors): it rejects the field-level cases."""
    import shutil

    rejected = 0
    for index, case in enumerate(CASES):
        root = tmp_path / str(index)
        shutil.copytree(EXAMPLES, root)
        case.setup(root)
        if any(not VALIDATOR.is_valid(d.value) for d in _documents(root)
               if d.path == case.path):
            rejected += 1
    assert rejected >= 35
