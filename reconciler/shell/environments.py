"""Finding and reading a repo's environments: ``pipeline.yaml``, ``freezes/``, ``policies/``.

Owns where the pipeline root is (the nearest directory at or above PATH, inside the git
work tree, holding ``pipeline.yaml``), which environment a command means (``--env NAME``;
without it, the environment PATH lies in, else the only one), and reading the pipeline
root's documents -- from the commit HEAD is at, like the desired state (a freeze or a
policy counts once it is committed), or from disk outside git -- with every problem as a
``Diagnostic`` naming file:line.

A repo without ``pipeline.yaml`` has no environments: every command behaves exactly as it
did before (``select`` returns None and the caller uses its own root).

Must not: plan, judge or talk to the live world (the engine sequences that); the rules
are ``core.promotion``/``core.windows``/``core.policy``'s.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ValidationError

from reconciler.core.desired import LocatedError, LocatedErrors
from reconciler.core.diagnostics import NO_POSITION, Diagnostic, Severity
from reconciler.core.pipeline import (
    FREEZE_DIR,
    PIPELINE_FILE,
    PIPELINE_KINDS,
    POLICY_DIR,
    Environment,
    Freeze,
    Pipeline,
    Policy,
)
from reconciler.shell import gitrepo, loading
from reconciler.shell.loading import YamlDocument


class PipelineError(Exception):
    """A usage problem choosing an environment (exit 64) or reading the pipeline (1)."""

    def __init__(self, message: str, *, usage: bool = False,
                 diagnostics: Sequence[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.usage = usage
        self.diagnostics = tuple(diagnostics)


@dataclass(frozen=True)
class Rules:
    """The pipeline root's documents as one commit holds them."""

    pipeline: Pipeline | None = None
    freezes: tuple[tuple[Freeze, str], ...] = ()  # (document, file)
    policies: tuple[tuple[Policy, str, int], ...] = ()  # (document, file, line)
    diagnostics: tuple[Diagnostic, ...] = ()
    commit: str | None = None
    #: what ``validate`` says without failing (a freeze whose end is past)
    warnings: tuple[Diagnostic, ...] = ()
    #: rules over the CEL budget: ``validate`` fails on them, but the pipeline stays
    #: readable -- a plan denies the promotions such a rule covers without running it
    #: (``policy_denied … budget exceeded``), and every other change plans as usual
    over_budget: tuple[Diagnostic, ...] = ()


@dataclass(frozen=True)
class Selected:
    """The environment a command runs in: its desired-state root, the one before it (a
    release comes from there), and the pipeline root its rules are read from."""

    pipeline_root: Path
    environment: Environment
    root: Path
    upstream: Environment | None = None
    upstream_root: Path | None = None
    override: str | None = None  # --override-window REASON
    rules: Rules = field(default_factory=Rules)

    @property
    def name(self) -> str:
        return self.environment.name


def find_pipeline_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding ``pipeline.yaml``, never above
    the git work tree (or the filesystem root outside git)."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for directory in (here, *here.parents):
        if (directory / PIPELINE_FILE).is_file():
            return directory
        if os.path.lexists(directory / ".git"):
            return None
    return None


def _wanted(rel: str) -> bool:
    parts = rel.split("/")
    if len(parts) == 1:
        return rel == PIPELINE_FILE
    return len(parts) == 2 and parts[0] in (FREEZE_DIR, POLICY_DIR) \
        and parts[1].endswith((".yaml", ".yml")) and not parts[1].startswith(".")


def _files(root: Path) -> tuple[list[loading.LoadedFile], str | None]:
    """The pipeline root's files, read from HEAD's commit in git (tracked files only),
    else from disk."""
    commit = None
    try:
        commit = gitrepo.provenance(root).commit
    except gitrepo.GitError:
        commit = None
    if commit is not None:
        entries = [e for e in gitrepo.tree(root, commit) if _wanted(e.path)
                   and e.mode.startswith("100")]
        blobs = gitrepo.read_blobs(root, [e.oid for e in entries], limit=loading.MAX_FILE_BYTES)
        return [loading.load_bytes(e.path, data) for e, data in zip(entries, blobs,
                                                                     strict=True)], commit
    found: list[str] = []
    if (root / PIPELINE_FILE).is_file():
        found.append(PIPELINE_FILE)
    for sub in (FREEZE_DIR, POLICY_DIR):
        if (root / sub).is_dir():
            found.extend(f"{sub}/{p.name}" for p in sorted((root / sub).iterdir())
                         if _wanted(f"{sub}/{p.name}") and p.is_file())
    return [loading.load_file(root, rel) for rel in found], None


