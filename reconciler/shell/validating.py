"""Validating a config repo: files -> a ``DesiredState`` or every problem with it.

Owns the sequence load (``shell.loading``) -> dispatch on ``kind`` -> model validation
(``core.desired``) -> cross-document checks (``core.crosscheck``), and the translation
of pydantic's errors into ``Diagnostic``s that name the file, line, column and field
in plain English. Callers: ``reconcile validate``, the engine (plan/apply) and the
watcher, which reads commits through ``load_blobs`` with a ``BlobCache`` so that only
changed blobs are parsed and validated again. Each file is read and parsed once; once
validated, a file keeps its models, its diagnostics and the few positions later rules
can name (``core.crosscheck.keep``), never its plain values or every value's position.

It must not print, exit, or decide anything about plans. It never raises for bad
input: a repo that cannot be read is a diagnostic too.

Documents are validated in pydantic's JSON mode on the JSON text of the loaded
values: the loader only produces JSON-shaped values, and JSON mode gives exactly the
JSON Schema's reading of them (a list fills a tuple, a string fills an enum, and
nothing else is coerced), so the models and ``schemas/desired-state.schema.json``
judge the same input.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from reconciler.core import crosscheck
from reconciler.core.desired import (
    API_VERSION,
    DOCUMENT_KINDS,
    MAX_SAFE_INTEGER,
    CorestoreCapability,
    DesiredState,
    EvidenceKind,
    Grant,
    Hold,
    LocatedError,
    LocatedErrors,
    Route,
    Service,
    Settings,
    SourceRef,
    Verification,
    state_dir_message,
)
from reconciler.core.diagnostics import Diagnostic, field_path, sorted_diagnostics
from reconciler.core.modelpaths import annotation_at
from reconciler.core.names import Capability
from reconciler.core.sanitize import safe
from reconciler.shell import gitrepo, heap, loading
from reconciler.shell.loading import LoadedFile, PathKey, YamlDocument


@dataclass(frozen=True, slots=True)
class LoadResult:
    """The outcome of validating a repo.

    ``state`` is None whenever ``diagnostics`` is not empty: a desired state with a
    known problem is never handed to planning. ``documents`` holds every document
    that passed its own model, with the positions its later rules need
    (``crosscheck.keep``), even when the repo as a whole did not.
    """

    state: DesiredState | None
    diagnostics: tuple[Diagnostic, ...]
    files: tuple[str, ...]
    documents: tuple[crosscheck.Located, ...] = ()

    @property
    def valid(self) -> bool:
        return self.state is not None and not self.diagnostics


@dataclass(frozen=True, slots=True)
class _FileOutcome:
    """What is kept of a validated file: its models, each with the few positions later
    rules can name (``crosscheck.keep``), and its diagnostics -- not its plain values,
    nor the position of each (at fleet scale they were most of a loaded file's memory,
    and the watcher's ``BlobCache`` keeps outcomes from one load to the next)."""

    path: str
    documents: tuple[crosscheck.Located, ...]
    diagnostics: tuple[Diagnostic, ...]


def load_repo(root: Path, *, exclude: frozenset[str] = frozenset()) -> LoadResult:
    """Load and validate every YAML file under ``root``; never raises for bad input.

    ``exclude``: root-relative paths that are not desired state (files git ignores, for
    ``plan --worktree``); never read. ``LoadResult.files`` lists the files read, so a
    caller needs no second walk of the directory.
    """
    refused = check_root(root)
    if refused is not None:
        return refused
    paths, problems = loading.discover(root)
    if exclude:
        paths = tuple(p for p in paths if p not in exclude)
    return load_files(root, paths, problems)


def load_files(root: Path, paths: Sequence[str],
               problems: Sequence[Diagnostic] = ()) -> LoadResult:
    """Validate the files ``paths`` (repo-relative, as ``loading.discover`` lists them)
    under ``root``, each read and parsed once; ``problems`` are added (what the walk
    refused)."""
    with heap.bulk(keep=True):  # see ``load_blobs``
        outcomes = {outcome.path: outcome
                    for outcome in (_validate_loaded(loading.load_file(root, rel))
                                    for rel in paths)}
        return _combine(root, tuple(paths), outcomes, problems)


@dataclass(slots=True)
class BlobCache:
    """Per-file validation results of a commit's files, by (path, blob id): a blob id
    names its content, so a hit is exact (no stamps, no racy window). Keep one per
    watched repo and pass it to every ``load_blobs`` call."""

    outcomes: dict[tuple[str, str], _FileOutcome] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0


def load_blobs(root: Path, files: Sequence[tuple[str, str]],
               read: Callable[[Sequence[str]], Sequence[bytes | int]],
               problems: Sequence[Diagnostic] = (), *,
               cache: BlobCache | None = None) -> LoadResult:
    """Validate files that are not read from the disk: ``files`` are (repo-relative path,
    blob id) pairs and ``read`` returns the bytes of the blob ids it is given (or a size,
    for a blob too large to read), all in one call. Diagnostics name the path and line
    exactly as ``load_repo`` does; ``problems`` are added (files refused before reading).

    The cyclic collector is paused throughout (``shell.heap.bulk``): 10,000 files make
    about 660,000 container allocations, all kept, and no cycle (a full collection
    right after finds nothing), yet the collector's walks of the growing heap, and the
    walk of everything built at the first collection after, were 40% of the load's CPU
    (``docs/scaling.md``, round 3). Kept, so frozen out of later walks (``keep``).
    """
    with heap.bulk(keep=True):
        return _load_blobs(root, files, read, problems, cache)


def _load_blobs(root: Path, files: Sequence[tuple[str, str]],
                read: Callable[[Sequence[str]], Sequence[bytes | int]],
                problems: Sequence[Diagnostic], cache: BlobCache | None) -> LoadResult:
    outcomes: dict[str, _FileOutcome] = {}
    todo: list[tuple[str, str]] = []
    for rel, oid in files:
        hit = cache.outcomes.get((rel, oid)) if cache is not None else None
        if cache is not None and hit is not None:
            cache.hits += 1
            outcomes[rel] = hit
        else:
            todo.append((rel, oid))
    if todo:
        blobs = read([oid for _, oid in todo])
        for (rel, oid), data in zip(todo, blobs, strict=True):
            outcome = _validate_loaded(loading.load_bytes(rel, data))
            outcomes[rel] = outcome
            if cache is not None:
                cache.misses += 1
                cache.outcomes[(rel, oid)] = outcome
    if cache is not None:
        keep = set(files)
        for gone in set(cache.outcomes) - keep:
            del cache.outcomes[gone]
    return _combine(root, tuple(sorted(outcomes)), outcomes, problems)


def _combine(root: Path, paths: tuple[str, ...], outcomes: Mapping[str, _FileOutcome],
             problems: Sequence[Diagnostic]) -> LoadResult:
    repo = root.as_posix()
    diagnostics: list[Diagnostic] = list(problems)
    located: list[crosscheck.Located] = []
    for rel in paths:
        diagnostics.extend(outcomes[rel].diagnostics)
        located.extend(outcomes[rel].documents)
    diagnostics.extend(crosscheck.check(located, complete=not diagnostics, repo=repo))
    if not diagnostics:
        diagnostics.extend(_state_dir_problems(root, located))
    ordered = sorted_diagnostics(diagnostics)
    state = None if ordered else _assemble(located)
    return LoadResult(state, ordered, paths, tuple(located))


def _state_dir_problems(root: Path, located: Sequence[crosscheck.Located]) -> list[Diagnostic]:
    """A ``stateDir`` that lands inside the repo on disk (an absolute path into it, a
    ``..`` path back into the git work tree, a link): the model refuses the plain
    relative ones already, with no disk access."""
    found: list[Diagnostic] = []
    for doc in located:
        settings = doc.document
        if not isinstance(settings, Settings) or settings.state_dir is None:
            continue
        try:
            inside = gitrepo.state_dir_inside_repo(root, Path(settings.state_dir))
        except (gitrepo.GitError, OSError, RuntimeError):
            continue  # unknowable here; the engine asks again before writing
        if inside:
            found.append(doc.at(("stateDir",), state_dir_message(settings.state_dir)))
    return found


def check_root(root: Path) -> LoadResult | None:
    """The failed result for a root that is no directory to read (or None when it is)."""
    repo = root.as_posix()
    try:
        if root.is_symlink():
            return _failed(repo, "is a symbolic link; give the repo's real path")
        if not root.is_dir():
            return _failed(repo, "is not a directory" if root.exists() else "does not exist")
    except OSError as exc:
        return _failed(repo, f"cannot be read: {exc.strerror or type(exc).__name__}")
    return None


def _failed(repo: str, message: str) -> LoadResult:
    return LoadResult(None, (Diagnostic(repo, 0, 0, "", message),), ())


def validate_file(loaded: LoadedFile) -> tuple[tuple[crosscheck.Located, ...],
                                               tuple[Diagnostic, ...]]:
    """One loaded file's documents, each validated against its kind's model: the
    documents that passed, and every problem (the file's own first)."""
    outcome = _validate_loaded(loaded)
    return outcome.documents, outcome.diagnostics


def _validate_loaded(loaded: LoadedFile) -> _FileOutcome:
    documents: list[crosscheck.Located] = []
    diagnostics: list[Diagnostic] = list(loaded.diagnostics)
    for document in loaded.documents:
        model, problems = validate_document(document)
        diagnostics.extend(problems)
        if model is not None:
            documents.append(crosscheck.keep(
                model, document.path, document.line, document.column, document.positions))
    return _FileOutcome(loaded.path, tuple(documents), tuple(diagnostics))


#: Each kind of document but Settings: the DesiredState field its models are collected in,
#: in file order, and the key its first place is recorded under in ``DesiredState.sources``
#: (the engine and the views look a document's file and line up by that key).
_COLLECTED: Final[tuple[tuple[type[Any], str, Callable[[Any], str]], ...]] = (
    (Service, "services", lambda m: f"Service/{m.name}"),
    (Grant, "grants", lambda m: f"Grant/{m.user_id}"),
    (Hold, "holds", lambda m: f"Hold/{m.service}/{m.digest}"),
    (Route, "routes", lambda m: f"Route/{m.name}"),
    (Verification, "verifications", lambda m: f"Verification/{m.name}"),
)


def _assemble(located: Sequence[crosscheck.Located]) -> DesiredState | None:
    settings = [d.document for d in located if isinstance(d.document, Settings)]
    if len(settings) != 1:
        return None
    sources: dict[str, SourceRef] = {}
    collected: dict[str, list[Any]] = {name: [] for _, name, _ in _COLLECTED}
    for doc in located:
        model, key = doc.document, "Settings"
        for kind, name, key_of in _COLLECTED:
            if isinstance(model, kind):
                collected[name].append(model)
                key = key_of(model)
                break
        sources.setdefault(key, SourceRef(path=doc.path, line=doc.line))
    return DesiredState(settings=settings[0], sources=sources,
                        **{name: tuple(models) for name, models in collected.items()})


# --------------------------------------------------------------------------- documents

_KINDS: Final = tuple(DOCUMENT_KINDS)


def validate_document(
    document: YamlDocument,
) -> tuple[Settings | Service | Grant | Hold | Route | Verification | None,
           list[Diagnostic]]:
    """One document against its kind's model: the model, or the diagnostics."""
    value = document.value

    def at(loc: PathKey, message: str, *, key: bool = False) -> Diagnostic:
        line, column = document.position_of(loc, key=key)
        return Diagnostic(document.path, line, column, field_path(loc), message)

    if not isinstance(value, dict):
        return None, [at((), f"a document must be a mapping with apiVersion and kind "
                             f"(this one is {_describe(value)})")]
    problems: list[Diagnostic] = []
    kind = value.get("kind")
    if "kind" not in value:
        problems.append(at(("kind",), "required key `kind` is missing "
                                      f"(one of {', '.join(_KINDS)})"))
    elif not isinstance(kind, str) or kind not in DOCUMENT_KINDS:
        shown = repr(kind) if isinstance(kind, str) else _describe(kind)
        problems.append(at(("kind",), _with_hint(
            f"unknown kind {shown}; expected one of {', '.join(_KINDS)}", kind, _KINDS)))
    if "apiVersion" not in value:
        problems.append(at(("apiVersion",), f"required key `apiVersion` is missing "
                                            f"(expected {API_VERSION})"))
    elif value["apiVersion"] != API_VERSION:
        api = value["apiVersion"]
        shown = repr(api) if isinstance(api, str) else _describe(api)
        problems.append(at(("apiVersion",), f"unsupported apiVersion {shown}; "
                                            f"expected {API_VERSION}"))
    if problems:
        return None, problems

    model_type = DOCUMENT_KINDS[str(kind)]
    if model_type is Service and "egress" in value and value["egress"] is None:
        problems.append(at(("egress",), "is empty (null), which is ambiguous: omit the key to "
                                        "leave the live egress alone, or write `egress: []` "
                                        "to revoke all"))
    try:
        model = model_type.model_validate_json(_json_text(value))
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            ctx = error.get("ctx") or {}
            several = ctx.get("error") if error["type"] == "value_error" else None
            if isinstance(several, LocatedErrors):
                for where, text in several.problems:
                    problems.append(at((*tuple(error["loc"]), *where), text, key=False))
                continue
            loc, message, on_key = _explain(error, model_type)
            problems.append(at(loc, message, key=on_key))
        return None, problems
    return (None, problems) if problems else (model, problems)


_ENCODE: Final = msgspec.json.Encoder().encode


def _json_text(value: object) -> bytes | str:
    """The JSON text of a loaded document's values: msgspec's, a tenth of ``json.dumps``'s
    cost (10,000 documents a load); ``json.dumps`` for what msgspec cannot encode (a
    lone surrogate from a ``"\\ud800"`` escape). Either text reads back as the same
    values: floats keep their ``.`` or exponent, integers of any size stay integers."""
    try:
        return _ENCODE(value)
    except (UnicodeEncodeError, OverflowError, msgspec.EncodeError):
        return json.dumps(value)


# --------------------------------------------------------------------------- messages

_IDENTIFIER = ("must be a lower-case identifier: a-z, 0-9, '.', '_' and '-', starting and "
               "ending with a letter or digit, at most 63 characters")
_LABEL = ("must be a DNS label: a-z, 0-9 and '-', starting and ending with a letter or "
          "digit, at most 63 characters")
_DNS = ("must be a bare lower-case DNS name (no scheme, port, path, wildcard, trailing dot "
        "or IP address)")
_ROUTE_HOST = ("must be a lower-case DNS name like shop.example.net, or `*.` and one for "
               "one label like *.example.net (no scheme, port, path, upper case or trailing "
               "dot)")
_PATTERNS: Final[dict[str, str]] = {
    "host": _DNS,
    "hostname": _ROUTE_HOST, "domains": _ROUTE_HOST,
    "path": ("must be an absolute request path like /api/ (no query, fragment, space or "
             "control character)"),
    "gateway": _DNS,
    "digest": "must be sha256:<64 lower-case hex> (one line, no upper case, no newline)",
    "registryHost": "must be a canonical OCI registry host: a lower-case host name with an "
                    "optional :port (no scheme, path or upper case)",
    "repository": "must be a canonical OCI repository: lower-case path components like "
                  "shop/checkout (a-z, 0-9, separators '.', '_', '-', '/')",
    "tag": "must be an OCI tag: letters, digits, '_', '.' and '-', at most 128 characters, "
           "not starting with '.' or '-'",
    "name": _IDENTIFIER, "serviceId": _IDENTIFIER, "appId": _IDENTIFIER,
    "userId": _IDENTIFIER, "service": _IDENTIFIER, "clusters": _IDENTIFIER,
    "url": "must be an http(s) URL like https://cp.example.net:8443/path",
    "resolve": "must be an IPv4 or IPv6 address",
    "caFile": "must be a file path on one line",
    "stateDir": "must be a directory path on one line",
    "statementDigest": "must be sha256:<64 lower-case hex> (one line, no upper case, no newline)",
    "subjectDigest": "must be sha256:<64 lower-case hex> (one line, no upper case, no newline)",
    "version": "must be a canonical semantic version like 1.0.0 or 2.1.0-rc.1 (no leading "
               "'v', no leading zeros)",
    "namespace": _LABEL, "resourceName": _LABEL,
    "verifier": "must name the verifier on one line (not blank, no control characters)",
}
#: Closed sets other than capabilities, by field name, for "did you mean".
_CHOICES: Final[dict[str, tuple[str, ...]]] = {
    "kind": tuple(k.value for k in EvidenceKind),
    "capability": tuple(c.value for c in CorestoreCapability),
}
#: Fields whose values are never echoed: a pasted secret must not be printed back.
_SECRET_FIELDS: Final = frozenset({"tokenEnv", "keyFileEnv"})
_SECRET_KEYS: Final = ("token", "secret", "password", "apikey", "privatekey", "jwt", "key")
_EXPECTED: Final[dict[str, str]] = {
    "int_type": "a whole number", "int_from_float": "a whole number",
    "int_parsing": "a whole number", "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "tuple_type": "a list", "list_type": "a list",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "dict_type": "a mapping",
}


def _explain(error: ErrorDetails, model: type[BaseModel]) -> tuple[PathKey, str, bool]:
    """(where, sentence, whether to point at the key rather than the value)."""
    loc: PathKey = tuple(error["loc"])
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error.get("input")
    name = next((p for p in reversed(loc) if isinstance(p, str)), "")

    if kind == "extra_forbidden":
        return loc, _unknown_key(name, _aliases_at(model, loc[:-1])), True
    if kind == "missing":
        return loc, f"required key `{name}` is missing", False
    if kind == "value_error" and isinstance(ctx.get("error"), LocatedError):
        located = ctx["error"]
        return (*loc, *located.loc), str(located), False
    if kind == "string_pattern_mismatch":
        sentence = _PATTERNS.get(name, f"must match {ctx.get('pattern')}")
        if name in _SECRET_FIELDS:
            return loc, ("must be the NAME of an environment variable (like RECONCILE_TOKEN: "
                         "A-Z, 0-9, _), never the secret itself; the value is not shown"), False
        return loc, (f"{_show(value)} {sentence}{_non_ascii_note(value)}"
                     f"{_lower_case_note(value, ctx.get('pattern'))}"), False
    if kind in _EXPECTED:
        if kind == "string_type" and name in _PATTERNS and not isinstance(value, list | dict):
            return loc, f"{_PATTERNS[name]} (got {_describe(value)})", False
        if name in _SECRET_FIELDS:
            return loc, f"must be {_EXPECTED[kind]}", False
        return loc, f"must be {_EXPECTED[kind]} (got {_describe(value)})", False
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        if name == "port":
            return loc, f"must be a port number from 1 to 65535 (got {_describe(value)})", False
        if name == "verifiedAt":
            return loc, ("must be when it was verified in epoch milliseconds, a whole number "
                         f"from 1 to {MAX_SAFE_INTEGER} (got {_describe(value)})"), False
        bound = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
                 "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}[kind]
        return loc, f"must be {bound[0]} {ctx.get(bound[1])} (got {_describe(value)})", False
    if kind in ("too_long", "string_too_long"):
        if isinstance(value, list):
            return loc, (f"has {ctx.get('actual_length')} entries; at most "
                         f"{ctx.get('max_length')} are allowed"), False
        return loc, f"is too long (at most {ctx.get('max_length')} characters)", False
    if kind in ("string_too_short", "too_short"):
        return loc, "must not be empty", False
    if kind == "enum":
        if name == "capabilities":
            known = [c.value for c in Capability]
            return loc, _with_hint(f"{_show(value)} is not a deployment capability; expected one "
                                   f"of {', '.join(known)}", value, known), False
        return loc, _with_hint(f"{_show(value)} is not allowed; expected one of "
                               f"{ctx.get('expected')}", value, _CHOICES.get(name, ())), False
    if kind == "literal_error":
        return loc, f"must be {ctx.get('expected')} (got {_describe(value)})", False
    return loc, str(error.get("msg", "is invalid")), False


def _unknown_key(name: str, aliases: Sequence[str]) -> str:
    message = f"unknown key `{name}`"
    if name.replace("_", "").replace("-", "").lower().endswith(_SECRET_KEYS):
        message += ("; settings hold no secrets: put the secret in an environment variable "
                    "and name that variable (tokenEnv, keyFileEnv)")
    close = difflib.get_close_matches(name, aliases, n=1, cutoff=0.6)
    if close:
        return f"{message}; did you mean `{close[0]}`?"
    if aliases:
        return f"{message} (expected one of: {', '.join(sorted(aliases))})"
    return message


def _with_hint(message: str, value: object, choices: Sequence[str]) -> str:
    if isinstance(value, str):
        close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
        if close:
            return f"{message}; did you mean `{close[0]}`?"
    return message


def _aliases_at(model: type[BaseModel], loc: PathKey) -> list[str]:
    """The keys the model accepts at ``loc`` (for "did you mean")."""
    current = annotation_at(model, tuple(loc))
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_show(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _show(value: object) -> str:
    return safe(repr(value), limit=80)


def _lower_case_note(value: object, pattern: object) -> str:
    """The value in lower case, when that is all it lacks (``Shop.Example.net``)."""
    if not isinstance(value, str) or not isinstance(pattern, str) or value == value.lower():
        return ""
    try:
        fits = re.fullmatch(pattern, value.lower()) is not None
    except re.error:
        return ""
    return f"; in lower case: {value.lower()}" if fits else ""


def _non_ascii_note(value: object) -> str:
    if not isinstance(value, str):
        return ""
    odd = next((ch for ch in value if ord(ch) > 127), None)
    if odd is None:
        return ""
    return f"; it contains the non-ASCII character {odd!r} (U+{ord(odd):04X})"
