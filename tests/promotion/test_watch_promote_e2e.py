"""``reconcile watch --env prod --promote-from staging`` against two sandboxes and the
GitHub stand-in over real HTTP: nothing is proposed while staging's soak runs (said once,
with the eligible time), exactly one pull request is opened on the first cycle after the
soak -- the watcher wakes up for it, with no resync due and no restart -- and neither a
later cycle nor a restarted watcher opens a second; a staging rollback before the soak
ends proposes nothing. The watcher never writes the checkout it follows."""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.proposals import branch_name
from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.comment.conftest import TOKEN
from tests.comment.github_standin import StandIn
from tests.promotion.pipeline_repo import NEW, OLD, PipelineRepo, make_pipeline_repo
from tests.promotion.test_soak_e2e import apply
from tests.watch.events import Watch, watch_process

pytestmark = pytest.mark.integration

SOAK = 8  # seconds: long enough to see the watcher wait, short enough for a test


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, sandbox_factory: Callable[..., Sandbox],
         standin: StandIn) -> PipelineRepo:
    """Prod pins (and runs) the old digest, staging pins the new one; a bare remote the
    stand-in checks branches against."""
    made = make_pipeline_repo(tmp_path, sandbox_factory(name="staging"),
                              sandbox_factory(name="prod"), soak=f"{SOAK}s")
    made.pin("prod", OLD, "v2.3.0")
    git(made.path, "branch", "-M", "main")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(made.path, "remote", "add", "origin", str(remote))
    git(made.path, "push", "-q", "origin", "HEAD:refs/heads/main")
    standin.state.git_remote = str(remote)
    return made


@contextmanager
def watching(repo: PipelineRepo, standin: StandIn, *args: str,
             token: str = TOKEN, promote: bool = True) -> Iterator[Watch]:
    proposing = ["--promote-from", "staging", "--repo", "acme/fleet", "--api-url",
                 standin.api_url] if promote else []
    with watch_process(str(repo.path), "--env", "prod", *proposing, "--log-format", "json",
                       *args, env=repo.env(GITHUB_TOKEN=token)) as watch:
        yield watch


def posts(standin: StandIn) -> int:
    return sum(1 for r in standin.requests("POST") if r.path.endswith("/pulls"))


