"""Run a GitHub Actions job's steps here, as a runner would, against local stand-ins.

What it does like GitHub: ``${{ }}`` expressions (contexts ``github``, ``inputs``,
``steps``, ``secrets``, ``vars``, ``env``, ``runner``; a ``workflow_dispatch`` run's
``inputs``; ``&&``, ``||``, ``!``, ``==``,
``!=``; ``always()``, ``success()``, ``failure()``, ``cancelled()``) in ``if:``, ``env:``
and ``with:``; a step's ``if:`` defaulting to ``success()``; ``run:`` scripts through
``bash --noprofile --norc -eo pipefail`` (or ``python`` for ``shell: python``) with
``GITHUB_OUTPUT``, ``GITHUB_ENV`` and ``GITHUB_STEP_SUMMARY`` files; a composite action
(this repository's ``action.yml``) run step by step with its inputs' defaults.

What it stands in for, and how: ``actions/checkout`` and ``actions/setup-python`` are
no-ops (the test prepares the workspace; ``reconcile`` and ``python`` are on PATH);
``actions/upload-artifact``/``download-artifact`` copy files into/out of an in-memory
store keyed by (run id, name), as GitHub keeps artifacts per run; a ``run:`` step that
only ``pip install``s reconcile is skipped (it is already installed). The process
environment is built from scratch: only what the workflow sets, the runner's ``GITHUB_*``
variables and PATH/HOME, so a secret the docs do not name cannot leak in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
ACTION = ROOT / "action.yml"


def load(path: Path) -> Any:
    return YAML(typ="safe", pure=True).load(path.read_text())


class _Ctx(dict[str, Any]):
    """A context object: missing keys are null ('' here), like GitHub's."""

    def __getattr__(self, name: str) -> Any:
        value = self.get(name, "")
        return _Ctx(value) if isinstance(value, dict) else value


_TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(==|!=|&&|\|\||!|\(|\))|"
                    r"([A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*(?:\(\))?)|"
                    r"(\d+(?:\.\d+)?))")


def evaluate(expression: str, scope: dict[str, Any]) -> Any:
    """A GitHub expression, by translation to Python over ``scope`` (contexts and the
    status functions)."""
    out: list[str] = []
    pos = 0
    text = expression.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot evaluate {expression!r} at {text[pos:]!r}")
        pos = match.end()
        string, op, name, number = match.groups()
        if string is not None:
            out.append(repr(string[1:-1].replace("''", "'")))
        elif op is not None:
            out.append({"&&": " and ", "||": " or ", "!": " not "}.get(op, f" {op} "))
        elif number is not None:
            out.append(number)
        elif name in ("true", "false", "null"):
            out.append({"true": "True", "false": "False", "null": "''"}[name])
        elif name.endswith("()"):
            out.append(f"_{name[:-2]}()")
        else:
            head, *rest = name.split(".")
            out.append(f"_ctx[{head!r}]" + "".join(f".{_attr(p)}" for p in rest))
    return eval("".join(out), {"__builtins__": {}}, scope)


def _attr(name: str) -> str:
    return name.replace("-", "_DASH_")


def _contexts(value: Any) -> Any:
    if isinstance(value, dict):
        return _Ctx({k.replace("-", "_DASH_"): _contexts(v) for k, v in value.items()})
    return value


def interpolate(value: Any, scope: dict[str, Any]) -> str:
    text = str(value)

    def one(match: re.Match[str]) -> str:
        result = evaluate(match.group(1), scope)
        if result is True:
            return "true"
        if result is False or result is None:
            return "false" if result is False else ""
        return str(result)

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