def validate(document: YamlDocument, model: type[BaseModel]) -> tuple[BaseModel | None,
                                                                     list[Diagnostic]]:
    """One pipeline-root document against ``model``, errors at their file:line."""

    def at(loc: tuple[str | int, ...], message: str) -> Diagnostic:
        line, column = document.position_of(loc)
        shown = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc) \
            .replace(".[", "[")
        return Diagnostic(document.path, line, column, shown, message)

    try:
        return model.model_validate_json(json.dumps(document.value)), []
    except ValidationError as exc:
        problems: list[Diagnostic] = []
        for error in exc.errors(include_url=False):
            loc = tuple(error["loc"])
            ctx = error.get("ctx") or {}
            raised = ctx.get("error")
            if isinstance(raised, LocatedErrors):
                problems.extend(at((*loc, *w), t) for w, t in raised.problems)
            elif isinstance(raised, LocatedError):
                problems.append(at((*loc, *raised.loc), str(raised)))
            elif error["type"] == "extra_forbidden":
                problems.append(at(loc, "unknown key"))
            elif error["type"] == "missing":
                problems.append(at(loc, "required key is missing"))
            else:
                message = str(error["msg"]).removeprefix("Value error, ")
                problems.append(at(loc, message))
        return None, problems


def read_rules(pipeline_root: Path, *, now_ms: int | None = None) -> Rules:
    """Every document of the pipeline root, validated; problems as diagnostics, and as
    warnings what is valid but likely a mistake (a freeze that ended before ``now_ms``,
    the wall clock by default: it holds nothing and can be removed)."""
    files, commit = _files(pipeline_root)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    warnings: list[Diagnostic] = []
    problems: list[Diagnostic] = []
    over: list[Diagnostic] = []
    documents: list[tuple[Policy, YamlDocument]] = []
    freeze_documents: list[tuple[Freeze, YamlDocument]] = []
    pipeline: Pipeline | None = None
    freezes: list[tuple[Freeze, str]] = []
    policies: list[tuple[Policy, str, int]] = []
    for loaded in files:
        problems.extend(loaded.diagnostics)
        for document in loaded.documents:
            value = document.value
            kind = value.get("kind") if isinstance(value, dict) else None
            expected = "Pipeline" if loaded.path == PIPELINE_FILE else \
                "Freeze" if loaded.path.startswith(FREEZE_DIR + "/") else "Policy"
            if kind != expected:
                problems.append(Diagnostic(document.path, document.line, document.column,
                                           "kind", f"expected kind {expected} in this file "
                                           f"(found {kind!r})"))
                continue
            model, found = validate(document, PIPELINE_KINDS[expected])
            problems.extend(found)
            if isinstance(model, Pipeline):
                if pipeline is not None:
                    problems.append(Diagnostic(document.path, document.line, document.column,
                                               "", "a second Pipeline document; one only"))
                pipeline = model
            elif isinstance(model, Freeze):
                freezes.append((model, document.path))
                freeze_documents.append((model, document))
                if not model.holds_at(now):
                    line, column = document.position_of(("until",))
                    warnings.append(Diagnostic(
                        document.path, line, column, "until",
                        f"this freeze ended at {model.until}: it holds nothing (remove it, "
                        "or `reconcile unfreeze`)", severity=Severity.WARNING))
            elif isinstance(model, Policy):
                problems.extend(_rule_problems(model, document))
                over.extend(_over_budget(model, document))
                documents.append((model, document))
                policies.append((model, document.path, document.line))
    if pipeline is None and not problems:
        problems.append(Diagnostic(PIPELINE_FILE, NO_POSITION, NO_POSITION, "",
                                   "no Pipeline document (is pipeline.yaml committed?)"))
    problems.extend(_policy_names(documents))
    if pipeline is not None:
        names = {e.name for e in pipeline.environments}
        for policy, document in documents:
            for index, env in enumerate(policy.environments):
                if env not in names:
                    # fail-closed: a rule for a mistyped environment is never enforced
                    line, column = document.position_of(("environments", index))
                    problems.append(Diagnostic(
                        document.path, line, column, f"environments[{index}]",
                        f"{env!r} is no environment of the pipeline "
                        f"({', '.join(sorted(names))}): policy {policy.name!r} would "
                        "never be enforced there"))
        for freeze, document in freeze_documents:
            for index, env in enumerate(freeze.environments):
                if env not in names:
                    line, column = document.position_of(("environments", index))
                    problems.append(Diagnostic(document.path, line, column,
                                               f"environments[{index}]",
                                               f"{env!r} is no environment of the pipeline "
                                               f"({', '.join(sorted(names))})"))
    return Rules(pipeline=pipeline, freezes=tuple(freezes), policies=tuple(policies),
                 diagnostics=tuple(sorted(problems)), commit=commit,
                 warnings=tuple(sorted(warnings)), over_budget=tuple(sorted(over)))