def eligible(event: dict[str, Any]) -> float:
    return datetime.strptime(event["eligible_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=UTC).timestamp()


def soak_outlasting(took: float) -> int:
    """A soak (seconds) the watcher's start and first plan surely fit in, from how long
    staging's apply just took on this machine (a process start, reads of both
    environments, a write and the gate: more work than a watcher's first plan). The
    soak's clock starts at staging's success and the watcher reads the wall clock: a
    fixed 8 s ran out before the first plan on a loaded machine, and the watcher then
    proposed at once, with no wait to see."""
    return max(SOAK, math.ceil(3 * took) + 2)


def test_the_watcher_proposes_once_after_the_soak_and_never_again(
        repo: PipelineRepo, standin: StandIn) -> None:
    started = time.monotonic()
    # A process, as the watcher is: its time is the measure of a watcher's start and plan.
    apply(repo, "staging", process=True)
    # Read at plan time: a soak committed after the apply counts from the same success.
    soak = soak_outlasting(time.monotonic() - started)
    if soak != SOAK:  # the committed pipeline says SOAK already: nothing to commit
        repo.write_pipeline(soak=f"{soak}s")
        repo.commit(f"soak {soak}s")
    head = git(repo.path, "rev-parse", "HEAD")
    # --resync 600: only the wake-up at the eligible time can make it look again.
    with watching(repo, standin, "--resync", "600") as w:
        first = w.wait_for(lambda e: e["event"] in ("promotion-waiting", "promotion-proposed"),
                           timeout=soak + 60)
        assert first["event"] == "promotion-waiting", (
            f"the watcher's first plan came after the {soak}s soak: {first}")
        waiting = first
        assert waiting["service"] == "checkout" and waiting["digest"] == NEW
        assert waiting["codes"] == ["not_soaked"], waiting
        assert waiting["eligible_at"] and "proven on staging" in waiting["message"]
        assert not standin.state.pull_requests  # nothing proposed while it soaks
        # The wake-up comes at the eligible time on the watcher's clock: wait for it
        # with room for a loaded machine, then check it did not come early.
        proposed = w.wait_for(lambda e: e["event"] == "promotion-proposed",
                              timeout=soak + 60)
        assert time.time() >= eligible(waiting)
        assert proposed["created"] is True and proposed["supersedes"] is None
        assert any(e["event"] == "plan" and "promotion eligible" in e["message"]
                   for e in w.seen), [e["message"] for e in w.seen]
        assert len(w.named("promotion-waiting")) == 1  # said once, not per cycle
    [pull] = standin.state.pull_requests.values()
    assert pull["head"]["ref"] == branch_name("prod", "checkout", NEW) == proposed["branch"]
    assert pull["base"]["ref"] == "main"
    assert pull["title"] == "Promote checkout to prod from staging"
    assert f"checkout: {NEW} (v2.4.0) proven on staging clusters sn1, sn2, sn3" in pull["body"]
    assert "promote checkout" in pull["body"]  # prod's plan with the pin, as Markdown
    # The branch carries exactly the pin, on top of the commit the watcher followed.
    branch = git(repo.path, "ls-remote", "origin", pull["head"]["ref"]).split()[0]
    git(repo.path, "fetch", "-q", "origin", pull["head"]["ref"])
    assert git(repo.path, "rev-parse", f"{branch}^").strip() == head.strip()
    diff = git(repo.path, "diff", head.strip(), branch)
    assert f"+  digest: {NEW}" in diff and "+  tag: v2.4.0" in diff
    assert git(repo.path, "diff", "--stat", head.strip(), branch).count("|") == 1
    # The checkout it follows is untouched: no commit, no edit.
    assert git(repo.path, "rev-parse", "HEAD") == head
    assert git(repo.path, "status", "--porcelain") == ""
    assert posts(standin) == 1

    # Later cycles and a restarted watcher: the journal says it is proposed; no second.
    with watching(repo, standin, "--resync", "1") as w:
        w.wait_for(lambda e: e["event"] == "plan")
        w.drain(4)
        assert not w.named("promotion-proposed"), w.named("promotion-proposed")
        assert not w.named("promotion-failed"), w.named("promotion-failed")
    assert len(standin.state.pull_requests) == 1 and posts(standin) == 1
    history = repo.run("history", str(repo.path), "--env", "prod")
    assert history.code == Exit.OK, history.err
    assert f"PROPOSED checkout {NEW}" in history.out and "#" in history.out, history.out


def test_a_newer_digest_closes_the_pull_request_it_supersedes(
        repo: PipelineRepo, standin: StandIn) -> None:
    """Merged after the newer one, the older proposal would take prod back: it is closed,
    with a comment naming the pull request that replaces it."""
    apply(repo, "staging")
    with watching(repo, standin, "--resync", "1") as w:
        first = w.wait_for(lambda e: e["event"] == "promotion-proposed", timeout=SOAK + 40)
        assert first["digest"] == NEW
        newer = repo.staging.push("checkout", "v2.5.0")
        assert repo.prod.push("checkout", "v2.5.0") == newer  # one image, two registries
        repo.pin("staging", newer, "v2.5.0")
        apply(repo, "staging")
        second = w.wait_for(lambda e: e["event"] == "promotion-proposed"
                            and e["digest"] == newer, timeout=SOAK + 60)
        closed = w.wait_for(lambda e: e["event"] == "promotion-superseded", timeout=10)
    assert second["supersedes"] == NEW and second["pull"] != first["pull"]
    assert (closed["closed"], closed["pull"]) == (first["pull"], second["pull"])
    assert standin.state.pull_requests[first["pull"]]["state"] == "closed"
    assert standin.state.pull_requests[second["pull"]]["state"] == "open"
    [comment] = standin.comments_on(first["pull"])
    assert f"Superseded by #{second['pull']}" in comment["body"], comment["body"]
    assert newer in comment["body"]


def test_a_hotfix_prod_pins_is_not_taken_back_by_an_older_staging_digest(
        repo: PipelineRepo, standin: StandIn) -> None:
    """Prod pins a hotfix pushed after the release staging proves: proposing staging's
    would take prod back. It is said (once), with why, and never proposed."""
    apply(repo, "staging")
    hotfix = repo.prod.push("checkout", "v2.4.1-hotfix")
    repo.pin("prod", hotfix, "v2.4.1-hotfix")
    with watching(repo, standin, "--resync", "1") as w:
        held = w.wait_for(lambda e: e["event"] == "promotion-waiting"
                          and "older than" in e.get("reason", ""), timeout=SOAK + 40)
        w.drain(3)
    assert held["digest"] == NEW, held
    assert f"{NEW} is older than {hotfix}, which prod pins" in held["reason"]
    assert not w.named("promotion-proposed")
    assert not standin.state.pull_requests and posts(standin) == 0


def test_a_staging_rollback_before_the_soak_ends_proposes_nothing(
        repo: PipelineRepo, standin: StandIn) -> None:
    # A soak the rollback's own apply surely fits in, on a loaded machine too.
    repo.write_pipeline(soak="30s")
    repo.commit("soak 30s")
    apply(repo, "staging")
    with watching(repo, standin, "--resync", "1") as w:
        waiting = w.wait_for(lambda e: e["event"] == "promotion-waiting")
        repo.pin("staging", OLD, "v2.3.0")  # staging goes back before prod may have it
        apply(repo, "staging")
        assert time.time() < eligible(waiting), "the rollback came after the soak: too slow"
        w.drain(max(0.0, eligible(waiting) - time.time()) + 4)
        assert not w.named("promotion-proposed")
    assert not standin.state.pull_requests and posts(standin) == 0


@pytest.mark.parametrize("promote", [True, False], ids=["promote-from", "apply-only"])
def test_with_apply_a_pin_merged_early_is_applied_only_once_eligible(
        repo: PipelineRepo, standin: StandIn, promote: bool) -> None:
    apply(repo, "staging")
    # --resync 600: only a wake-up at the eligible time can make it look again (without
    # --promote-from, the plan's own not_soaked blocker sets it).
    with watching(repo, standin, "--resync", "600", "--apply", promote=promote) as w:
        w.wait_for(lambda e: e["event"] == ("promotion-waiting" if promote else "plan"))
        repo.pin("prod", NEW, "v2.4.0")  # a pull request merged before the soak is over
        plan = w.wait_for(lambda e: e["event"] == "plan" and (
            "HEAD moved" in e["message"] or "files changed" in e["message"]))
        assert plan["verdict"] == "no_go", plan
        held = eligible_from(plan)
        applied = w.wait_for(lambda e: e["event"] == "applied", timeout=SOAK + 60)
        started = [e for e in w.seen if e["event"] == "apply"]
        assert started and datetime.fromisoformat(
            started[0]["ts"].replace("Z", "+00:00")).timestamp() >= held
        assert applied["commit"] == git(repo.path, "rev-parse", "HEAD").strip()
        assert not w.named("promotion-proposed")  # prod pins it already: nothing to propose
    assert not standin.state.pull_requests


def eligible_from(plan: dict[str, Any]) -> float:
    """The eligible time a plan event's not_soaked line names (seconds)."""
    for line in plan.get("lines") or []:
        found = re.search(r"not_soaked.*eligible (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)Z", line)
        if found:
            return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(
                tzinfo=UTC).timestamp()
    raise AssertionError(plan)


def test_github_refusing_is_logged_counted_and_retried_and_the_watcher_goes_on(
        repo: PipelineRepo, standin: StandIn) -> None:
    repo.write_pipeline(soak="1s")
    repo.commit("soak 1s")
    apply(repo, "staging")
    time.sleep(1.2)
    with watching(repo, standin, "--resync", "1", "--metrics-port", "0",
                  token="ghs_" + "x" * 36) as w:
        start = w.wait_for(lambda e: e["event"] == "start")
        first = w.wait_for(lambda e: e["event"] == "promotion-failed")
        assert first["service"] == "checkout" and first["digest"] == NEW
        assert "401" in first["error"] and first["failures"] == 1
        assert "x" * 36 not in json.dumps(first)  # the token is never logged
        again = w.wait_for(lambda e: e["event"] == "promotion-failed")
        assert again["failures"] == 2  # tried again at the next cycle, counted
        w.wait_for(lambda e: e["event"] == "plan")  # still reconciling
        assert w.proc.poll() is None
        metrics = urllib.request.urlopen(f"http://{start['metrics']}/metrics",
                                         timeout=10).read().decode()
        [line] = [x for x in metrics.splitlines()
                  if x.startswith('reconcile_errors_total{kind="promotion"}')]
        assert float(line.split()[-1]) >= 2
    assert not standin.state.pull_requests


def test_promote_from_must_name_the_previous_environment(repo: PipelineRepo,
                                                         standin: StandIn) -> None:
    wrong = repo.run("watch", str(repo.path), "--env", "prod", "--promote-from", "prod",
                     "--repo", "acme/fleet")
    assert wrong.code == Exit.USAGE
    assert "prod is promoted from staging" in wrong.err and "staging → prod" in wrong.err
    first = repo.run("watch", str(repo.path), "--env", "staging", "--promote-from", "prod",
                     "--repo", "acme/fleet")
    assert first.code == Exit.USAGE and "first environment" in first.err
    no_repo = repo.run("watch", str(repo.path), "--env", "prod", "--promote-from", "staging",
                       GITHUB_REPOSITORY="")
    assert no_repo.code == Exit.USAGE and "--repo OWNER/NAME" in no_repo.err
