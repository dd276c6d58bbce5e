"""Golden cases: desired + live snapshot files → the expected JSON plan and Markdown.

The inputs and outputs live as files in ``tests/plan/golden/<case>/`` (gitops-engine's
testdata style). ``UPDATE_GOLDEN=1`` rewrites the expected outputs from the inputs
after a deliberate change; review the diff before committing it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from reconciler.core.desired import DesiredState
from reconciler.core.live import EgressRule, LiveSnapshot, Observation, ObservationKind
from reconciler.core.planning import Provenance, plan
from reconciler.render import jsonplan, markdown
from tests.plan import builders as b

GOLDEN = Path(__file__).parent / "golden"
SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "plan.schema.json").read_text())


def _replace(live: LiveSnapshot, app: str, obs: Observation) -> LiveSnapshot:
    rows = tuple(obs if o.cluster_id == obs.cluster_id else o for o in live.observations[app])
    return live.model_copy(update={"observations": {**live.observations, app: rows}})


def _silent() -> LiveSnapshot:
    return _replace(b.reference_live(), "checkout", Observation(
        cluster_id="sn2", address="127.0.0.3", kind=ObservationKind.SILENT,
        reason="unreachable: connection refused"))


def _stuck() -> LiveSnapshot:
    return _replace(b.reference_live(), "notifications", Observation(
        cluster_id="sn1", address="127.0.0.2", kind=ObservationKind.ANSWERED,
        runtime=b.runtime("notifications", "v0.7.9", 0, runtime_state="FAILED",
                          last_error="\x1b[31mbuild-attestation digest MISMATCH\x1b[0m")))


def _dropped() -> LiveSnapshot:
    return _replace(b.reference_live(), "notifications", Observation(
        cluster_id="sn3", address="127.0.0.4", kind=ObservationKind.ANSWERED,
        runtime=b.runtime("notifications", "v0.8.0", 1, egress=(),
                          egress_dropped=(EgressRule(host="smtp.mailgun.org", port=587),))))


def _unresolved() -> LiveSnapshot:
    live = b.reference_live()
    mesh = live.mesh.model_copy(update={"resolved": (), "resolve_error": "no A records",
                                        "expected_clusters": b.CLUSTERS})
    silent = {app: tuple(Observation(cluster_id=c, kind=ObservationKind.SILENT,
                                     reason="not resolved by DNS") for c in b.CLUSTERS)
              for app in live.observations}
    return live.model_copy(update={"mesh": mesh, "observations": silent})


def _not_observed() -> LiveSnapshot:
    live = b.reference_live()
    svc = live.services["svc-checkout"]
    return live.model_copy(update={"services": {
        **live.services, "svc-checkout": svc.model_copy(update={"releases": svc.releases[:1]})}})


def _converged_desired() -> DesiredState:
    """The desired state that the reference live already satisfies."""
    desired = b.reference_desired()
    current = {"checkout": "v2.3.0", "catalog": "v5.1.0"}
    services = []
    for svc in desired.services:
        update: dict[str, object] = {}
        if svc.name in current:
            update["release"] = svc.release.model_copy(update={
                "digest": b.digest(svc.name, current[svc.name]), "tag": current[svc.name]})
        if svc.name in ("checkout", "search"):
            update["egress"] = None
        services.append(svc.model_copy(update=update))
    grants = []
    for grant in desired.grants:
        entries = tuple(
            e.model_copy(update={"capabilities": (*e.capabilities, "deployment:promote-route")})
            if grant.user_id == "deploy-bot" and e.service == "search" else e
            for e in grant.services)
        grants.append(grant.model_copy(update={"services": entries}))
    return desired.model_copy(update={"services": tuple(services), "grants": tuple(grants)})


CASES: dict[str, Callable[[], tuple[DesiredState, LiveSnapshot, Provenance]]] = {
    "reference-go": lambda: (b.reference_desired(), b.reference_live(),
                             Provenance(commit="1" * 40)),
    "no-changes": lambda: (_converged_desired(), b.reference_live(), Provenance(commit="2" * 40)),
    "cluster-silent": lambda: (b.reference_desired(), _silent(), Provenance(commit="3" * 40)),
    "sn1-stuck-with-ansi": lambda: (b.reference_desired(), _stuck(), Provenance(commit="4" * 40)),
    "egress-dropped": lambda: (b.reference_desired(), _dropped(), Provenance(commit="5" * 40)),
    "gateway-unresolved": lambda: (b.reference_desired(), _unresolved(), Provenance()),
    "release-not-observed-dirty": lambda: (b.reference_desired(), _not_observed(),
                                           Provenance(commit="6" * 40, dirty=True)),
}


def _write_inputs(case: str) -> None:
    desired, live, prov = CASES[case]()
    folder = GOLDEN / case
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "desired.json").write_text(json.dumps(
        desired.model_dump(mode="json", by_alias=True), indent=1, sort_keys=True) + "\n")
    (folder / "live.json").write_text(json.dumps(
        json.loads(live.model_dump_json()), indent=1, sort_keys=True) + "\n")
    (folder / "provenance.json").write_text(json.dumps(
        {"commit": prov.commit, "dirty": prov.dirty}) + "\n")


def _plan_from_files(case: str) -> tuple[str, str]:
    folder = GOLDEN / case
    desired = DesiredState.model_validate(json.loads((folder / "desired.json").read_text()))
    live = LiveSnapshot.model_validate_json((folder / "live.json").read_text())
    prov = Provenance(**json.loads((folder / "provenance.json").read_text()))
    p = plan(desired, live, prov)
    return jsonplan.dumps(p), markdown.render(p)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_plan(case: str) -> None:
    folder = GOLDEN / case
    if os.environ.get("UPDATE_GOLDEN") or not (folder / "desired.json").exists():
        _write_inputs(case)
    got_json, got_md = _plan_from_files(case)
    if os.environ.get("UPDATE_GOLDEN"):
        (folder / "plan.json").write_text(got_json)
        (folder / "plan.md").write_text(got_md)
    assert got_json == (folder / "plan.json").read_text()
    assert got_md == (folder / "plan.md").read_text()
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(got_json))


def test_golden_cases_cover_each_verdict() -> None:
    verdicts = {json.loads((GOLDEN / c / "plan.json").read_text())["verdict"] for c in CASES}
    assert verdicts == {"go", "no_go", "no_changes"}


def test_ansi_from_a_cluster_never_reaches_the_renderings() -> None:
    _, got_md = _plan_from_files("sn1-stuck-with-ansi")
    assert "\x1b" not in got_md and "\\x1b" in got_md
    from reconciler.render import text
    desired, live, prov = CASES["sn1-stuck-with-ansi"]()
    assert "\x1b" not in text.render(plan(desired, live, prov), color=False)