def _rule_problems(policy: Policy, document: YamlDocument) -> list[Diagnostic]:
    """Each rule that does not compile, does not type-check against the documented
    variables, or shares its name with an earlier rule, at its line."""
    from reconciler.core import policy as cel  # the CEL engine loads only when asked

    out: list[Diagnostic] = []
    seen: dict[str, int] = {}
    for index, rule in enumerate(policy.rules):
        if rule.name in seen:
            line, column = document.position_of(("rules", index, "name"))
            out.append(Diagnostic(document.path, line, column, f"rules[{index}].name",
                                  f"rule {rule.name!r} is named twice (also rules"
                                  f"[{seen[rule.name]}]): a blocker names its rule"))
        seen.setdefault(rule.name, index)
        error = cel.compile_error(rule.expression)
        said = f"rule {rule.name!r} does not compile: {error}" if error is not None else None
        if said is None:
            checked = cel.check_error(rule.expression)
            said = None if checked is None else f"rule {rule.name!r}: {checked}"
        if said is not None:
            line, column = document.position_of(("rules", index, "expression"))
            out.append(Diagnostic(document.path, line, column,
                                  f"rules[{index}].expression", said))
    return out


def _over_budget(policy: Policy, document: YamlDocument) -> list[Diagnostic]:
    """Each rule whose cost bound is over the budget, at its line."""
    from reconciler.core import policy as cel

    out: list[Diagnostic] = []
    for index, rule in enumerate(policy.rules):
        error = cel.budget_error(rule.expression)
        if error is not None:
            line, column = document.position_of(("rules", index, "expression"))
            out.append(Diagnostic(document.path, line, column, f"rules[{index}].expression",
                                  f"rule {rule.name!r}: {error}; a plan denies every "
                                  "promotion it covers without running it"))
    return out


def _policy_names(documents: Sequence[tuple[Policy, YamlDocument]]) -> list[Diagnostic]:
    """A policy name used twice (a blocker names its policy), at the second one."""
    out: list[Diagnostic] = []
    seen: dict[str, str] = {}
    for policy, document in documents:
        if policy.name in seen:
            line, column = document.position_of(("name",))
            out.append(Diagnostic(document.path, line, column, "name",
                                  f"policy {policy.name!r} is also defined in "
                                  f"{seen[policy.name]}: a blocker names its policy"))
        seen.setdefault(policy.name, document.path)
    return out


def select(start: Path, name: str | None, *, override: str | None = None) -> Selected | None:
    """The environment a command started at ``start`` with ``--env name`` means, or None
    when there is no pipeline (and no ``--env``): the repo has one root, as before."""
    pipeline_root = find_pipeline_root(start)
    if pipeline_root is None:
        if name is not None:
            raise PipelineError(f"--env {name}: no {PIPELINE_FILE} at or above {start} "
                                    "(a repo with environments names them there)", usage=True)
        return None
    rules = read_rules(pipeline_root)
    if rules.pipeline is None or rules.diagnostics:
        raise PipelineError(f"{pipeline_root / PIPELINE_FILE}: the pipeline is invalid "
                                f"({len(rules.diagnostics)} problem(s))",
                                diagnostics=rules.diagnostics)
    pipeline = rules.pipeline
    known = ", ".join(e.name for e in pipeline.environments)
    if name is not None:
        environment = pipeline.named(name)
        if environment is None:
            raise PipelineError(f"--env {name}: no such environment (the pipeline has: "
                                    f"{known})", usage=True)
    else:
        here = start.resolve()
        inside = [e for e in pipeline.environments
                  if here == (pipeline_root / e.path).resolve()
                  or (pipeline_root / e.path).resolve() in here.parents]
        if inside:
            environment = inside[0]
        elif len(pipeline.environments) == 1:
            environment = pipeline.environments[0]
        else:
            raise PipelineError(f"this repo has several environments ({known}): choose "
                                    "one with --env NAME", usage=True)
    upstream = pipeline.upstream_of(environment.name)
    root = pipeline_root / environment.path
    if not root.is_dir():
        raise PipelineError(f"environment {environment.name}: {root} is not a directory "
                                f"({pipeline_root / PIPELINE_FILE})")
    return Selected(pipeline_root=pipeline_root, environment=environment, root=root,
                    upstream=upstream,
                    upstream_root=pipeline_root / upstream.path if upstream else None,
                    override=override, rules=rules)