@dataclass
class Runner:
    """One job on one (pretend) runner."""

    workspace: Path
    temp: Path
    bindir: Path
    github: dict[str, Any]
    secrets: dict[str, str] = field(default_factory=dict)
    vars: dict[str, str] = field(default_factory=dict)
    artifacts: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    env_file_values: dict[str, str] = field(default_factory=dict)
    #: a ``workflow_dispatch`` run's inputs (the ``inputs`` context of the job's steps)
    inputs: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    failed: bool = False

    def __post_init__(self) -> None:
        self.temp.mkdir(parents=True, exist_ok=True)
        self.summary = self.temp / "_summary.md"
        self.summary.write_text("")

    # -- contexts -----------------------------------------------------------------------

    def _scope(self, env: dict[str, str], steps: dict[str, Any],
               inputs: dict[str, str] | None = None) -> dict[str, Any]:
        contexts = {"github": self.github, "secrets": self.secrets, "vars": self.vars,
                    "env": env, "steps": steps, "inputs": inputs or {},
                    "runner": {"temp": str(self.temp), "os": "Linux"}}
        failed = self.failed
        return {"_ctx": {k: _contexts(v) for k, v in contexts.items()},
                "_always": lambda: True, "_success": lambda: not failed,
                "_failure": lambda: failed, "_cancelled": lambda: False}

    def process_env(self, env: dict[str, str]) -> dict[str, str]:
        base = {"PATH": f"{self.bindir}{os.pathsep}/usr/bin:/bin", "HOME": str(self.temp),
                "RUNNER_TEMP": str(self.temp), "GITHUB_WORKSPACE": str(self.workspace),
                "GITHUB_STEP_SUMMARY": str(self.summary), "CI": "true",
                "GITHUB_ACTIONS": "true", "NO_COLOR": "1"}
        for key in ("server_url", "api_url", "repository", "run_id", "sha", "ref",
                    "event_path", "event_name", "run_attempt"):
            if key in self.github:
                base["GITHUB_" + key.upper()] = str(self.github[key])
        return {**base, **self.env_file_values, **env}

    # -- running ------------------------------------------------------------------------

    def run_job(self, workflow: dict[str, Any], job: str) -> dict[str, Any]:
        spec = workflow["jobs"][job]
        scope = self._scope({}, {}, dict(self.inputs))
        job_env = {k: interpolate(v, scope) for k, v in (workflow.get("env") or {}).items()}
        job_env.update({k: interpolate(v, self._scope(job_env, {}))
                        for k, v in (spec.get("env") or {}).items()})
        return self.run_steps(spec["steps"], job_env, dict(self.inputs))

    def run_steps(self, steps: list[dict[str, Any]], env: dict[str, str],
                  inputs: dict[str, str] | None) -> dict[str, Any]:
        results: dict[str, Any] = {}
        for number, step in enumerate(steps):
            step_id = step.get("id", f"_step{number}")
            scope = self._scope(env, results, inputs)
            condition = step.get("if", "success()")
            condition = str(condition).strip()
            if condition.startswith("${{") and condition.endswith("}}"):
                condition = condition[3:-2]
            if not evaluate(condition, scope):
                self.log.append(f"skipped: {step.get('name') or step.get('uses')}")
                results[step_id] = {"outputs": {}, "outcome": "skipped"}
                continue
            step_env = {**env, **{k: interpolate(v, scope)
                                  for k, v in (step.get("env") or {}).items()}}
            scope = self._scope(step_env, results, inputs)
            if "uses" in step:
                outputs = self._uses(step, scope, step_env)
            else:
                outputs = self._run(step, step_env)
            results[step_id] = outputs
        return results

    def _uses(self, step: dict[str, Any], scope: dict[str, Any],
              env: dict[str, str]) -> dict[str, Any]:
        uses = str(step["uses"])
        given = {k: interpolate(v, scope) for k, v in (step.get("with") or {}).items()}
        name = uses.split("@")[0]
        self.log.append(f"uses: {uses}")
        if name in ("actions/checkout", "actions/setup-python"):
            return {"outputs": {}, "outcome": "success"}
        if name == "actions/upload-artifact":
            run_id = str(self.github["run_id"])
            source = Path(given["path"])
            self.artifacts[(run_id, given["name"])] = {source.name: source.read_bytes()}
            artifact_id = len(self.artifacts)
            url = (f"{self.github['server_url']}/{self.github['repository']}/actions/runs/"
                   f"{run_id}/artifacts/{artifact_id}")
            return {"outputs": {"artifact-id": str(artifact_id), "artifact-url": url},
                    "outcome": "success"}
        if name == "actions/download-artifact":
            run_id = given.get("run-id") or str(self.github["run_id"])
            files = self.artifacts.get((run_id, given["name"]))
            if files is None:
                self.failed = True
                return {"outputs": {}, "outcome": "failure"}
            target = Path(given.get("path") or self.workspace)
            target.mkdir(parents=True, exist_ok=True)
            for file_name, data in files.items():
                (target / file_name).write_bytes(data)
            return {"outputs": {"download-path": str(target)}, "outcome": "success"}
        if re.fullmatch(r"[\w.-]+/reconcile", name) or uses == "./":
            return self._composite(load(ACTION), given, env)
        raise AssertionError(f"no stand-in for {uses}")

    def _composite(self, action: dict[str, Any], given: dict[str, str],
                   env: dict[str, str]) -> dict[str, Any]:
        inputs: dict[str, str] = {}
        for key, spec in action.get("inputs", {}).items():
            if key in given:
                inputs[key] = given[key]
            else:
                inputs[key] = interpolate(spec.get("default", ""), self._scope(env, {}))
        env = {**env, "ACTION_PATH": str(ROOT)}
        results = self.run_steps(action["runs"]["steps"], env, inputs)
        scope = self._scope(env, results, inputs)
        outputs = {k: interpolate(v["value"], scope) for k, v in action["outputs"].items()}
        return {"outputs": outputs, "outcome": "failure" if self.failed else "success",
                "steps": results}

    def _run(self, step: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
        script = str(step["run"])
        if re.fullmatch(r"\s*python -m pip install [^\n]*\s*", script):
            self.log.append(f"skipped (installed): {step.get('name')}")
            return {"outputs": {}, "outcome": "success"}
        output = self.temp / "_output"
        env_file = self.temp / "_env"
        output.write_text("")
        env_file.write_text("")
        path = self.temp / "_step"
        path.write_text(script)
        shell = step.get("shell", "bash")
        argv = ([sys.executable, str(path)] if shell == "python"
                else [shutil.which("bash") or "bash", "--noprofile", "--norc", "-eo",
                      "pipefail", str(path)])
        full_env = self.process_env(env)
        full_env["GITHUB_OUTPUT"] = str(output)
        full_env["GITHUB_ENV"] = str(env_file)
        done = subprocess.run(argv, env=full_env, cwd=self.workspace, capture_output=True,
                              text=True, timeout=300, check=False)
        self.log.append(f"run: {step.get('name') or step.get('id')} -> {done.returncode}\n"
                        f"{done.stdout}{done.stderr}")
        for line in env_file.read_text().splitlines():
            key, _, value = line.partition("=")
            self.env_file_values[key] = value
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines()
                       if "=" in line)
        if done.returncode != 0:
            self.failed = True
        return {"outputs": outputs, "outcome": "success" if done.returncode == 0
                else "failure", "code": done.returncode, "stdout": done.stdout,
                "stderr": done.stderr}
