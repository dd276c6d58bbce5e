"""Diagnostics for CI: GitHub Actions workflow commands and SARIF 2.1.0.

Owns ``reconcile validate --format github`` (one ``::error file=…,line=…,col=…,title=…::…``
workflow command per diagnostic, so each problem lands on the pull request's line) and
``--format sarif`` (one SARIF 2.1.0 log, for code scanning and editors). Pure: the
command decides where the validated repo sits (``base``) and passes the tool version.

Paths: a diagnostic's path is relative to the validated repo; ``artifact_path`` joins it
to ``base`` (the repo's path relative to the workspace) so the annotation points at the
real file. A repo-level diagnostic carries the repo path itself (``root``) and maps to
``base``.

Safety: every file-derived string is data. In a workflow command ``%``, CR and LF are
percent-encoded as GitHub documents (plus ``:`` and ``,`` in properties), so a message
can never end the command or start another (``::stop-commands::``, ``::add-mask::``);
every other control character is escaped by ``core.sanitize.safe``. In SARIF, strings go
through ``safe`` and the artifact URI is percent-encoded, which is lossless.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from typing import Any

from reconciler.core.diagnostics import NO_POSITION, Diagnostic, Severity
from reconciler.core.sanitize import safe

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
#: The uriBaseId every artifact location is relative to (the checkout's root).
SRCROOT = "%SRCROOT%"
TOOL_NAME = "reconcile"

PATH_LIMIT = 500
FIELD_LIMIT = 200
MESSAGE_LIMIT = 1000

#: The rule of a diagnostic that concerns a file (or the repo) as a whole.
DOCUMENT_RULE = "document"

_INDEX = re.compile(r"\[\d+\]")
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning"}
# RFC 3986 unreserved characters and "/", the rest percent-encoded (UTF-8).
_URI_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/")


def artifact_path(diagnostic: Diagnostic, *, root: str = ".", base: str = ".") -> str:
    """The diagnostic's file as a normalized ``/`` path under ``base``.

    ``root`` is the repo path as given to the loader (repo-level diagnostics carry it);
    ``base`` is the same repo relative to the workspace.
    """
    if diagnostic.path == root and diagnostic.line == NO_POSITION:
        return posixpath.normpath(base)
    return posixpath.normpath(posixpath.join(base, diagnostic.path))


def _bounded(text: str, limit: int) -> str:
    if len(text) > limit:
        return f"{text[:limit]}…(+{len(text) - limit} chars)"
    return text


def escape_data(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """A workflow command's message: ``%``, CR, LF percent-encoded, other controls escaped."""
    value = _bounded(text, limit).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return safe(value, limit=10 * len(value))  # no second cut: an escape is <= 10 chars


def escape_property(text: str, limit: int = PATH_LIMIT) -> str:
    """A workflow command's property value: as ``escape_data``, plus ``:`` and ``,``."""
    return escape_data(text, limit).replace(":", "%3A").replace(",", "%2C")


def _command(diagnostic: Diagnostic) -> str:
    return "warning" if diagnostic.severity is Severity.WARNING else "error"


def github_annotation(diagnostic: Diagnostic, *, root: str = ".", base: str = ".") -> str:
    """``::error file=<path>,line=<line>,col=<col>,title=<field>::<message>``."""
    props = [f"file={escape_property(artifact_path(diagnostic, root=root, base=base))}"]
    if diagnostic.line != NO_POSITION:
        props.append(f"line={diagnostic.line}")
        if diagnostic.column != NO_POSITION:
            props.append(f"col={diagnostic.column}")
    if diagnostic.field:
        props.append(f"title={escape_property(diagnostic.field, FIELD_LIMIT)}")
    return f"::{_command(diagnostic)} {','.join(props)}::{escape_data(diagnostic.message)}"


def github_annotations(diagnostics: Iterable[Diagnostic], *, root: str = ".",
                       base: str = ".") -> list[str]:
    """One workflow command per diagnostic, in the diagnostics' order."""
    return [github_annotation(d, root=root, base=base) for d in diagnostics]


def rule_id(diagnostic: Diagnostic) -> str:
    """The diagnostic's kind: its field with indexes dropped (``egress[].host``)."""
    if not diagnostic.field:
        return DOCUMENT_RULE
    return _INDEX.sub("[]", safe(diagnostic.field, limit=FIELD_LIMIT))


def _rule(rule: str) -> dict[str, Any]:
    if rule == DOCUMENT_RULE:
        text = "A desired-state file (or the repo) as a whole is not valid."
        name = "InvalidDocument"
    else:
        text = f"The desired-state field `{rule}` is not valid."
        name = "InvalidField"
    return {
        "id": rule,
        "name": name,
        "shortDescription": {"text": text},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["reconcile", "desired-state"]},
    }


def uri(path: str) -> str:
    """``path`` as a relative URI reference: anything but unreserved characters and ``/``
    percent-encoded (so spaces, ``#``, ``%`` and control characters survive exactly)."""
    return "".join(chr(b) if b in _URI_SAFE else f"%{b:02X}"
                   for b in path.encode("utf-8", "surrogatepass"))


def _result(diagnostic: Diagnostic, rule_index: int, *, root: str, base: str) -> dict[str, Any]:
    location: dict[str, Any] = {
        "artifactLocation": {"uri": uri(artifact_path(diagnostic, root=root, base=base)),
                             "uriBaseId": SRCROOT},
    }
    if diagnostic.line != NO_POSITION:
        region: dict[str, int] = {"startLine": diagnostic.line}
        if diagnostic.column != NO_POSITION:
            region["startColumn"] = diagnostic.column
        location["region"] = region
    result: dict[str, Any] = {
        "ruleId": rule_id(diagnostic),
        "ruleIndex": rule_index,
        "level": _LEVEL[diagnostic.severity],
        "message": {"text": safe(diagnostic.message, limit=MESSAGE_LIMIT)},
        "locations": [{"physicalLocation": location}],
    }
    if diagnostic.field:
        result["properties"] = {"field": safe(diagnostic.field, limit=FIELD_LIMIT)}
    return result


def sarif_log(diagnostics: Sequence[Diagnostic], *, version: str, root: str = ".",
              base: str = ".") -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run of ``reconcile``: one rule per kind, one result per
    diagnostic (its ``ruleIndex`` pointing into the rules, in first-seen order)."""
    rules: dict[str, int] = {}
    for diagnostic in diagnostics:
        rules.setdefault(rule_id(diagnostic), len(rules))
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": TOOL_NAME,
                "version": version,
                "semanticVersion": version,
                "rules": [_rule(rule) for rule in rules],
            }},
            "columnKind": "unicodeCodePoints",
            "results": [_result(d, rules[rule_id(d)], root=root, base=base)
                        for d in diagnostics],
        }],
    }
