"""``reconcile validate`` in words: the one-line summary of a repo, a file or a pipeline,
its JSON document, and how the diagnostics are shown in each format (text, json,
github, sarif). Pure.

Owns the wording and the JSON shape (``format_version`` 1.0, documented in
``commands.validate``); loading and checking are ``shell.validating``'s and
``shell.discovery``'s, the choice of view and the exit code the command's. Why the
summary goes to stdout when valid and stderr when not: a CI log shows the failure where
errors go, and a valid run's stdout is all a script reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Protocol

from reconciler.core.desired import DesiredState
from reconciler.core.diagnostics import Diagnostic
from reconciler.core.sanitize import safe
from reconciler.render.diagnostics_formats import escape_data, github_annotations, sarif_log
from reconciler.render.said import Said, out

FORMAT_VERSION = "1.0"


class Loaded(Protocol):
    """A repo as ``shell.validating.load_repo`` read it."""

    @property
    def state(self) -> DesiredState | None: ...

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]: ...

    @property
    def files(self) -> tuple[str, ...]: ...

    @property
    def valid(self) -> bool: ...


def unreadable(problem: str, fmt: str, *, limit: int) -> list[Said]:
    """Nothing to validate (no desired state found, or it cannot be read): the problem on
    stderr, and with ``github`` also as a workflow command, so the run's page shows it."""
    said = out(f"::error title=reconcile validate::{escape_data(problem)}") \
        if fmt == "github" else []
    return [*said, Said(safe(problem, limit=limit), err=True)]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def repo_summary(result: Loaded) -> str:
    """``valid: 4 services, 2 grants, 1 settings in 6 files`` or ``invalid: 3 problems ...``."""
    files = plural(len(result.files), "file")
    if result.valid and result.state is not None:
        state = result.state
        # Kinds most repos do not use are named only where they are used.
        more = "".join(f"{plural(len(found), noun)}, " for found, noun in (
            (state.routes, "route"), (state.verifications, "verification"),
            (state.holds, "hold")) if found)
        return (f"valid: {plural(len(state.services), 'service')}, "
                f"{plural(len(state.grants), 'grant')}, {more}1 settings in {files}")
    return f"invalid: {plural(len(result.diagnostics), 'problem')} in {files}"


def repo_json(result: Loaded) -> dict[str, object]:
    state = result.state
    return {
        "format_version": FORMAT_VERSION,
        "valid": result.valid,
        "summary": repo_summary(result),
        "files": len(result.files),
        "counts": {
            "services": len(state.services) if state else 0,
            "grants": len(state.grants) if state else 0,
            "routes": len(state.routes) if state else 0,
            "verifications": len(state.verifications) if state else 0,
            "holds": len(state.holds) if state else 0,
            "settings": 1 if state else 0,
        },
        "diagnostics": [d.to_json() for d in result.diagnostics],
    }


def file_summary(path: str, *, valid: bool, problems: int, counts: Mapping[str, int],
                 repo: str | None) -> str:
    """One file's summary; ``repo``: the desired state it was checked within (None:
    checked alone, without the rules between files)."""
    where = (f"checked within the desired state in {repo}" if repo is not None
             else "checked alone: the rules between files need the directory")
    if valid:
        return (f"valid: {path}: {plural(counts['services'], 'service')}, "
                f"{plural(counts['grants'], 'grant')}, {counts['settings']} settings ({where})")
    return f"invalid: {plural(problems, 'problem')} in {path} ({where})"


def pipeline_summary(*, valid: bool, environments: Sequence[str], services: int,
                     freezes: int, policies: int, errors: int, warnings: int) -> str:
    said = (f"valid: {plural(len(environments), 'environment')} "
            f"({', '.join(environments)}), {plural(services, 'service')}, "
            f"{plural(freezes, 'freeze')}, {plural(policies, 'policy')}"
            if valid else f"invalid: {plural(errors, 'problem')}")
    if warnings:
        said += f" ({plural(warnings, 'warning')})"
    return said


def shown(fmt: str, diagnostics: Sequence[Diagnostic], *, summary: str, valid: bool,
          document: Mapping[str, object], root: str, base: str, version: str,
          named: Sequence[Diagnostic] | None = None) -> list[Said]:
    """The diagnostics in ``fmt``: ``json`` prints ``document``; ``sarif`` one SARIF log;
    ``github`` one workflow command per diagnostic, then the summary; ``text`` one line
    per diagnostic (``named``: as the user named the file, when that differs), then the
    summary. GitHub and SARIF name files from ``root`` and ``base`` (the repo's path in
    the workspace), so each annotation lands on the real file."""
    if fmt == "json":
        return out(json.dumps(document, indent=2, ensure_ascii=False))
    if fmt == "sarif":
        log = sarif_log(diagnostics, version=version, root=root, base=base)
        return out(json.dumps(log, indent=2, ensure_ascii=False))
    lines = (github_annotations(diagnostics, root=root, base=base) if fmt == "github"
             else [d.render() for d in (diagnostics if named is None else named)])
    return [*out(*lines), Said(summary, err=not valid)]
