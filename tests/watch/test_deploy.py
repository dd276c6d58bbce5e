"""examples/deploy/: the systemd unit and the Dockerfile, tested as far as this machine can.

The unit: its keys parsed and checked (hardening, state directory, environment file),
its ExecStart parsed by the real CLI, and ``systemd-analyze verify`` / ``security`` when
systemd-analyze is installed. The Dockerfile: parsed; its COPY steps laid out in a
temporary root, its ``pip install`` run in a plain venv, its ENTRYPOINT + CMD run with
``--help`` there and parsed by the CLI, and its HEALTHCHECK command run against a real
health endpoint. (No container runtime is assumed.)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from reconciler.cli import build_parser
from reconciler.shell.health import Readiness, serve

DEPLOY = Path(__file__).resolve().parents[2] / "examples" / "deploy"
PROJECT = DEPLOY.parents[1]
UNIT = DEPLOY / "reconcile-watch.service"
DOCKERFILE = DEPLOY / "Dockerfile"


# -- the systemd unit -----------------------------------------------------------------------

def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value (systemd allows a key more than once)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"key outside a section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit[section].get(key)
    assert values, f"[{section}] {key}= is missing"
    return values[-1]


def test_unit_is_hardened_and_keeps_state_in_its_state_directory() -> None:
    unit = parse_unit(UNIT)
    service = unit["Service"]
    for key, value in {"DynamicUser": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                       "PrivateTmp": "yes", "NoNewPrivileges": "yes",
                       "StateDirectory": "reconcile", "PrivateDevices": "yes",
                       "RestrictNamespaces": "yes", "RestrictSUIDSGID": "yes",
                       "LockPersonality": "yes", "UMask": "0077",
                       "CapabilityBoundingSet": ""}.items():
        assert one(unit, "Service", key) == value, key
    assert set(one(unit, "Service", "RestrictAddressFamilies").split()) == {
        "AF_INET", "AF_INET6", "AF_UNIX"}
    env = " ".join(service["Environment"])
    assert "RECONCILE_STATE_DIR=%S/reconcile" in env
    assert one(unit, "Service", "EnvironmentFile").startswith("/etc/reconcile/")
    assert "RECONCILE_TOKEN" not in env, "the token belongs in the EnvironmentFile"
    assert one(unit, "Install", "WantedBy") == "multi-user.target"
    assert (DEPLOY / "reconcile.env.example").read_text().count("RECONCILE_TOKEN=") == 1


def test_unit_execstart_is_a_watch_the_cli_accepts() -> None:
    argv = shlex.split(one(parse_unit(UNIT), "Service", "ExecStart"))
    assert argv[0].endswith("/reconcile") and argv[1] == "watch"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "watch" and args.metrics_port is not None
    assert args.metrics_addr == "127.0.0.1", "loopback by default on a host"
    assert args.log_format == "json"
    # It applies, and says so where an operator reads first: the head of the file.
    head = UNIT.read_text().split("[Unit]")[0]
    assert args.apply and "APPLIES" in head and "--apply" in head


def test_the_dockerfile_says_it_only_plans() -> None:
    steps = parse_dockerfile(DOCKERFILE)
    [cmd] = instruction(steps, "CMD")
    assert "--apply" not in argv_of(cmd)
    assert "It only plans: add --apply" in DOCKERFILE.read_text()


def _unit_with_real_binary(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at an executable that exists here (verify checks)."""
    reconcile = shutil.which("reconcile", path=str(Path(sys.executable).parent)) \
        or sys.executable
    text = UNIT.read_text().replace("/opt/reconcile/bin/reconcile", reconcile)
    copy = tmp_path / UNIT.name
    copy.write_text(text)
    return copy


