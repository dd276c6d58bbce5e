"""What the pull request's comment says is true where it is read (issue 32, item 8): a
worktree preview is never said to be applied; an error on a CI run does not suggest a
local sandbox; a base given as a commit id is not printed as 40 hex digits; an error's
lines wrap inside GitHub's conversation column. Pure: plans built in memory."""

from __future__ import annotations

from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Plan, Verdict
from reconciler.core.results import LOCAL_SANDBOX_ADVICE, PlanResult, ResultKind
from reconciler.core.review import Review
from reconciler.render import markdown, markdown_results
from reconciler.render.delivery import Delivery
from reconciler.render.markdown_results import FENCE_WIDTH
from tests.plan import builders as b

COMMIT = "4" * 40
BASE = "b0" * 20
DELIVERY = Delivery(run_url="https://github.example/acme/fleet/actions/runs/101", run_id="101",
                    artifact="reconcile-plan-production")


def _plan(**provenance: object) -> Plan:
    made = plan(b.reference_desired(), b.reference_live(),
                Provenance(commit=COMMIT, **provenance))  # type: ignore[arg-type]
    assert made.verdict is Verdict.GO
    return made


def test_a_worktree_preview_is_never_said_to_be_applied() -> None:
    preview = _plan(dirty=True, worktree=True, uncommitted=("services/search.yaml",))
    body = markdown.render_parts(preview, delivery=DELIVERY)[0]
    assert "applies exactly this plan" not in body, body
    assert "never applied" in body
    local = markdown.render(preview, plan_file="plan.json")
    assert "Apply exactly this plan" not in local and "refuses it" in local


def test_an_unreachable_loopback_control_plane_on_a_pull_request_gets_ci_advice() -> None:
    error = ("the control plane at https://127.0.0.1:18443 is unreachable (connection "
             "refused)" + LOCAL_SANDBOX_ADVICE)
    body = markdown_results.render_error(PlanResult(ResultKind.ERROR, commit=COMMIT,
                                                    error=error, exit_code=1))
    assert "sandbox up" not in body, body
    assert "RECONCILE_CONTROL_PLANE_URL" in body and "127.0.0.1:18443" in body


def test_a_base_given_as_its_commit_id_is_shown_short_also_when_superseded() -> None:
    reviewed = _plan().model_copy(update={"review": Review(
        base_ref=BASE, base_commit=BASE, head_commit=COMMIT, base_verdict="go", origins={})})
    body = markdown.render(reviewed)
    assert BASE not in body and f"`{BASE[:12]}`" in body
    block = markdown_results.superseded(body, COMMIT, room=100_000)
    assert BASE not in block
    named = reviewed.model_copy(update={"review": reviewed.review.model_copy(  # type: ignore[union-attr]
        update={"base_ref": "main"})})
    assert "(base `main`)" in markdown.render(named)


def test_an_error_block_wraps_inside_the_conversation_column() -> None:
    long = "git fetch failed: " + " ".join(f"refs/pull/{n}/head:refs/remotes/pr/{n}"
                                           for n in range(40)) + " " + "x" * 300
    body = markdown_results.render_error(PlanResult(ResultKind.ERROR, commit=COMMIT,
                                                    error=long, exit_code=1))
    fenced = body.split("```text\n")[1].split("\n```")[0].splitlines()
    assert len(fenced) > 1 and all(len(line) <= FENCE_WIDTH for line in fenced), fenced
    assert "".join(fenced).replace(" ", "") == long.replace(" ", "")  # nothing lost
