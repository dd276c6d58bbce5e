"""Issue 12 end to end: a new service through the control plane's greenfield preflight and
``createGreenfieldDeployment`` [ext], against real sandbox processes and the real CLI.

What the sandbox proves: the control plane's audit log (was a creation ever sent?), the
services it holds, and what every cluster runs.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox import seeding
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import PROJECT, Repo, git, make_repo
from tests.plan.builders import digest

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "validation" / "fixtures" / "ledger.yaml"
LEDGER = digest("ledger", "v1.0.0")
KINDS = ("provenance", "sbom", "signature", "vulnerability-policy", "release-authorization")
CREATE = "createGreenfieldDeployment"


def creations(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [a for a in sandbox.audit() if a["method"] == CREATE]


def preflights(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [a for a in sandbox.audit() if a["method"] == "getDeploymentPreflight"]


def ledger_yaml(*, digest_: str = LEDGER, tag: str = "v1.0.0", version: str = "1.0.0",
                namespace: str = "ledger", kinds: tuple[str, ...] = KINDS,
                statements: dict[str, str] | None = None) -> str:
    """The Service document of the new service (the fixture's shape), evidence bound to
    ``digest_``; ``statements``: kind -> statement digest (default: the sandbox's)."""
    name = "ledger"
    evidence = "".join(
        f"    - kind: {k}\n"
        f"      statementDigest: {(statements or {}).get(k) or digest(name, f'{tag}:{k}')}\n"
        f"      subjectDigest: {digest_}\n"
        "      verifier: sandbox-verifier\n"
        "      verifiedAt: 1780000000000\n" for k in kinds)
    return ("apiVersion: reconcile/v1\nkind: Service\nname: ledger\nserviceId: svc-ledger\n"
            "appId: ledger\nrelease:\n  registryHost: registry.sandbox.test\n"
            f"  repository: shop/ledger\n  digest: {digest_}\n  tag: {tag}\n"
            f"  version: {version}\n" + (f"  evidence:\n{evidence}" if kinds else "")
            + f"create:\n  namespace: {namespace}\negress:\n  - host: api.stripe.com\n")


LEDGER_GRANT = ("  # ledger is new: the control plane authorises its creation by this grant "
                "on its id.\n  - service: ledger\n"
                "    capabilities: [deployment:preflight, deployment:create-greenfield]\n")


def without_ledger(path: Path, message: str = "no new service") -> None:
    """Commit the reference repo at ``path`` without its new service (and its grant)."""
    (path / "services" / "ledger.yaml").unlink(missing_ok=True)
    grants = path / "grants" / "deploy-bot.yaml"
    grants.write_text(grants.read_text().replace(LEDGER_GRANT, ""))
    git(path, "add", "-A")
    git(path, "commit", "-q", "--allow-empty", "-m", message)


def with_ledger(repo: Repo, text: str | None = None, *, commit: bool = True) -> Repo:
    (repo.path / "services" / "ledger.yaml").write_text(text or ledger_yaml())
    if commit:
        repo.commit("ledger")
    return repo


def plan_json(repo: Repo, *args: str, **env: str) -> tuple[int, dict[str, Any]]:
    result = repo.run("plan", str(repo.path), "--format", "json", "--detailed-exitcode",
                      *args, **env)
    assert result.out.strip(), result.err
    return result.code, json.loads(result.out)


def ledger_part(document: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None,
                                                   set[str | None]]:
    changes = [c for c in document["changes"] if c["service"] == "ledger"]
    pre = next((p for p in document["preflights"] if p["service"] == "ledger"), None)
    upstream = {b["upstream_code"] for b in document["blockers"] if b["service"] == "ledger"}
    return changes, pre, upstream


def test_the_fixture_is_what_this_file_builds() -> None:
    # The examples' ledger.yaml is D1's fixture; the tests build variants of the same.
    body = "\n".join(x for x in FIXTURE.read_text().splitlines() if not x.startswith("#"))
    assert body.strip() == ledger_yaml().strip()


def test_complete_evidence_plans_a_go_create_that_converges_everywhere(
        repo: Repo, sandbox: Sandbox) -> None:
    with_ledger(repo)
    code, document = plan_json(repo)
    assert code == Exit.CHANGES, document["blockers"]
    changes, pre, upstream = ledger_part(document)
    assert [c["actions"] for c in changes] == [["create"]] and not upstream
    assert pre is not None and pre["status"] == "go" and pre["report"]["decision"] == "GO"
    assert pre["report"]["namespace"] == "ledger" and pre["source_revision"] == document["commit"]
    assert {p["architecture"]: p["manifest_present"]
            for p in pre["report"]["platforms"]} == {"amd64": True, "arm64": True}
    assert creations(sandbox) == []  # a plan only reads

    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.OK, applied.out + applied.err
    assert "Converged" in applied.out
    assert len(creations(sandbox)) == 1
    status = sandbox.cluster_status()
    for cluster in ("sn1", "sn2", "sn3"):
        assert status[cluster]["ledger"]["resolvedDigest"] == LEDGER

    again = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert again.code == Exit.OK, again.out + again.err
    second = repo.run("apply", str(repo.path), "--auto-approve")
    assert second.code == Exit.OK and "No changes" in second.out
    assert len(creations(sandbox)) == 1


def _saved_plan_with_ledger(repo: Repo, tmp_path: Path) -> Path:
    """Commit the ledger service (a create) and save its plan, as a reviewer would."""
    with_ledger(repo)
    saved = tmp_path / "plan.json"
    made = repo.run("plan", str(repo.path), "--out", str(saved))
    assert made.code == Exit.OK, made.out + made.err
    return saved


def test_a_saved_plan_with_a_create_applies_what_was_reviewed(
        repo: Repo, sandbox: Sandbox, tmp_path: Path) -> None:
    saved = _saved_plan_with_ledger(repo, tmp_path)
    applied = repo.run("apply", str(saved), "--auto-approve", cwd=repo.path)
    assert applied.code == Exit.OK, applied.out + applied.err
    assert len(creations(sandbox)) == 1
    # The same saved plan, applied again: its create is settled (the service runs it).
    again = repo.run("apply", str(saved), "--auto-approve", cwd=repo.path)
    assert again.code == Exit.OK, again.out + again.err
    assert len(creations(sandbox)) == 1


def assert_no_go(repo: Repo, sandbox: Sandbox, code: str, **env: str) -> dict[str, Any]:
    exit_code, document = plan_json(repo, **env)
    assert exit_code == Exit.CHANGES_NO_GO, document["blockers"]
    _, pre, upstream = ledger_part(document)
    assert code in upstream, document["blockers"]
    applied = repo.run("apply", str(repo.path), "--auto-approve", **env)
    assert applied.code != Exit.OK
    assert code in applied.err, applied.err
    assert creations(sandbox) == [], "a creation was sent from a NO-GO plan"
    assert pre is not None
    return pre


def test_a_missing_kind_in_the_repo_is_refused_before_anything_is_sent(
        repo: Repo, sandbox: Sandbox) -> None:
    with_ledger(repo, ledger_yaml(kinds=tuple(k for k in KINDS if k != "sbom")))
    pre = assert_no_go(repo, sandbox, "RELEASE_EVIDENCE_MISSING")
    assert pre["status"] == "not_sent"
    assert any("Missing sbom evidence" in b["message"] for b in pre["local_blockers"])
    assert preflights(sandbox) == []  # fail closed: not even the read was sent


def test_a_kind_the_registry_never_published_is_named_by_the_control_plane(
        repo: Repo, sandbox: Sandbox) -> None:
    index = sandbox.push("ledger", "v1.1.0", repository="shop/ledger",
                         evidence=[k for k in KINDS if k != "signature"])
    with_ledger(repo, ledger_yaml(digest_=index, tag="v1.1.0", version="1.1.0"))
    pre = assert_no_go(repo, sandbox, "RELEASE_EVIDENCE_MISSING")
    assert pre["status"] == "no_go" and pre["report"]["decision"] == "NO-GO"


def test_evidence_bound_to_another_image_is_refused(repo: Repo, sandbox: Sandbox) -> None:
    other = digest("checkout", "v2.4.0")
    index = sandbox.push("ledger", "v1.1.0", repository="shop/ledger", evidence_subject=other)
    # The repo says the evidence is about the pinned index; the registry says otherwise.
    with_ledger(repo, ledger_yaml(digest_=index, tag="v1.1.0", version="1.1.0"))
    pre = assert_no_go(repo, sandbox, "RELEASE_EVIDENCE_INVALID")
    assert pre["status"] == "no_go"


def test_a_platform_manifest_missing_is_refused(repo: Repo, sandbox: Sandbox) -> None:
    index = sandbox.push("ledger", "v1.1.0", repository="shop/ledger",
                         missing_manifests=["linux/arm64"])
    with_ledger(repo, ledger_yaml(digest_=index, tag="v1.1.0", version="1.1.0"))
    pre = assert_no_go(repo, sandbox, "OCI_PLATFORM_MANIFEST_MISSING")
    platforms = {p["architecture"]: p["manifest_present"] for p in pre["report"]["platforms"]}
    assert platforms == {"amd64": True, "arm64": False}


def test_a_namespace_taken_is_refused(repo: Repo, sandbox: Sandbox) -> None:
    with_ledger(repo, ledger_yaml(namespace="checkout"))
    pre = assert_no_go(repo, sandbox, "NAMESPACE_COLLISION")
    assert pre["report"]["namespace"] == "checkout"


def test_a_dirty_repo_sends_nothing(repo: Repo, sandbox: Sandbox) -> None:
    with_ledger(repo)
    with_ledger(repo, ledger_yaml() + "# an edit nobody committed\n", commit=False)
    exit_code, document = plan_json(repo)
    assert exit_code == Exit.CHANGES_NO_GO
    _, pre, upstream = ledger_part(document)
    assert "SOURCE_WORKTREE_DIRTY" in upstream and pre is not None
    assert pre["status"] == "not_sent" and preflights(sandbox) == []
    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.REFUSED_COMMIT
    assert creations(sandbox) == []


def test_the_create_capability_missing_is_refused(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    # reconcile runs as deploy-bot, which may preflight svc-ledger but not create it.
    seed = copy.deepcopy(seeding.DEFAULT_SEED)
    for grant in seed["grants"]:
        if grant["serviceId"] == "svc-ledger":
            grant["capabilities"] = ["deployment:preflight"]
    sandbox.seed(seed)
    repo = with_ledger(repo_factory(sandbox))
    token = sandbox.deploy_bot_token_file.read_text().strip()
    pre = assert_no_go(repo, sandbox, "AUTHORIZATION_MISSING", RECONCILE_TOKEN=token)
    checks = {c["capability"]: c["granted"] for c in pre["report"]["authorization_checks"]}
    assert checks.get("deployment:create-greenfield") is False


def test_without_the_creation_request_the_plan_says_greenfield_execution_unavailable(
        sandbox_factory: Callable[..., Sandbox], tmp_path: Path) -> None:
    sandbox = sandbox_factory(greenfield=False)
    repo = with_ledger(make_repo(tmp_path, sandbox))
    pre = assert_no_go(repo, sandbox, "GREENFIELD_EXECUTION_UNAVAILABLE")
    assert pre["execution_available"] is False


@pytest.mark.parametrize("point", ["before-send:create", "after-send:create"])
def test_a_killed_creation_reruns_to_exactly_one_service(
        repo: Repo, sandbox: Sandbox, point: str) -> None:
    with_ledger(repo)
    crashed = repo.run("apply", str(repo.path), "--auto-approve", RECONCILE_CRASH_AT=point)
    assert crashed.code == -9, crashed.out + crashed.err
    rerun = repo.run("apply", str(repo.path), "--auto-approve")
    assert rerun.code == Exit.OK, rerun.out + rerun.err
    sent = creations(sandbox)
    # before-send: nothing had been sent, the rerun sends it once; after-send: the rerun
    # sees the service and sends nothing more.
    assert len(sent) == 1, sent
    statuses = sandbox.rollout_statuses()
    assert int(statuses["svc-ledger"]["rolloutGeneration"]) == 1  # one rollout, never two
    final = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert final.code == Exit.OK, final.out + final.err


def test_plan_base_tells_a_creation_this_pr_introduces_from_one_already_pending(
        repo: Repo, sandbox: Sandbox) -> None:
    without_ledger(repo.path, "no ledger yet")
    with_ledger(repo)  # HEAD~1 has no ledger: this PR introduces it
    result = repo.run("plan", str(repo.path), "--base", "HEAD~1", "--format", "json")
    document = json.loads(result.out)
    key = next(c["idempotency_key"] for c in document["changes"] if c["service"] == "ledger")
    assert document["review"]["origins"][key] == "introduced"
    (repo.path / "services" / "search.yaml").write_text(
        (repo.path / "services" / "search.yaml").read_text() + "# reviewed\n")
    repo.commit("an unrelated edit")  # HEAD~1 has the ledger too: it was pending already
    result = repo.run("plan", str(repo.path), "--base", "HEAD~1", "--format", "json")
    document = json.loads(result.out)
    again = next(c for c in document["changes"] if c["service"] == "ledger")
    assert again["idempotency_key"] == key
    assert document["review"]["origins"][key] == "already_pending"
    assert not [r for r in document["review"]["removed"] if r["service"] == "ledger"]
    # Each side was asked at its own commit; nothing was created.
    revisions = {p["source_revision"] for p in document["preflights"]}
    assert revisions == {document["commit"]}
    assert creations(sandbox) == []


def test_two_applies_creating_the_same_service_at_once_make_exactly_one(
        repo: Repo, sandbox: Sandbox, tmp_path: Path) -> None:
    with_ledger(repo)
    other = tmp_path / "other"
    shutil.copytree(repo.path, other)
    git(other, "commit", "-q", "--allow-empty", "-m", "another commit, same desired state")
    # sn3 answers slowly while both plan, so both read "no ledger" before either creates.
    sandbox.fault("sn3", "slow", ms=1500)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "reconciler", "apply", str(path), "--auto-approve"],
        cwd=PROJECT, env=repo.env(RECONCILE_STATE_DIR=str(tmp_path / f"state-{n}")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        for n, path in enumerate((repo.path, other))]
    deadline = time.monotonic() + 90
    # Two preflights per creation (the probe, then the request bound to its digest).
    while len(preflights(sandbox)) < 4 and all(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "the applies never asked their preflights"
        time.sleep(0.05)
    sandbox.fault("sn3", "slow", on=False)
    results = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    made = [a for a in creations(sandbox) if a["result"] == "ok"]
    assert len(made) == 1, creations(sandbox)
    assert int(sandbox.rollout_statuses()["svc-ledger"]["rolloutGeneration"]) == 1
    # The loser either saw the service in its preflight (NO-GO, nothing sent) or lost the
    # race at the control plane and found the service created with its release: never a
    # second creation, never a failure of its own making.
    assert codes in ([Exit.OK, Exit.OK], [Exit.OK, Exit.REFUSED_NO_GO]), results
    if codes == [Exit.OK, Exit.OK] and len(creations(sandbox)) == 2:
        assert any("someone else created ledger" in out for out, _ in results), results


def test_every_promotion_policy_refuses_a_promotion_without_evidence_sending_nothing(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, releaseEvidence="every-promotion")
    exit_code, document = plan_json(repo)
    assert exit_code == Exit.CHANGES_NO_GO
    found = {b["upstream_code"] for b in document["blockers"]
             if b["service"] == "checkout" and b["code"] == "release_evidence_required"}
    assert "RELEASE_EVIDENCE_MISSING" in found, document["blockers"]
    pre = next(p for p in document["preflights"] if p["service"] == "checkout")
    assert pre["purpose"] == "promotion" and pre["status"] == "local_only"
    # Checked locally: the upstream preflight is greenfield-only, so none is sent for it.
    assert not [a for a in preflights(sandbox) if a.get("serviceId") == "svc-checkout"]
    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.REFUSED_NO_GO, applied.out + applied.err
    assert not [a for a in sandbox.audit() if a["method"] == "promoteServiceImageRelease"]


def test_a_creation_one_cluster_does_not_prove_fails_the_gate_naming_it(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    # The rest of the reference repo converged first, so the creation is the only change.
    repo = repo_factory(sandbox, attempts=6)
    without_ledger(repo.path)
    assert repo.run("apply", str(repo.path), "--auto-approve").code == Exit.OK
    git(repo.path, "revert", "--no-edit", "HEAD")  # ledger and its grant are back
    sandbox.fault("sn2", "failed")  # sn2 runs whatever it is given, but FAILED

    result = repo.run("apply", str(repo.path), "--auto-approve")
    assert result.code == Exit.NOT_CONVERGED, result.out + result.err
    assert len(creations(sandbox)) == 1  # created, and not proven: never "Converged"
    assert "Converged" not in result.out
    line = next(x for x in result.err.splitlines() if "ledger on sn2" in x)
    assert LEDGER in line
    assert not [x for x in result.err.splitlines() if "ledger on sn1" in x or "ledger on sn3" in x]
    # The next plan does not call it done either, and a rerun creates nothing more.
    again = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert again.code != Exit.OK, again.out
    repo.run("apply", str(repo.path), "--auto-approve")
    assert len(creations(sandbox)) == 1


# -- issue 24: the control plane's configuration digest, learnt before binding ------------


def test_the_evidence_sent_carries_the_control_planes_configuration_digest(
        repo: Repo, sandbox: Sandbox) -> None:
    """Two preflights per creation, the first without evidence; the evidence, the fence
    and the creation carry the digest the control plane reported -- never the intent
    digest (the sandbox computes its own, so a client that sent the intent digest would
    be NO-GO RELEASE_EVIDENCE_INVALID here)."""
    with_ledger(repo)
    code, document = plan_json(repo)
    assert code == Exit.CHANGES, document["blockers"]
    [change], pre, upstream = ledger_part(document)
    assert not upstream and pre is not None
    sent = change["creation"]["preflight"]
    configuration = pre["report"]["configuration_digest"]
    assert sent["releaseEvidence"]["configurationDigest"] == configuration
    assert change["creation"]["fence"]["configuration_digest"] == configuration
    assert pre["configuration_digest"] == configuration
    assert configuration != sent["intentDigest"] == pre["intent_digest"]
    assert pre["report"]["intent_digest"] == sent["intentDigest"]
    # The request count per creation, as docs/new-services.md states it: two preflights.
    assert [(a["serviceId"], a["result"]) for a in preflights(sandbox)] == \
        [("svc-ledger", "ok"), ("svc-ledger", "ok")]
    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.OK, applied.out + applied.err
    # apply plans afresh (two more preflights), then sends the creation once.
    assert len(preflights(sandbox)) == 4 and len(creations(sandbox)) == 1


def test_two_preflights_that_disagree_are_no_go_naming_both_digests(
        repo: Repo, sandbox: Sandbox) -> None:
    with_ledger(repo)
    sandbox.fault("control-plane", "config-drift")
    code, document = plan_json(repo)
    assert code == Exit.CHANGES_NO_GO
    [found] = [b for b in document["blockers"] if b["code"] == "preflight_reports_disagree"]
    digests = {w.strip("(),;") for w in found["message"].split() if w.startswith("sha256:")}
    assert len(digests) == 2, found["message"]
    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.REFUSED_NO_GO, applied.out + applied.err
    assert "preflight_reports_disagree" in applied.err
    assert creations(sandbox) == []


def test_a_platform_manifest_pinned_is_oci_index_media_type_required(
        repo: Repo, sandbox: Sandbox) -> None:
    manifest = digest("ledger", "v1.0.0:linux/amd64")
    with_ledger(repo, ledger_yaml(digest_=manifest))
    pre = assert_no_go(repo, sandbox, "OCI_INDEX_MEDIA_TYPE_REQUIRED")
    codes = {b["code"] for b in pre["report"]["blockers"]}
    assert "OCI_INDEX_NOT_FOUND" not in codes


def test_a_saved_plan_whose_fresh_preflight_reports_another_configuration_digest_is_refused(
        repo: Repo, sandbox: Sandbox, tmp_path: Path) -> None:
    saved = _saved_plan_with_ledger(repo, tmp_path)
    reviewed = next(p for p in json.loads(saved.read_text())["preflights"]
                    if p["service"] == "ledger")["configuration_digest"]
    # Something the control plane folds into the configuration changed since the review.
    sandbox.fault("control-plane", "config-salt", salt="changed-after-review")
    applied = repo.run("apply", str(saved), "--auto-approve", cwd=repo.path)
    assert applied.code == Exit.REFUSED_MISMATCH, applied.out + applied.err
    line = next(x for x in applied.err.splitlines() if "configuration_digest" in x)
    assert reviewed in line and "→ sha256:" in line
    assert creations(sandbox) == []


# -- issue 18 item 5: GO only when apply can do it ----------------------------------------


def assert_refused_before_apply(repo: Repo, sandbox: Sandbox, code: str) -> None:
    exit_code, document = plan_json(repo)
    assert exit_code == Exit.CHANGES_NO_GO, document["blockers"]
    assert code in {b["code"] for b in document["blockers"] if b["service"] == "ledger"} | \
        {b["upstream_code"] for b in document["blockers"] if b["service"] == "ledger"}, \
        document["blockers"]
    applied = repo.run("apply", str(repo.path), "--auto-approve")
    assert applied.code == Exit.REFUSED_NO_GO, applied.out + applied.err
    assert creations(sandbox) == [], "a creation was sent from a NO-GO plan"


def test_a_repository_that_does_not_hold_the_digest_is_no_go(
        repo: Repo, sandbox: Sandbox) -> None:
    with_ledger(repo, ledger_yaml().replace("repository: shop/ledger",
                                            "repository: shop/ledger-mirror"))
    assert_refused_before_apply(repo, sandbox, "release_repository_mismatch")
    _, document = plan_json(repo)
    message = next(b["message"] for b in document["blockers"]
                   if b["code"] == "release_repository_mismatch")
    assert "registry.sandbox.test/shop/ledger-mirror" in message and \
        "registry.sandbox.test/shop/ledger," in message


def test_an_app_id_a_live_service_uses_is_no_go_before_any_preflight(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    seed = copy.deepcopy(seeding.DEFAULT_SEED)
    seed["services"].append({"id": "svc-old-ledger", "name": "old-ledger", "appId": "ledger",
                             "repository": "shop/old-ledger", "releases": [{"tag": "v0.9.0"}]})
    sandbox.seed(seed)
    repo = with_ledger(repo_factory(sandbox))
    assert_refused_before_apply(repo, sandbox, "app_id_in_use")
    assert preflights(sandbox) == []  # not even the read was sent


def test_a_tag_moved_after_it_was_pinned_is_no_go(repo: Repo, sandbox: Sandbox) -> None:
    with_ledger(repo)  # pins v1.0.0 = LEDGER
    moved = sandbox.push("ledger", "v1.0.0", repository="shop/ledger")
    assert moved != LEDGER
    assert_refused_before_apply(repo, sandbox, "IMMUTABLE_RELEASE_TAG_NOT_RESERVED")
