"""Planning a creation (issue 12), in-process: the preflight answers as the engine would
hand them over, and every reason a creation must not be sent as a blocker.

The end-to-end versions against the sandbox are in ``test_greenfield_e2e.py``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from reconciler.core import preflight as pf
from reconciler.core.desired import DesiredState, Service, Settings
from reconciler.core.live import LiveSnapshot, Observation, ObservationKind, ReadFailure
from reconciler.core.planning import Provenance, bound_requests, creation_requests, plan
from reconciler.core.plans import Action, Plan
from reconciler.render import jsonplan
from tests.plan import builders as b

COMMIT = "c" * 40
#: The configuration digest the control plane computes (its own, never the intent digest).
CONFIG = "sha256:" + "cf" * 32
KINDS = ("provenance", "sbom", "signature", "vulnerability-policy", "release-authorization")


def seeded(name: str, tag: str) -> str:
    return "sha256:" + hashlib.sha256(f"{name}:{tag}".encode()).hexdigest()


def ledger_doc(**over: Any) -> dict[str, Any]:
    index = seeded("ledger", "v1.0.0")
    doc = b.service_doc("ledger", "v1.0.0", [{"host": "api.stripe.com"}])
    doc["release"]["version"] = "1.0.0"
    doc["release"]["evidence"] = [
        {"kind": k, "statementDigest": seeded("ledger", f"v1.0.0:{k}"), "subjectDigest": index,
         "verifier": "sandbox-verifier", "verifiedAt": 1780000000000} for k in KINDS]
    doc["create"] = {"namespace": "ledger"}
    doc.update(over)
    return doc


def desired_with(ledger: dict[str, Any] | None = None, **policy: Any) -> DesiredState:
    base = b.reference_desired()
    settings = base.settings
    if policy:
        settings = Settings.model_validate({**b.SETTINGS, "policy": policy})
    return base.model_copy(update={
        "settings": settings,
        "services": (*base.services, Service.model_validate(ledger or ledger_doc()))})


def live_without_ledger() -> LiveSnapshot:
    live = b.reference_live()
    rows = tuple(Observation(cluster_id=c, address=b.ADDRESSES[c], kind=ObservationKind.NO_RECORD)
                 for c in b.CLUSTERS)
    return live.model_copy(update={
        "services": {**live.services, "svc-ledger": ReadFailure(
            service_id="svc-ledger", code="SERVICE_NOT_FOUND",
            reason="the control plane has no service with this id")},
        "observations": {**live.observations, "ledger": rows}})


def report_for(request: dict[str, Any], *, blockers: list[dict[str, str]] | None = None,
               create_granted: bool = True, **over: Any) -> dict[str, Any]:
    """A report as the sandbox writes it for ``request``."""
    index = request["ociIndexDigest"]
    report: dict[str, Any] = {
        "schemaVersion": 2, "decision": "NO-GO" if blockers else "GO",
        "mutationPerformed": False, "generatedAt": 1790000000001,
        "service": {"serviceId": request["serviceId"], "serviceName": "ledger",
                    "workspaceIdentity": request["serviceId"],
                    "registryHost": "registry.sandbox.test", "registryRepository": "shop/ledger",
                    "deployOnPush": False},
        "source": {"revision": request["sourceRevision"], "dirty": request["sourceDirty"],
                   "version": request["version"], "intentDigest": request["intentDigest"],
                   "configurationDigest": CONFIG},
        "currentImage": {"mutableReference": False, "platforms": []},
        "requestedImage": {
            "digest": index, "releaseTag": request.get("releaseTag"), "tagReserved": True,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "platforms": [{"os": "linux", "architecture": arch,
                           "digest": seeded("ledger", f"v1.0.0:linux/{arch}"),
                           "runnable": True, "manifestPresent": True}
                          for arch in ("amd64", "arm64")]},
        "runtimeTasks": [],
        "runtimeAttestation": {"requiredReplicaCount": 0, "observedReplicaCount": 0,
                               "healthyReplicaCount": 0, "verifiedReplicaCount": 0,
                               "consistentDigest": False},
        "platformBindings": [], "corestoreResources": [],
        "proposed": {"namespace": request["proposedNamespace"], "corestoreResources": [],
                     "namespaceReserved": True, "inventoryComplete": True,
                     "namespaceBlank": True, "versionReserved": True,
                     "wouldReplaceExistingState": False},
        "authorizationChecks": [
            {"capability": "deployment:preflight", "granted": True},
            {"capability": "deployment:create-greenfield", "granted": create_granted}],
        "compatibilityBlockers": blockers or [],
    }
    report.update(over)
    return report


EVIDENCE_MISSING = [{"code": "RELEASE_EVIDENCE_MISSING", "message": f"Missing {k} evidence."}
                    for k in KINDS]


def planned(desired: DesiredState | None = None, *, reply: Any = None, error: str | None = None,
            execution: bool = True, provenance: Provenance | None = None,
            answer: bool = True, probe: dict[str, Any] | None = None,
            live: LiveSnapshot | None = None, **report_over: Any) -> Plan:
    """The plan after the engine's two rounds: each probe (no evidence) answered as the
    sandbox would (every kind of evidence missing, plus ``blockers``; ``probe`` overrides
    fields of that report), then each bound request answered with ``reply`` or a report
    for it (``report_over``)."""
    desired = desired or desired_with()
    live = live or live_without_ledger()
    prov = provenance or Provenance(commit=COMMIT)
    answers: dict[str, pf.Answer] = {}
    for ask in creation_requests(desired, live, prov) if answer else []:
        over = {k: v for k, v in report_over.items() if k != "blockers"}
        value = report_for(ask.request, blockers=[*(report_over.get("blockers") or []),
                                                  *EVIDENCE_MISSING], **over)
        value.update(probe or {})
        answers[ask.request_id] = pf.Answer(request_id=ask.request_id,
                                            reply=None if error else value, error=error)
    first = pf.Greenfield(execution_available=execution, answers=answers)
    for ask in bound_requests(desired, live, prov, first):
        value = reply if reply is not None else report_for(ask.request, **report_over)
        answers[ask.request_id] = pf.Answer(request_id=ask.request_id, reply=value)
    greenfield = pf.Greenfield(execution_available=execution, answers=answers)
    return plan(desired, live, prov, greenfield)


def ledger_blockers(p: Plan) -> set[tuple[str, str | None]]:
    return {(b_.code.value, b_.upstream_code) for b_ in p.blockers if b_.service == "ledger"}


def test_complete_evidence_and_a_go_report_plan_one_create_with_its_fence() -> None:
    p = planned()
    creates = [c for c in p.changes if c.action is Action.CREATE]
    assert [c.service for c in creates] == ["ledger"]
    assert not ledger_blockers(p)
    change = creates[0]
    assert change.creation is not None and change.creation.fence is not None
    fence = change.creation.fence
    request = change.creation.preflight
    # Bound to the control plane's configuration digest (from the probe's report), never
    # to the intent digest: a real control plane refuses evidence bound to anything else.
    assert fence.configuration_digest == CONFIG != request["intentDigest"]
    assert request["releaseEvidence"]["configurationDigest"] == CONFIG  # type: ignore[index]
    assert (fence.source_service_id, fence.source_revision, fence.target_namespace,
            fence.oci_index_digest) == ("svc-ledger", COMMIT, "ledger", seeded("ledger", "v1.0.0"))
    pre = p.preflight_of("ledger")
    assert pre is not None and pre.status is pf.Status.GO and pre.decision is pf.Decision.GO
    assert pre.report is not None and [pl.architecture for pl in pre.report.platforms] == \
        ["amd64", "arm64"]
    # The rest of the reference repo plans as before; the plan is GO, not "no changes".
    assert p.verdict.value == "go"


def test_the_idempotency_key_is_derived_from_the_intent() -> None:
    first = next(c for c in planned().changes if c.action is Action.CREATE)
    again = next(c for c in planned().changes if c.action is Action.CREATE)
    assert first.idempotency_key == again.idempotency_key
    moved = planned(desired_with(ledger_doc(create={"namespace": "ledger-2"})))
    other = next(c for c in moved.changes if c.action is Action.CREATE)
    assert other.idempotency_key != first.idempotency_key
    # Another commit, same document: the same creation (a PR review calls it pending),
    # though its request and fence name the new commit.
    later = next(c for c in planned(provenance=Provenance(commit="e" * 40)).changes
                 if c.action is Action.CREATE)
    assert later.idempotency_key == first.idempotency_key
    assert later.creation is not None and later.creation.fence is not None
    assert later.creation.fence.source_revision == "e" * 40


@pytest.mark.parametrize("code", ["NAMESPACE_COLLISION", "OCI_PLATFORM_MANIFEST_MISSING",
                                  "RELEASE_EVIDENCE_INVALID", "A_CODE_FROM_A_NEWER_SERVER"])
def test_a_no_go_report_blocks_with_the_upstream_code_verbatim(code: str) -> None:
    p = planned(blockers=[{"code": code, "message": "said the control plane\x1b[31m"}])
    assert ("preflight_no_go", code) in ledger_blockers(p)
    assert p.verdict.value == "no_go"
    assert all("\x1b" not in b_.message for b_ in p.blockers)
    pre = p.preflight_of("ledger")
    assert pre is not None and pre.status is pf.Status.NO_GO


@pytest.mark.parametrize("over,why", [
    ({"mutationPerformed": True}, "mutationPerformed is true"),
    ({"mutationPerformed": None}, "mutationPerformed is missing"),
    ({"schemaVersion": 1}, "schemaVersion"),
    ({"source": None}, "report.source is not an object"),
    ({"decision": "MAYBE"}, "decision"),
    ({"compatibilityBlockers": [{"code": "X"}]}, "message is not a string"),
])
def test_an_invalid_report_is_itself_a_blocker(over: dict[str, Any], why: str) -> None:
    p = planned(**over)
    found = [b_ for b_ in p.blockers if b_.code.value == "preflight_report_invalid"]
    assert found and why in found[0].message
    pre = p.preflight_of("ledger")
    assert pre is not None and pre.status is pf.Status.INVALID and pre.report is None


def test_a_go_report_with_blockers_or_about_another_revision_is_invalid() -> None:
    p = planned(decision="GO", compatibilityBlockers=[{"code": "NAMESPACE_COLLISION",
                                                       "message": "taken"}])
    assert ("preflight_report_invalid", None) in ledger_blockers(p)
    desired = desired_with()
    ask = creation_requests(desired, live_without_ledger(), Provenance(commit=COMMIT))[0]
    other = report_for({**ask.request, "sourceRevision": "d" * 40})
    p = planned(reply=other)
    message = next(b_.message for b_ in p.blockers if b_.service == "ledger")
    assert "another request" in message and "d" * 12 in message


def test_without_the_creation_request_the_plan_says_greenfield_execution_unavailable() -> None:
    p = planned(execution=False)
    assert ("preflight_no_go", "GREENFIELD_EXECUTION_UNAVAILABLE") in ledger_blockers(p)
    pre = p.preflight_of("ledger")
    # The preflight itself was still asked and shown: honest, not skipped.
    assert pre is not None and pre.report is not None and pre.execution_available is False
    assert pre.decision is pf.Decision.NO_GO


def test_the_create_capability_must_be_granted_in_the_report() -> None:
    p = planned(create_granted=False)
    assert ("preflight_no_go", "AUTHORIZATION_MISSING") in ledger_blockers(p)
    message = next(b_.message for b_ in p.blockers if b_.upstream_code == "AUTHORIZATION_MISSING")
    assert "deployment:create-greenfield" in message
    # A report that does not mention the capability proves nothing either.
    ask = creation_requests(desired_with(), live_without_ledger(), Provenance(commit=COMMIT))[0]
    bare = report_for(ask.request)
    bare["authorizationChecks"] = [{"capability": "deployment:preflight", "granted": True}]
    assert ("preflight_no_go", "AUTHORIZATION_MISSING") in ledger_blockers(planned(reply=bare))


def test_no_answer_or_a_failed_call_never_plans_a_creation_unchecked() -> None:
    p = planned(answer=False)
    assert ("preflight_not_asked", None) in ledger_blockers(p)
    p = planned(error="unreachable: connection refused")
    assert ("preflight_failed", None) in ledger_blockers(p)
    # The planner with no greenfield answers at all (an old caller) fails closed too,
    # without claiming what it never asked (whether the control plane executes creations).
    p = plan(desired_with(), live_without_ledger(), Provenance(commit=COMMIT))
    assert ledger_blockers(p) == {("preflight_not_asked", None)}


def test_local_checks_fail_closed_and_name_the_missing_evidence() -> None:
    evidence = [e for e in ledger_doc()["release"]["evidence"] if e["kind"] != "sbom"]
    doc = ledger_doc()
    doc["release"]["evidence"] = evidence
    desired = desired_with(doc)
    prov = Provenance(commit=COMMIT)
    assert creation_requests(desired, live_without_ledger(), prov) == []  # nothing is sent
    p = planned(desired)
    assert ("preflight_no_go", "RELEASE_EVIDENCE_MISSING") in ledger_blockers(p)
    assert any("Missing sbom evidence" in b_.message for b_ in p.blockers)
    pre = p.preflight_of("ledger")
    assert pre is not None and pre.status is pf.Status.NOT_SENT


def test_a_dirty_repo_sends_no_preflight_and_says_source_worktree_dirty() -> None:
    prov = Provenance(commit=COMMIT, dirty=True)
    assert creation_requests(desired_with(), live_without_ledger(), prov) == []
    p = planned(provenance=prov)
    assert ("preflight_no_go", "SOURCE_WORKTREE_DIRTY") in ledger_blockers(p)


def test_a_plan_with_a_create_survives_the_wire_and_keeps_its_report() -> None:
    p = planned(blockers=[{"code": "NAMESPACE_COLLISION", "message": "taken"}])
    back = jsonplan.from_wire(jsonplan.to_wire(p))
    assert back == p
    ok = planned()
    assert jsonplan.from_wire(jsonplan.to_wire(ok)) == ok


def test_every_promotion_policy_checks_the_promotions_evidence_locally() -> None:
    # checkout v2.4.0 is a promotion in the reference; it declares no evidence.
    p = planned(desired_with(releaseEvidence="every-promotion"))
    found = {b_.upstream_code for b_ in p.blockers
             if b_.service == "checkout" and b_.code.value == "release_evidence_required"}
    assert "RELEASE_EVIDENCE_MISSING" in found
    pre = p.preflight_of("checkout")
    assert pre is not None and pre.purpose == "promotion" and pre.status is pf.Status.LOCAL_ONLY
    # The default asks nothing of promotions.
    assert p.preflight_of("checkout") is not None
    assert planned().preflight_of("checkout") is None


def test_every_promotion_policy_passes_complete_evidence_bound_to_the_pin() -> None:
    base = b.reference_desired()
    checkout = next(s for s in base.services if s.name == "checkout")
    index = checkout.release.digest
    doc = checkout.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["release"]["evidence"] = [
        {"kind": k, "statementDigest": seeded("checkout", k), "subjectDigest": index,
         "verifier": "v", "verifiedAt": 1} for k in KINDS]
    settings = Settings.model_validate({**b.SETTINGS, "policy": {
        "releaseEvidence": "every-promotion"}})
    desired = base.model_copy(update={"settings": settings, "services": tuple(
        Service.model_validate(doc) if s.name == "checkout" else s for s in base.services)})
    p = plan(desired, b.reference_live(), Provenance(commit=COMMIT))
    assert not [b_ for b_ in p.blockers if b_.service == "checkout"]
    pre = p.preflight_of("checkout")
    assert pre is not None and not pre.blocked


# -- issue 24: the configuration digest is learnt, then bound -----------------------------


def test_the_probe_carries_no_evidence_and_the_bound_request_the_probes_digest() -> None:
    desired, live, prov = desired_with(), live_without_ledger(), Provenance(commit=COMMIT)
    [probe] = creation_requests(desired, live, prov)
    assert "releaseEvidence" not in probe.request
    reply = report_for(probe.request, blockers=EVIDENCE_MISSING)
    reply["source"]["configurationDigest"] = "sha256:" + "5e" * 32
    first = pf.Greenfield(execution_available=True, answers={
        probe.request_id: pf.Answer(request_id=probe.request_id, reply=reply)})
    [bound] = bound_requests(desired, live, prov, first)
    assert bound.request_id != probe.request_id
    evidence = bound.request["releaseEvidence"]
    assert isinstance(evidence, dict)
    assert evidence["configurationDigest"] == "sha256:" + "5e" * 32
    assert evidence["configurationDigest"] != probe.request["intentDigest"]
    assert {k: v for k, v in bound.request.items()
            if k not in ("releaseEvidence", "requestId")} == \
        {k: v for k, v in probe.request.items() if k != "requestId"}


@pytest.mark.parametrize("reply,why", [
    (None, "the preflight call failed"),
    ({"schemaVersion": 2}, "not a valid report"),
])
def test_no_valid_probe_report_no_second_request(reply: Any, why: str) -> None:
    desired, live, prov = desired_with(), live_without_ledger(), Provenance(commit=COMMIT)
    [probe] = creation_requests(desired, live, prov)
    answer = pf.Answer(request_id=probe.request_id, reply=reply,
                       error="refused" if reply is None else None)
    first = pf.Greenfield(execution_available=True, answers={probe.request_id: answer})
    assert bound_requests(desired, live, prov, first) == []
    p = plan(desired, live, prov, first)
    assert any(why in b_.message for b_ in p.blockers if b_.service == "ledger")
    assert p.verdict.value == "no_go"


def test_a_probe_with_a_malformed_configuration_digest_binds_nothing() -> None:
    [probe] = creation_requests(desired_with(), live_without_ledger(), Provenance(commit=COMMIT))
    p = planned(probe={"source": {"revision": COMMIT, "dirty": False, "version": "1.0.0",
                                  "intentDigest": probe.request["intentDigest"],
                                  "configurationDigest": "sha256:zz"}})
    assert ("preflight_report_invalid", None) in ledger_blockers(p)
    message = next(b_.message for b_ in p.blockers if b_.service == "ledger")
    assert "probe" in message and "configurationDigest is not a canonical" in message


def test_reports_that_disagree_on_the_configuration_digest_are_no_go_naming_both() -> None:
    other = "sha256:" + "0d" * 32
    assert planned().verdict.value == "go"  # the baseline: the two agree
    desired, live, prov = desired_with(), live_without_ledger(), Provenance(commit=COMMIT)
    [probe] = creation_requests(desired, live, prov)
    first = pf.Greenfield(execution_available=True, answers={probe.request_id: pf.Answer(
        request_id=probe.request_id, reply=report_for(probe.request, blockers=EVIDENCE_MISSING))})
    [bound] = bound_requests(desired, live, prov, first)
    moved = report_for(bound.request)
    moved["source"]["configurationDigest"] = other
    answers = {**(first.answers or {}),
               bound.request_id: pf.Answer(request_id=bound.request_id, reply=moved)}
    p = plan(desired, live, prov, pf.Greenfield(execution_available=True, answers=answers))
    found = [b_ for b_ in p.blockers if b_.code.value == "preflight_reports_disagree"]
    assert len(found) == 1 and CONFIG in found[0].message and other in found[0].message
    assert p.verdict.value == "no_go"
    # Only the evidence blockers may differ: another blocker in one of them is named too.
    extra = report_for(bound.request, blockers=[{"code": "VERSION_COLLISION",
                                                 "message": "taken"}])
    answers[bound.request_id] = pf.Answer(request_id=bound.request_id, reply=extra)
    p = plan(desired, live, prov, pf.Greenfield(execution_available=True, answers=answers))
    found = [b_ for b_ in p.blockers if b_.code.value == "preflight_reports_disagree"]
    assert found and "only the bound report names VERSION_COLLISION" in found[0].message


# -- issue 18 item 5: a GO report's own fields, and appIds in use -------------------------


def _requested(**over: Any) -> dict[str, Any]:
    base = {"digest": seeded("ledger", "v1.0.0"), "releaseTag": "v1.0.0", "tagReserved": True,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "platforms": [{"os": "linux", "architecture": "amd64", "runnable": True,
                           "manifestPresent": True}]}
    return {**base, **over}


def _proposed(**over: Any) -> dict[str, Any]:
    base = {"namespace": "ledger", "corestoreResources": [], "namespaceReserved": True,
            "inventoryComplete": True, "namespaceBlank": True, "versionReserved": True,
            "wouldReplaceExistingState": False}
    return {**base, **over}


@pytest.mark.parametrize("over,code,upstream", [
    ({"requestedImage": _requested(tagReserved=False)}, "preflight_no_go",
     "IMMUTABLE_RELEASE_TAG_NOT_RESERVED"),
    ({"requestedImage": _requested(releaseTag="v9")}, "preflight_no_go",
     "IMMUTABLE_RELEASE_TAG_NOT_RESERVED"),
    ({"proposed": _proposed(namespaceBlank="unknown")}, "preflight_no_go",
     "NAMESPACE_NOT_PROVEN_BLANK"),
    ({"proposed": _proposed(inventoryComplete=False)}, "preflight_no_go",
     "CORESTORE_INVENTORY_UNAVAILABLE"),
    ({"proposed": _proposed(namespaceReserved=False)}, "preflight_no_go",
     "NAMESPACE_NOT_RESERVED"),
    ({"proposed": _proposed(versionReserved=False)}, "preflight_no_go", "VERSION_NOT_RESERVED"),
    ({"proposed": _proposed(wouldReplaceExistingState="unknown")}, "preflight_no_go",
     "WOULD_REPLACE_EXISTING_STATE"),
    ({"requestedImage": _requested(
        mediaType="application/vnd.oci.image.manifest.v1+json")}, "preflight_no_go",
     "OCI_INDEX_MEDIA_TYPE_REQUIRED"),
    ({"requestedImage": _requested(platforms=[])}, "preflight_no_go", "OCI_PLATFORM_MISSING"),
    ({"requestedImage": _requested(platforms=[
        {"os": "linux", "architecture": "amd64", "runnable": True, "manifestPresent": True},
        {"os": "linux", "architecture": "arm64", "runnable": False,
         "manifestPresent": False}])}, "preflight_no_go", "OCI_PLATFORM_MANIFEST_MISSING"),
    ({"service": {"serviceId": "svc-ledger", "serviceName": "", "workspaceIdentity": "ws",
                  "registryHost": "registry.sandbox.test", "registryRepository": "shop/other",
                  "deployOnPush": False}}, "release_repository_mismatch", None),
])
def test_a_go_report_whose_own_fields_say_no_is_no_go(over: dict[str, Any], code: str,
                                                      upstream: str | None) -> None:
    p = planned(**over)
    assert (code, upstream) in ledger_blockers(p), ledger_blockers(p)
    assert p.verdict.value == "no_go"
    pre = p.preflight_of("ledger")
    assert pre is not None and pre.decision is pf.Decision.NO_GO
    assert pre.report is not None and pre.report.decision is pf.Decision.GO


def test_the_repository_mismatch_names_both_repositories() -> None:
    p = planned(service={"serviceId": "svc-ledger", "serviceName": "",
                         "workspaceIdentity": "ws", "registryHost": "registry.sandbox.test",
                         "registryRepository": "shop/elsewhere", "deployOnPush": False})
    message = next(b_.message for b_ in p.blockers if b_.code.value ==
                   "release_repository_mismatch")
    assert "shop/elsewhere" in message and "registry.sandbox.test/shop/ledger" in message


def test_an_app_id_in_use_blocks_before_any_preflight() -> None:
    live = live_without_ledger()
    taken = live.model_copy(update={"app_ids": {"ledger": "svc-old-ledger"}})
    desired, prov = desired_with(), Provenance(commit=COMMIT)
    assert creation_requests(desired, taken, prov) == []  # nothing is sent
    p = planned(live=taken)
    assert ("app_id_in_use", None) in ledger_blockers(p)
    message = next(b_.message for b_ in p.blockers if b_.code.value == "app_id_in_use")
    assert "svc-old-ledger" in message and "ledger" in message
    pre = p.preflight_of("ledger")
    assert pre is not None and pre.status is pf.Status.NOT_SENT
    # Its own id is no collision (a service listed under its own appId).
    own = live.model_copy(update={"app_ids": {"ledger": "svc-ledger"}})
    assert creation_requests(desired, own, prov) != []


def test_a_bound_report_with_another_intent_digest_is_named_as_a_disagreement() -> None:
    desired, live, prov = desired_with(), live_without_ledger(), Provenance(commit=COMMIT)
    [probe] = creation_requests(desired, live, prov)
    first = pf.Greenfield(execution_available=True, answers={probe.request_id: pf.Answer(
        request_id=probe.request_id, reply=report_for(probe.request, blockers=EVIDENCE_MISSING))})
    [bound] = bound_requests(desired, live, prov, first)
    other = "sha256:" + "1e" * 32
    moved = report_for(bound.request)
    moved["source"]["intentDigest"] = other
    answers = {**(first.answers or {}),
               bound.request_id: pf.Answer(request_id=bound.request_id, reply=moved)}
    p = plan(desired, live, prov, pf.Greenfield(execution_available=True, answers=answers))
    [found] = [b_ for b_ in p.blockers if b_.code.value == "preflight_reports_disagree"]
    assert other in found.message and str(probe.request["intentDigest"]) in found.message
    assert p.verdict.value == "no_go"
    change = next(c for c in p.changes if c.service == "ledger")
    assert change.creation is not None and change.creation.fence is None  # nothing to send