def refresh(selected: Selected) -> Selected:
    """``selected`` with its rules read again (the watcher, each cycle: a freeze committed
    while it runs counts at its next plan)."""
    rules = read_rules(selected.pipeline_root)
    if rules.pipeline is None:
        return selected
    return Selected(pipeline_root=selected.pipeline_root, environment=rules.pipeline.named(
        selected.name) or selected.environment, root=selected.root, upstream=selected.upstream,
        upstream_root=selected.upstream_root, override=selected.override, rules=rules)


# -- freeze / unfreeze --------------------------------------------------------------------

def _git(root: Path, *args: str) -> str:
    import subprocess  # the shell's git: add and commit the files this module wrote

    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise PipelineError(f"git {args[0]} failed in {root}: "
                            f"{(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def commit_files(root: Path, paths: Sequence[str], message: str) -> str:
    """Stage ``paths`` (relative to ``root``; deletions too) and commit only them; the
    new commit's id. Other staged or modified files are left as they are."""
    _git(root, "add", "--all", "--", *paths)
    _git(root, "commit", "-q", "-m", message, "--only", "--", *paths)
    return _git(root, "rev-parse", "HEAD").strip()


def freeze_document(reason: str, until: str | None, environments: Sequence[str]) -> str:
    """The YAML of a ``Freeze`` (JSON strings are YAML: no quoting surprises); without
    ``until`` it lasts until it is removed."""
    lines = ["apiVersion: reconcile/v1", "kind: Freeze", f"reason: {json.dumps(reason)}"]
    if until is not None:
        lines.append(f"until: {json.dumps(until)}")
    lines.append("environments: [" + ", ".join(json.dumps(e) for e in environments) + "]")
    return "\n".join(lines) + "\n"


def write_freeze(pipeline_root: Path, name: str, reason: str, until: str | None,
                 environments: Sequence[str], *, commit: bool) -> tuple[str, str | None]:
    """Write ``freezes/NAME.yaml`` (validated first: nothing is written when it would not
    load) and commit it; the file and the commit."""
    text = freeze_document(reason, until, environments)
    rel = f"{FREEZE_DIR}/{name}.yaml"
    for document in loading.load_bytes(rel, text.encode()).documents:
        _model, problems = validate(document, Freeze)
        if problems:
            raise PipelineError("; ".join(p.render() for p in problems), usage=True)
    path = pipeline_root / rel
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    which = ", ".join(environments) or "every environment"
    ends = f"until {until}" if until else "until unfrozen"
    made = commit_files(pipeline_root, [rel], f"freeze {which}: {reason} ({ends})") \
        if commit else None
    return rel, made


def remove_freezes(pipeline_root: Path, environment: str, *,
                   commit: bool) -> tuple[list[str], str | None]:
    """Delete every committed freeze that covers ``environment`` (a freeze of several
    environments loses that one only) and commit; the files touched and the commit."""
    rules = read_rules(pipeline_root)
    touched: list[str] = []
    for freeze, rel in rules.freezes:
        if not freeze.covers(environment):
            continue
        path = pipeline_root / rel
        rest = [e for e in freeze.environments if e != environment]
        if freeze.environments and rest:
            path.write_text(freeze_document(freeze.reason, freeze.until, rest),
                            encoding="utf-8")
        elif path.exists():
            path.unlink()
        touched.append(rel)
    made = commit_files(pipeline_root, touched, f"unfreeze {environment}") \
        if commit and touched else None
    return touched, made