@pytest.mark.integration  # starts a process of its own
@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed on this machine; the unit's "
                    "keys are still checked by parsing it")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no",
                           str(_unit_with_real_binary(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stdout + proc.stderr


@pytest.mark.integration  # starts a process of its own
@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed on this machine")
def test_systemd_security_exposure_is_low(tmp_path: Path) -> None:
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager",
                           str(_unit_with_real_binary(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    if "--offline" in proc.stderr and "unrecognized" in proc.stderr:
        pytest.skip("this systemd-analyze cannot judge a unit offline")
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    assert float(match.group(1)) <= 2.0, proc.stdout


# -- the Dockerfile -----------------------------------------------------------------------

def parse_dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    steps: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        steps.append((word.upper(), rest.strip()))
    return steps


def argv_of(arguments: str) -> list[str]:
    """The exec (JSON) form, or the shell form split like sh would."""
    if arguments.startswith("["):
        value = json.loads(arguments)
        assert isinstance(value, list)
        return [str(x) for x in value]
    return shlex.split(arguments)


def instruction(steps: list[tuple[str, str]], word: str) -> list[str]:
    return [rest for name, rest in steps if name == word]


def test_dockerfile_runs_as_non_root_with_state_and_tmp_in_volumes() -> None:
    steps = parse_dockerfile(DOCKERFILE)
    [base] = instruction(steps, "FROM")
    args = dict(a.split("=", 1) for a in instruction(steps, "ARG"))
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    # Pinned by digest, not only by tag: a rebuild gets the base it was tested on.
    assert re.fullmatch(r"python:3\.\d+-slim@sha256:[0-9a-f]{64}", base), base
    [user] = instruction(steps, "USER")
    assert user.split(":")[0] not in ("root", "0")
    volumes = argv_of(instruction(steps, "VOLUME")[0])
    assert "/tmp" in volumes
    env = " ".join(instruction(steps, "ENV"))
    state = re.search(r"RECONCILE_STATE_DIR=(\S+)", env)
    assert state and state.group(1) in volumes
    [check] = instruction(steps, "HEALTHCHECK")
    assert "curl" not in check and "wget" not in check
    script = (DEPLOY / "healthcheck.py").read_text()
    assert "/healthz" in script and "urllib" in script and "9108" not in script
    # Dependencies install from the constraints file, never unpinned.
    [install] = [r for r in instruction(steps, "RUN") if "pip install" in r]
    assert "--constraint /src/constraints.txt" in install


def test_the_constraints_file_pins_every_runtime_dependency() -> None:
    import tomllib

    from packaging.requirements import Requirement

    def canonical(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    pins = {}
    for line in (DEPLOY / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned with ==: {line}"
            pins[canonical(name)] = version
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    for dependency in project["dependencies"]:
        req = Requirement(dependency)
        name = canonical(req.name)
        assert name in pins, (f"{req.name} is not in examples/deploy/constraints.txt: run "
                              "examples/deploy/make_constraints.py")
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])


def _cmdline(tmp_path: Path, *argv: str) -> Path:
    path = tmp_path / "cmdline"
    path.write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return path


@pytest.mark.integration  # starts a process of its own
def test_dockerfile_healthcheck_asks_the_port_the_watcher_was_started_with(
        tmp_path: Path) -> None:
    [check] = instruction(parse_dockerfile(DOCKERFILE), "HEALTHCHECK")
    argv = argv_of(check[check.index("CMD") + 3:].strip())
    assert argv == ["python", "/usr/local/lib/reconcile-healthcheck.py"]
    script = str(DEPLOY / "healthcheck.py")
    endpoint = serve("127.0.0.1", 0, CollectorRegistry(), Readiness())
    port = endpoint.server.server_address[1]
    try:
        for flags in (["--metrics-port", str(port)], [f"--metrics-port={port}"]):
            started = _cmdline(tmp_path, "/usr/local/bin/reconcile", "watch", "/config",
                               *flags, "--metrics-addr", "0.0.0.0")
            assert subprocess.run([sys.executable, script, str(started)],
                                  timeout=30).returncode == 0
    finally:
        endpoint.close()
    gone = subprocess.run([sys.executable, script, str(started)], timeout=30,
                          capture_output=True, text=True)
    assert gone.returncode != 0, "must fail with no server"
    plain = _cmdline(tmp_path, "/usr/local/bin/reconcile", "watch", "/config")
    assert subprocess.run([sys.executable, script, str(plain)], timeout=30,
                          capture_output=True).returncode == 0  # nothing to ask


@pytest.mark.integration
def test_dockerfile_install_and_command_run_in_a_plain_venv(tmp_path: Path) -> None:
    """COPY into a scratch root, each ``python -m pip install`` RUN in a fresh venv (no
    site packages), then ENTRYPOINT + CMD with --help. System steps (apt-get, useradd,
    mkdir/chown) are the image's, not Python's, and are not run here."""
    steps = parse_dockerfile(DOCKERFILE)
    root = tmp_path / "image"
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    copied: list[str] = []
    ran_pip = 0
    for word, rest in steps:
        if word == "COPY":
            *sources, dest = argv_of(rest)
            target = root / dest.lstrip("/")
            for source in sources:
                src = PROJECT / source
                # Docker: into a directory when dest ends with "/"; a directory's contents.
                into = target / src.name if dest.endswith("/") and src.is_file() else target
                if src.is_dir():
                    shutil.copytree(src, into, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    into.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, into)
            copied.append(dest.rstrip("/") or "/")
        elif word == "RUN" and rest.startswith("python -m pip install"):
            argv = shlex.split(rest)
            argv[0] = str(python)
            argv = [str(root / a.lstrip("/")) if any(a.startswith(c) for c in copied) else a
                    for a in argv]
            proc = subprocess.run([*argv, "--quiet"], capture_output=True, text=True,
                                  timeout=600, env={**os.environ, "PIP_NO_CACHE_DIR": "1"})
            assert proc.returncode == 0, proc.stdout + proc.stderr
            ran_pip += 1
    assert ran_pip == 1
    [entry] = instruction(steps, "ENTRYPOINT")
    [cmd] = instruction(steps, "CMD")
    program = env_dir / "bin" / argv_of(entry)[0]
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for argv in ([str(program), "--help"], [str(program), *argv_of(cmd), "--help"]):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env=clean)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--metrics-addr" in proc.stdout and "--log-level" in proc.stdout
    # The installed package is the venv's, not this checkout's.
    where = subprocess.run([str(python), "-c", "import reconciler; print(reconciler.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=clean, check=True)
    assert str(env_dir) in where.stdout
    args = build_parser().parse_args(argv_of(cmd))
    assert args.command == "watch" and args.metrics_port == 9108
