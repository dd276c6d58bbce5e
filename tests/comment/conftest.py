"""Fixtures for ``reconcile comment``: the GitHub stand-in, a saved plan, a CLI runner."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler import cli
from reconciler.commands import output
from reconciler.core.planning import Provenance, plan
from reconciler.render import markdown
from tests.comment.github_standin import StandIn
from tests.plan import builders as b

TOKEN = "ghs_Sup3rSecretT0kenValue0123456789abcdef"
BOT = "github-actions[bot]"
PR = 7


@dataclass
class Result:
    code: int
    out: str
    err: str


def make_plan_file(path: Path, commit: str = "a" * 40) -> Path:
    result = plan(b.reference_desired(), b.reference_live(),
                  Provenance(commit=commit, path="/runner/work/fleet/desired",
                             root="/runner/work/fleet"))
    output.save_plan(path, result)
    return path


@pytest.fixture
def planfile(tmp_path: Path) -> Path:
    return make_plan_file(tmp_path / "plan.json")


def _serve(prefix: str) -> Iterator[StandIn]:
    server = StandIn(prefix).start()
    server.add_user(TOKEN, BOT, bot=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def standin() -> Iterator[StandIn]:
    yield from _serve("")


@pytest.fixture
def ghe_standin() -> Iterator[StandIn]:
    yield from _serve("/api/v3")


@pytest.fixture
def actions_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                standin: StandIn) -> Callable[..., None]:
    """The GitHub Actions environment of a pull_request run against ``standin``."""

    def apply(server: StandIn = standin, token: str | None = TOKEN, pr: int = PR) -> None:
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"action": "synchronize", "number": pr,
                                     "pull_request": {"number": pr}}))
        monkeypatch.setenv("GITHUB_API_URL", server.api_url)
        monkeypatch.setenv("GITHUB_REPOSITORY", "acme/fleet")
        monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
        monkeypatch.setenv("GITHUB_REF", "refs/heads/main")
        if token is None:
            monkeypatch.delenv("GITHUB_TOKEN", raising=False)
        else:
            monkeypatch.setenv("GITHUB_TOKEN", token)

    apply()
    return apply


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def invoke(*argv: str) -> Result:
        code = cli.main(["comment", *argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def split_into(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Make the renderer split into exactly ``n`` parts (synthetic; each honours the
    budget), so part syncing is tested independently of how a plan happens to split."""

    def apply(n: int) -> None:
        def render_parts(the_plan: object, *, budget: int, **_: object) -> list[str]:
            full = markdown.render(the_plan, budget=budget)  # type: ignore[arg-type]
            assert n == 1 or budget > 200
            return [f"### Plan (part {k}/{n})\n\n" + full[: max(0, budget - 100)]
                    if n > 1 else full for k in range(1, n + 1)]

        monkeypatch.setattr(markdown, "render_parts", render_parts)

    return apply


def make_big_plan_file(path: Path, services: int) -> Path:
    """The reference plan plus ``services`` promotions with evidence: many parts."""
    desired, live = b.many_services(services)
    output.save_plan(path, plan(desired, live, Provenance(
        commit="f" * 40, path="/runner/work/fleet/desired", root="/runner/work/fleet")))
    return path
