"""``reconcile comment`` against a GitHub stand-in over real HTTP on loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler import cli
from reconciler.commands import comment as cmd
from reconciler.core import comments
from reconciler.exitcodes import Exit
from reconciler.render import markdown
from reconciler.shell.github import Comment, CommentsClient, GitHubError
from tests.comment.conftest import BOT, PR, TOKEN, Result, make_big_plan_file, make_plan_file
from tests.comment.github_standin import StandIn

Run = Callable[..., Result]


def ours(server: StandIn, pr: int = PR) -> list[dict[str, object]]:
    return [c for c in server.comments_on(pr)
            if str(c["body"]).startswith("<!-- reconcile:plan path=desired ")]


def parts(server: StandIn) -> list[tuple[int, str]]:
    return [(int(str(c["id"])), str(c["body"]).split("\n", 1)[0]) for c in ours(server)]


def writes(server: StandIn) -> list[str]:
    return [e.method for e in server.requests() if e.method != "GET"]


# -- the life of one comment set ----------------------------------------------------------


def test_first_post_then_edit_in_place(standin: StandIn, actions_env: object, run: Run,
                                       planfile: Path, tmp_path: Path) -> None:
    first = run(str(planfile))
    assert first.code == Exit.OK, first.err
    [(cid, head)] = parts(standin)
    assert head == "<!-- reconcile:plan path=desired part=1/1 -->"
    body = str(ours(standin)[0]["body"])
    assert "reconcile plan" in body and len(body) <= 65_536
    assert f"posted part 1/1: comment {cid}" in first.out
    assert f"issuecomment-{cid}" in first.out

    # The same plan again: nothing to write.
    again = run(str(planfile))
    assert again.code == Exit.OK and f"unchanged part 1/1: comment {cid}" in again.out
    assert writes(standin) == ["POST"]

    # A new plan (another commit): the same comment is edited, no new one.
    newer = make_plan_file(tmp_path / "newer.json", commit="b" * 40)
    edited = run(str(newer))
    assert edited.code == Exit.OK, edited.err
    assert parts(standin) == [(cid, head)]
    assert "bbbbbbbbbbbb" in str(ours(standin)[0]["body"])
    assert writes(standin) == ["POST", "PATCH"]


def test_grows_to_three_parts_and_shrinks_back(standin: StandIn, actions_env: object,
                                               run: Run, planfile: Path,
                                               split_into: Callable[[int], None]) -> None:
    assert run(str(planfile)).code == Exit.OK
    [(first_id, _)] = parts(standin)
    standin.seed(PR, "LGTM, but wait for the freeze to end", "alice")

    split_into(3)
    grown = run(str(planfile))
    assert grown.code == Exit.OK, grown.err
    now = parts(standin)
    assert [head for _, head in now] == [
        f"<!-- reconcile:plan path=desired part={k}/3 -->" for k in (1, 2, 3)]
    assert now[0][0] == first_id  # part 1 edited in place
    assert [i for i, _ in now] == sorted(i for i, _ in now)  # parts read in order
    assert all(len(str(c["body"])) <= 65_536 for c in ours(standin))

    split_into(1)
    shrunk = run(str(planfile))
    assert shrunk.code == Exit.OK, shrunk.err
    assert parts(standin) == [(first_id, "<!-- reconcile:plan path=desired part=1/1 -->")]
    for cid, _ in now[1:]:
        assert f"deleted comment {cid} (leftover part" in shrunk.out
    # Someone else's comment is never touched.
    assert any(c["body"] == "LGTM, but wait for the freeze to end"
               for c in standin.comments_on(PR))


def test_a_missing_middle_part_is_reposted_in_order(standin: StandIn, actions_env: object,
                                                    run: Run, planfile: Path,
                                                    split_into: Callable[[int], None]) -> None:
    split_into(3)
    assert run(str(planfile)).code == Exit.OK
    (p1, _), (p2, _), (p3, _) = parts(standin)
    standin.state.comments.pop(p2)  # a maintainer deleted part 2 by hand
    assert run(str(planfile)).code == Exit.OK
    now = parts(standin)
    assert now[0][0] == p1 and len(now) == 3
    assert [i for i, _ in now] == sorted(i for i, _ in now)
    assert [h.rsplit("part=", 1)[1] for _, h in now] == ["1/3 -->", "2/3 -->", "3/3 -->"]
    assert p3 not in [i for i, _ in now]  # reposted after the new part 2, old one deleted


@pytest.mark.parametrize("n", [1, 3])
def test_two_concurrent_runs_leave_one_comment_set(standin: StandIn, actions_env: object,
                                                   planfile: Path, n: int,
                                                   split_into: Callable[[int], None]) -> None:
    split_into(n)
    # Both runs list before either writes (the stand-in holds the first two lists), so
    # both post: the race two CI jobs on one PR can run.
    standin.state.list_barrier = threading.Barrier(2)
    codes: list[int] = []

    def one() -> None:
        codes.append(cli.main(["comment", str(planfile)]))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert codes == [0, 0]
    assert len(standin.requests("POST")) == 2 * n  # both really posted...
    now = parts(standin)
    assert [h for _, h in now] == [
        f"<!-- reconcile:plan path=desired part={k}/{n} -->" for k in range(1, n + 1)]
    # ...and the survivors are the lowest id of each part (ids start at 1001 here).
    assert [i for i, _ in now] == sorted(i for i, _ in now)
    assert now[0][0] == 1001
    # Both runs' sweeps agree on the duplicates: n deletions succeed, any other is a 404.
    assert len([e for e in standin.requests("DELETE") if e.status == 204]) == n
    # A third run finds exactly that set and writes nothing.
    before = len(writes(standin))
    assert cli.main(["comment", str(planfile)]) == 0
    assert len(writes(standin)) == before


# -- GitHub's behaviour: pagination, rate limits, limits, Enterprise ------------------------


def test_pagination_across_other_peoples_comments(standin: StandIn, actions_env: object,
                                                  run: Run, planfile: Path) -> None:
    for i in range(230):
        standin.seed(PR, f"comment {i} by a reviewer", "alice" if i % 2 else "bob")
    assert run(str(planfile)).code == Exit.OK
    [(cid, _)] = parts(standin)
    for i in range(30):
        standin.seed(PR, f"later comment {i}", "carol")
    # Ours is now on page 3 of 3: found through the Link headers, edited, not duplicated.
    again = run(str(make_plan_file(planfile.parent / "p2.json", commit="c" * 40)))
    assert again.code == Exit.OK, again.err
    assert parts(standin)[0][0] == cid and len(parts(standin)) == 1
    pages = [e.path for e in standin.requests("GET") if "/comments" in e.path]
    assert any(p.startswith("/repositories/4242/issues/7/comments") and "page=3" in p
               for p in pages)
    assert writes(standin) == ["POST", "PATCH"]


def test_secondary_rate_limit_is_waited_out(standin: StandIn, actions_env: object, run: Run,
                                            planfile: Path) -> None:
    standin.state.rate_limits.append(("POST", 1))
    result = run(str(planfile))
    assert result.code == Exit.OK, result.err
    assert "secondary rate limit; waiting 1s" in result.err
    [(_, limited_at, seconds)] = standin.state.rate_limited_at
    retried = [e for e in standin.requests("POST") if e.status == 201]
    assert len(retried) == 1 and retried[0].at - limited_at >= seconds
    assert len(parts(standin)) == 1


def test_a_rate_limit_longer_than_the_budget_fails_clearly(standin: StandIn, actions_env: object,
                                                           run: Run, planfile: Path) -> None:
    standin.state.rate_limits.append(("GET", 3600))
    started = time.monotonic()
    result = run(str(planfile), "--max-wait", "5")
    assert time.monotonic() - started < 5
    assert result.code == Exit.ERROR
    assert "GitHub answered 403" in result.err and "secondary rate limit" in result.err
    assert "3600s" in result.err
    assert writes(standin) == []


def test_body_too_long_for_the_server_is_split_smaller(standin: StandIn, actions_env: object,
                                                       run: Run, planfile: Path,
                                                       split_into: Callable[[int], None],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(markdown, "render", lambda plan, budget=65_536: "x" * budget)
    split_into(2)
    standin.state.limit = 50_000  # counts differently from us
    result = run(str(planfile))
    assert result.code == Exit.OK, result.err
    assert "splitting within" in result.err
    assert len(parts(standin)) == 2
    assert all(len(str(c["body"])) <= 50_000 for c in ours(standin))


def test_a_body_that_stays_too_long_is_a_clear_error(standin: StandIn, actions_env: object,
                                                     run: Run, planfile: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A renderer that ignores the shrinking budget: after bounded retries, a clear error.
    monkeypatch.setattr(markdown, "render_parts", lambda plan, **_: ["x" * 60_000])
    standin.state.limit = 50_000
    result = run(str(planfile))
    assert result.code == Exit.ERROR
    assert "a part was too long for GitHub; splitting within" in result.err
    assert re.search(r"part 1/1 of the comment has 60,\d{3} characters", result.err)
    assert "over GitHub's" in result.err


def test_enterprise_base_url(ghe_standin: StandIn, actions_env: Callable[..., None], run: Run,
                             planfile: Path) -> None:
    actions_env(ghe_standin)
    for i in range(120):
        ghe_standin.seed(PR, f"comment {i}", "alice")
    assert run(str(planfile)).code == Exit.OK
    assert run(str(make_plan_file(planfile.parent / "p2.json", commit="d" * 40))).code == 0
    assert len(parts(ghe_standin)) == 1
    paths = [e.path for e in ghe_standin.requests()]
    assert paths and all(p.startswith("/api/v3/") for p in paths)
    assert any(p.startswith("/api/v3/repositories/") for p in paths)  # Link followed
    assert writes(ghe_standin) == ["POST", "PATCH"]


# -- the token -----------------------------------------------------------------------------


def test_token_in_no_output(standin: StandIn, actions_env: Callable[..., None], run: Run,
                            planfile: Path, split_into: Callable[[int], None]) -> None:
    outputs: list[str] = []
    ok = run(str(planfile))
    outputs += [ok.out, ok.err]
    split_into(2)
    standin.state.rate_limits.append(("PATCH", 1))
    grown = run(str(planfile))
    outputs += [grown.out, grown.err]
    assert ok.code == grown.code == Exit.OK
    dry = run(str(planfile), "--dry-run")
    outputs += [dry.out, dry.err]
    # It was sent, as GitHub wants it...
    assert all(e.authorization == f"token {TOKEN}" for e in standin.requests())
    # ...and printed nowhere.
    bad = "ghp_" + "Z" * 36
    actions_env(token=bad)
    refused = run(str(planfile))
    outputs += [refused.out, refused.err]
    assert refused.code == Exit.ERROR
    assert "GitHub answered 401: Bad credentials" in refused.err
    for text in outputs:
        assert TOKEN not in text and bad not in text


def test_token_in_no_exception(standin: StandIn) -> None:
    client = CommentsClient(standin.api_url, "acme/fleet", "ghp_wrongwrongwrong")
    with pytest.raises(GitHubError) as caught:
        client.list_comments(PR)
    exc = caught.value
    assert exc.status == 401
    assert exc.__cause__ is None and exc.__suppress_context__
    rendered = "".join(traceback.format_exception(exc)) + repr(exc) + str(exc)
    assert "ghp_wrongwrongwrong" not in rendered
    # A server echoing the token back is redacted too.
    unreachable = CommentsClient("http://127.0.0.1:9", "acme/fleet", "ghp_wrongwrongwrong")
    with pytest.raises(GitHubError) as down:
        unreachable.list_comments(PR)
    assert "ghp_wrongwrongwrong" not in str(down.value)
    assert "cannot reach GitHub" in str(down.value)


@pytest.mark.integration  # starts a process of its own
def test_token_in_no_output_of_the_real_process(standin: StandIn, planfile: Path,
                                                tmp_path: Path) -> None:
    env = {**os.environ, "GITHUB_API_URL": standin.api_url, "GITHUB_REPOSITORY": "acme/fleet",
           "GITHUB_TOKEN": "ghp_" + "Q" * 36, "GITHUB_EVENT_PATH": str(tmp_path / "e.json")}
    (tmp_path / "e.json").write_text(json.dumps({"pull_request": {"number": PR}}))
    done = subprocess.run([sys.executable, "-m", "reconciler", "comment", str(planfile)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == Exit.ERROR
    assert "Bad credentials" in done.stderr and "Traceback" not in done.stderr
    assert "Q" * 36 not in done.stdout + done.stderr


def test_plain_http_to_another_host_gets_no_token(planfile: Path, run: Run,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    result = run(str(planfile), "--repo", "acme/fleet", "--pr", "7",
                 "--api-url", "http://ghe.example/api/v3")
    assert result.code == Exit.ERROR and "plain http" in result.err
    assert TOKEN not in result.err


# -- dry run, environment, ownership, usage --------------------------------------------------


def test_dry_run_needs_no_token_and_writes_nothing(standin: StandIn,
                                                   actions_env: Callable[..., None], run: Run,
                                                   planfile: Path,
                                                   split_into: Callable[[int], None]) -> None:
    split_into(3)
    assert run(str(planfile)).code == Exit.OK
    (p1, _), (p2, _), (p3, _) = parts(standin)
    split_into(2)
    actions_env(token=None)
    dry = run(str(planfile), "--dry-run")
    assert dry.code == Exit.OK, dry.err
    assert f"would edit comment {p1}: part 1/2" in dry.out
    assert f"would edit comment {p2}: part 2/2" in dry.out
    assert f"would delete comment {p3} (leftover part 3/3)" in dry.out
    assert "----- part 2/2" in dry.out
    assert "<!-- reconcile:plan path=desired part=2/2 -->" in dry.out
    assert writes(standin) == ["POST"] * 3
    last = standin.requests()[-1]
    assert last.method == "GET" and "/comments" in last.path and last.authorization is None


def test_dry_run_with_nowhere_to_post_prints_the_parts(run: Run, planfile: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITHUB_TOKEN", "GITHUB_REPOSITORY", "GITHUB_EVENT_PATH", "GITHUB_REF"):
        monkeypatch.delenv(name, raising=False)
    dry = run(str(planfile), "--dry-run")
    assert dry.code == Exit.OK
    assert "would post part 1/1" in dry.out and "## reconcile plan" in dry.out


def test_flags_override_the_environment(standin: StandIn, actions_env: object, run: Run,
                                        planfile: Path) -> None:
    standin.state.pulls.add(12)
    result = run(str(planfile), "--pr", "12", "--key", "clusters/prod")
    assert result.code == Exit.OK, result.err
    [made] = standin.comments_on(12)
    assert str(made["body"]).startswith("<!-- reconcile:plan path=clusters/prod part=1/1 -->")
    assert standin.comments_on(PR) == []


def test_pr_from_github_ref_when_no_event(standin: StandIn, actions_env: object, run: Run,
                                          planfile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_EVENT_PATH")
    monkeypatch.setenv("GITHUB_REF", f"refs/pull/{PR}/merge")
    assert run(str(planfile)).code == Exit.OK
    assert len(parts(standin)) == 1


def test_a_pasted_marker_is_not_ours(standin: StandIn, actions_env: object, run: Run,
                                     planfile: Path) -> None:
    forged = standin.seed(PR, "<!-- reconcile:plan path=desired part=1/1 -->\nlooks fine",
                          "mallory")
    quoted = standin.seed(PR, "> <!-- reconcile:plan path=desired part=1/1 -->\n> quoted",
                          BOT, bot=True)
    result = run(str(planfile))
    assert result.code == Exit.OK, result.err
    assert "1 comment(s) carry this marker but are not ours" in result.err
    bodies = {c["id"]: c["body"] for c in standin.comments_on(PR)}
    assert bodies[forged] == "<!-- reconcile:plan path=desired part=1/1 -->\nlooks fine"
    assert quoted in bodies and len(bodies) == 3


def test_installation_token_owns_bot_comments(standin: StandIn, actions_env: Callable[..., None],
                                              run: Run, planfile: Path) -> None:
    standin.add_user("ghs_installation", "reconcile-app[bot]", bot=True, installation=True)
    actions_env(token="ghs_installation")
    assert run(str(planfile)).code == Exit.OK
    [(cid, _)] = parts(standin)
    standin.seed(PR, "<!-- reconcile:plan path=desired part=1/1 -->\nhuman", "mallory")
    again = run(str(make_plan_file(planfile.parent / "p2.json", commit="e" * 40)))
    assert again.code == Exit.OK
    assert f"edited part 1/1: comment {cid}" in again.out


def test_missing_inputs_are_usage_errors(run: Run, planfile: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITHUB_TOKEN", "GITHUB_REPOSITORY", "GITHUB_EVENT_PATH", "GITHUB_REF"):
        monkeypatch.delenv(name, raising=False)
    result = run(str(planfile))
    assert result.code == Exit.USAGE
    assert "--repo" in result.err and "--pr" in result.err and "GITHUB_TOKEN" in result.err
    monkeypatch.setenv("GITHUB_TOKEN", "two words")
    bad = run(str(planfile), "--repo", "a/b", "--pr", "1")
    assert bad.code == Exit.USAGE and "two words" not in bad.err


def test_unreadable_plan_is_an_error(run: Run, tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text("{")
    assert run(str(tmp_path / "plan.json"), "--dry-run").code == Exit.ERROR


def test_unknown_pull_request(standin: StandIn, actions_env: object, run: Run,
                              planfile: Path) -> None:
    result = run(str(planfile), "--pr", "999")
    assert result.code == Exit.ERROR
    assert "GitHub answered 404" in result.err and "pull request" in result.err


# -- the pure parts -------------------------------------------------------------------------


def _owned(cid: int, part: int, total: int) -> comments.Owned:
    body = cmd.marker("k", part, total) + "\nx"
    return comments.Owned(Comment(cid, body, BOT, True), part, total)


def test_plan_sync_reuses_in_order_and_deletes_the_rest() -> None:
    bodies = cmd.bodies_for(["a", "b"], "k")
    steps = comments.plan_sync([_owned(10, 1, 3), _owned(11, 1, 3), _owned(12, 2, 3),
                           _owned(13, 3, 3)], bodies)
    assert [(s.verb, s.part, s.comment_id) for s in steps] == [
        ("edit", 1, 10), ("edit", 2, 12), ("delete", 1, 11), ("delete", 3, 13)]
    assert steps[2].why == "duplicate of part 1" and steps[3].why == "leftover part 3/3"


def test_sweep_keeps_the_lowest_id_per_part() -> None:
    steps = comments.sweep_steps([_owned(21, 1, 2), _owned(20, 1, 2), _owned(23, 2, 2),
                             _owned(22, 2, 2), _owned(24, 3, 3)], 2)
    assert [s.comment_id for s in steps] == [21, 23, 24]


def test_marker_round_trip_and_key() -> None:
    key = "team a/desired-->state"
    body = cmd.bodies_for(["x"], key)[0]
    assert cmd.parse_marker(body, key) == (1, 1)
    assert "-->" not in body.split("\n")[0][:-3]
    assert cmd.parse_marker("> " + body, key) is None
    assert cmd.parse_marker(body, "other") is None
    assert cmd.parse_marker(cmd.marker(key, 3, 2) + "\n", key) is None


@pytest.mark.skipif(not hasattr(markdown, "render_parts"), reason="no render_parts yet")
def test_the_real_renderer_splits_a_big_plan(standin: StandIn, actions_env: object, run: Run,
                                             planfile: Path, tmp_path: Path) -> None:
    big = make_big_plan_file(tmp_path / "big.json", 120)
    grown = run(str(big))
    assert grown.code == Exit.OK, grown.err
    now = ours(standin)
    assert len(now) >= 2
    for k, made in enumerate(now, 1):
        body = str(made["body"])
        assert body.startswith(f"<!-- reconcile:plan path=desired part={k}/{len(now)} -->\n")
        assert len(body) <= 65_536
    assert "reconcile apply" in str(now[0]["body"]) + str(now[-1]["body"])
    shrunk = run(str(planfile))
    assert shrunk.code == Exit.OK
    assert [c["id"] for c in ours(standin)] == [now[0]["id"]]
