"""Generating ``schemas/desired-state.schema.json`` from the pydantic models.

Owns the published JSON Schema (2020-12) of a desired-state document: a ``oneOf``
over the three kinds, told apart by their ``kind`` constant, built from
``core.desired`` with ``model_json_schema``-style generation (validation mode, by
alias). The models are the source of truth; the committed file is their output, and
``python -m reconciler.schemagen --check`` (and a test) fails when they differ, so the
two cannot drift apart.

Usage: ``python -m reconciler.schemagen`` writes the file; ``--check`` exits 1 when
the committed file is not what the models generate; ``--stdout`` prints it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic.json_schema import models_json_schema

from reconciler.core.desired import Grant, Hold, Route, Service, Settings, Verification

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "desired-state.schema.json"
SCHEMA_ID = "https://reconcile.invalid/schemas/desired-state.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def generate() -> dict[str, Any]:
    """The schema as a JSON-ready dict (deterministic: same models, same output)."""
    kinds = (Settings, Service, Grant, Hold, Route, Verification)
    refs, top = models_json_schema(
        [(model, "validation") for model in kinds],
        by_alias=True,
        ref_template="#/$defs/{model}",
    )
    return {
        "$schema": DIALECT,
        "$id": SCHEMA_ID,
        "title": "reconcile desired-state document",
        "description": "One YAML document of a reconcile config repo: a Settings (one per "
        "repo), a Service, a Grant, a Hold, a Route or a Verification, told apart by "
        "`kind`. Generated from the pydantic models in reconciler/core/desired.py by `python -m "
        "reconciler.schemagen`; do not edit by hand.",
        "oneOf": [refs[(model, "validation")] for model in kinds],
        "$defs": top.get("$defs", {}),
    }


def render() -> str:
    return json.dumps(generate(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reconciler.schemagen", allow_abbrev=False,
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true",
                       help="exit 1 when the committed schema differs from the models")
    group.add_argument("--stdout", action="store_true", help="print instead of writing")
    args = parser.parse_args(argv)
    text = render()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        try:
            current = SCHEMA_PATH.read_text(encoding="utf-8")
        except OSError as exc:
            print(f"{SCHEMA_PATH}: cannot read: {exc.strerror}", file=sys.stderr)
            return 1
        if current != text:
            print(f"{SCHEMA_PATH} is stale: run `python -m reconciler.schemagen`",
                  file=sys.stderr)
            return 1
        print(f"{SCHEMA_PATH.name} is up to date")
        return 0
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
