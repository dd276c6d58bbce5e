"""The Service document's greenfield fields: release.version, release.evidence, create.

Bad input is reported by the real CLI with the file, line and field (like the corpus in
``test_corpus``), and what the models accept the published schema accepts too. The
fixture ``fixtures/ledger.yaml`` (the greenfield example, copied into
``examples/desired-state`` once planning handles creates) matches the sandbox's
deterministic registry defaults, and a service missing evidence kinds is still a valid
file: a service that already exists needs none (missing kinds are planning blockers,
``core.greenfield``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.core.desired import EvidenceKind, Service
from reconciler.sandbox import rollouts
from reconciler.shell import loading, validating
from tests.validation.conftest import Run
from tests.validation.test_corpus import Case, expect, write
from tests.validation.test_schema import VALIDATOR, _documents

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ledger.yaml"
LEDGER = FIXTURE.read_text(encoding="utf-8")
DIGEST = "sha256:9a5afa418cac614e5f9b4f6bbfb949a3612fd4e22e68671b0eea81590838116f"
OTHER = "sha256:" + "b" * 64
NEW = "services/ledger.yaml"
# Lines of the fixture: 16 version, 18 evidence[0].kind, 19 its statementDigest, 20 its
# subjectDigest, 21 its verifier, 22 its verifiedAt, 23 evidence[1].kind (sbom),
# 43 create:, 44 namespace (or the first key of create).


def ledger(old: str, new: str, count: int = 1) -> str:
    assert old in LEDGER, old
    return LEDGER.replace(old, new, count)


def corestore(*entries: str) -> str:
    lines = "\n".join(f"    - {entry}" for entry in entries)
    return ledger("  namespace: ledger\n", f"  namespace: ledger\n  corestore:\n{lines}\n")


CASES = [
    Case("version-number", write(NEW, ledger("version: 1.0.0", "version: 1.0")), NEW, 16,
         "release.version", "canonical semantic version like 1.0.0 or 2.1.0-rc.1 (no leading "
         "'v', no leading zeros) (got the number 1.0)"),
    Case("version-leading-v", write(NEW, ledger("version: 1.0.0", "version: v1.0.0")), NEW, 16,
         "release.version", "'v1.0.0' must be a canonical semantic version"),
    Case("version-leading-zero", write(NEW, ledger("version: 1.0.0", "version: 01.0.0")), NEW,
         16, "release.version", "'01.0.0' must be a canonical semantic version"),
    Case("version-prerelease-leading-zero", write(NEW, ledger("version: 1.0.0",
                                                              "version: 1.0.0-rc.01")),
         NEW, 16, "release.version", "must be a canonical semantic version"),
    Case("version-too-long", write(NEW, ledger("version: 1.0.0",
                                               "version: 1.0.0-" + "a" * 100)),
         NEW, 16, "release.version", "too long (at most 100 characters)"),
    Case("version-newline-block", write(NEW, ledger("version: 1.0.0", "version: |\n    1.0.0")),
         NEW, 16, "release.version", "must be a canonical semantic version"),
    Case("evidence-kind-typo", write(NEW, ledger("kind: sbom\n", "kind: sbomm\n")), NEW, 23,
         "release.evidence[1].kind", "did you mean `sbom`?"),
    Case("evidence-kind-unknown", write(NEW, ledger("kind: sbom\n", "kind: slsa\n")), NEW, 23,
         "release.evidence[1].kind", "expected one of 'provenance', 'sbom', 'signature', "
         "'vulnerability-policy' or 'release-authorization'"),
    Case("evidence-kind-twice", write(NEW, ledger("kind: sbom\n", "kind: provenance\n")), NEW,
         23, "release.evidence[1].kind", "provenance evidence is listed twice (also "
         "evidence[0])"),
    Case("evidence-bound-to-another-image", write(NEW, ledger(f"subjectDigest: {DIGEST}",
                                                              f"subjectDigest: {OTHER}")),
         NEW, 20, "release.evidence[0].subjectDigest",
         f"provenance evidence is bound to {OTHER} but the release pins {DIGEST}"),
    Case("evidence-subject-digest-uppercase", write(NEW, ledger(
        f"subjectDigest: {DIGEST}", f"subjectDigest: {DIGEST.upper().replace('SHA', 'sha')}")),
         NEW, 20, "release.evidence[0].subjectDigest", "sha256:<64 lower-case hex>"),
    Case("evidence-statement-digest-short", write(NEW, ledger(
        "statementDigest: sha256:8d94", "statementDigest: sha256:zz")), NEW, 19,
         "release.evidence[0].statementDigest", "sha256:<64 lower-case hex>"),
    Case("evidence-verifier-blank", write(NEW, ledger("verifier: sandbox-verifier",
                                                      'verifier: "   "')), NEW, 21,
         "release.evidence[0].verifier", "not blank"),
    Case("evidence-verifier-empty", write(NEW, ledger("verifier: sandbox-verifier",
                                                      'verifier: ""')), NEW, 21,
         "release.evidence[0].verifier", "must not be empty"),
    Case("evidence-verifier-missing", write(NEW, ledger("      verifier: sandbox-verifier\n",
                                                        "")), NEW, 18,
         "release.evidence[0].verifier", "required key `verifier` is missing"),
    Case("evidence-verified-at-zero", write(NEW, ledger("verifiedAt: 1780000000000",
                                                        "verifiedAt: 0")), NEW, 22,
         "release.evidence[0].verifiedAt", "from 1 to 9007199254740991 (got the number 0)"),
    Case("evidence-verified-at-unsafe", write(NEW, ledger("verifiedAt: 1780000000000",
                                                          "verifiedAt: 9007199254740992")),
         NEW, 22, "release.evidence[0].verifiedAt", "from 1 to 9007199254740991"),
    Case("evidence-verified-at-float", write(NEW, ledger("verifiedAt: 1780000000000",
                                                         "verifiedAt: 1780000000000.5")),
         NEW, 22, "release.evidence[0].verifiedAt", "a whole number"),
    Case("evidence-verified-at-string", write(NEW, ledger("verifiedAt: 1780000000000",
                                                          'verifiedAt: "1780000000000"')),
         NEW, 22, "release.evidence[0].verifiedAt", "a whole number (got the string"),
    Case("evidence-unknown-key", write(NEW, ledger("verifiedAt: 1780000000000",
                                                   "verifiedat: 1780000000000")), NEW, 22,
         "release.evidence[0].verifiedat", "did you mean `verifiedAt`?"),
    Case("evidence-not-a-list", write(NEW, ledger("  evidence:\n", "  evidence: sbom\n  x:\n")),
         NEW, 17, "release.evidence", "must be a list"),
    Case("namespace-uppercase", write(NEW, ledger("namespace: ledger", "namespace: Ledger")),
         NEW, 44, "create.namespace", "'Ledger' must be a DNS label"),
    Case("namespace-underscore", write(NEW, ledger("namespace: ledger", "namespace: led_ger")),
         NEW, 44, "create.namespace", "must be a DNS label"),
    Case("namespace-too-long", write(NEW, ledger("namespace: ledger", "namespace: " + "a" * 64)),
         NEW, 44, "create.namespace", "at most 63 characters"),
    Case("namespace-trailing-dash", write(NEW, ledger("namespace: ledger", "namespace: ledger-")),
         NEW, 44, "create.namespace", "must be a DNS label"),
    Case("namespace-missing", write(NEW, ledger("  namespace: ledger\n",
                                                "  corestore: []\n")), NEW, 44,
         "create.namespace", "required key `namespace` is missing"),
    Case("create-unknown-key", write(NEW, ledger("namespace: ledger", "namespce: ledger")), NEW,
         44, "create.namespce", "did you mean `namespace`?"),
    Case("corestore-capability-typo", write(NEW, corestore(
        "{capability: databse, resourceName: db}")), NEW, 46, "create.corestore[0].capability",
         "did you mean `database`?"),
    Case("corestore-resource-name", write(NEW, corestore(
        "{capability: database, resourceName: Ledger_DB}")), NEW, 46,
         "create.corestore[0].resourceName", "'Ledger_DB' must be a DNS label"),
    Case("corestore-duplicate", write(NEW, corestore(
        "{capability: database, resourceName: db}", "{capability: objectstorage, "
        "resourceName: db}", "{capability: database, resourceName: db}")), NEW, 48,
         "create.corestore[2]", "duplicates corestore[0] (database db)"),
    Case("corestore-nine", write(NEW, corestore(*(
        f"{{capability: database, resourceName: db{i}}}" for i in range(9)))), NEW, 46,
         "create.corestore", "has 9 entries; at most 8 are allowed"),
]


def test_the_cases_are_distinct_and_cover_each_new_field() -> None:
    assert len({case.id for case in CASES}) == len(CASES)
    fields = {case.field.split("[")[0].split(".")[0] + "." + case.field.rsplit(".", 1)[-1]
              for case in CASES}
    for name in ("version", "kind", "subjectDigest", "statementDigest", "verifier",
                 "verifiedAt", "namespace", "capability", "resourceName"):
        assert any(f.endswith("." + name) for f in fields), name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_greenfield_fields_are_reported_with_file_line_and_field(
        case: Case, repo: Path, validate: Callable[..., Run]) -> None:
    write(NEW, LEDGER)(repo)
    assert validate(str(repo)).code == 0  # the starting point is valid
    case.setup(repo)
    expect(validate(str(repo)), repo, case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_schema_agrees_with_the_models_on_greenfield_fields(case: Case, repo: Path) -> None:
    case.setup(repo)
    checked = 0
    for document in _documents(repo):
        if document.path != NEW:
            continue
        model, _ = validating.validate_document(document)
        assert model is None
        # Rules the schema can express are refused by it too; the cross-field ones (one
        # attestation per kind, bound to release.digest, unique Corestore resources) are
        # the models' alone.
        cross_field = case.id in ("evidence-kind-twice", "evidence-bound-to-another-image",
                                  "corestore-duplicate")
        assert VALIDATOR.is_valid(document.value) is cross_field
        checked += 1
    assert checked == 1


def test_the_fixture_is_the_sandbox_default_greenfield_release() -> None:
    documents, problems = loading.parse_bytes(FIXTURE.read_bytes(), NEW)
    assert not problems
    model, diagnostics = validating.validate_document(documents[0])
    assert isinstance(model, Service) and not diagnostics
    assert list(VALIDATOR.iter_errors(documents[0].value)) == []
    assert (model.name, model.service_id, model.app_id) == ("ledger", "svc-ledger", "ledger")
    release = model.release
    assert (release.registry_host, release.repository, release.tag, release.version) == (
        "registry.sandbox.test", "shop/ledger", "v1.0.0", "1.0.0")
    assert release.digest == DIGEST == rollouts.seeded_digest("ledger", "v1.0.0")
    assert "sha256:" + hashlib.sha256(b"ledger:v1.0.0").hexdigest() == DIGEST
    assert [a.kind for a in release.evidence] == list(EvidenceKind)
    for attestation in release.evidence:
        assert attestation.statement_digest == rollouts.seeded_digest(
            "ledger", f"v1.0.0:{attestation.kind.value}")
        assert attestation.subject_digest == DIGEST
        assert (attestation.verifier, attestation.verified_at) == (
            "sandbox-verifier", 1780000000000)
    assert model.create is not None and model.create.namespace == "ledger"
    assert model.create.corestore == ()


def test_missing_evidence_kinds_and_no_create_are_valid_files(
        repo: Path, validate: Callable[..., Run]) -> None:
    # A service that already exists needs no evidence and no create: what a creation
    # lacks is said by the plan (RELEASE_EVIDENCE_MISSING, NAMESPACE_NOT_RESERVED).
    start = LEDGER.index("    - kind: sbom")
    end = LEDGER.index("create:")
    partial = LEDGER[:start] + LEDGER[end:]
    write(NEW, partial.replace("create:\n  namespace: ledger\n", ""))(repo)
    run = validate(str(repo))
    assert run.code == 0, run.out + run.err
    documents, _ = loading.parse_bytes((repo / NEW).read_bytes(), NEW)
    model, _ = validating.validate_document(documents[0])
    assert isinstance(model, Service)
    assert [a.kind for a in model.release.evidence] == [EvidenceKind.PROVENANCE]
    assert model.create is None


def test_the_new_fields_are_optional_and_default_to_nothing(repo: Path) -> None:
    # Every existing example is still valid and reads as no version, no evidence, no create
    # -- but ledger, the reference repo's new service, which uses all three.
    for document in _documents(repo):
        model, problems = validating.validate_document(document)
        assert not problems
        if isinstance(model, Service) and model.name == "ledger":
            assert model.release.version == "1.0.0" and len(model.release.evidence) == 5
            assert model.create is not None and model.create.namespace == "ledger"
        elif isinstance(model, Service):
            assert model.release.version is None
            assert model.release.evidence == ()
            assert model.create is None


def test_several_bad_attestations_each_get_a_line(repo: Path,
                                                   validate: Callable[..., Run]) -> None:
    text = ledger("verifiedAt: 1780000000000", "verifiedAt: 0")
    text = text.replace("kind: signature\n      statementDigest: sha256:30bf",
                        "kind: signature\n      statementDigest: sha256:30BF")
    write(NEW, text)(repo)
    run = validate(str(repo))
    assert run.code == 1
    assert f"{NEW}:22:19: release.evidence[0].verifiedAt: " in run.out
    assert f"{NEW}:29:24: release.evidence[2].statementDigest: " in run.out


def test_every_attestation_bound_to_another_digest_is_reported(
        repo: Path, validate: Callable[..., Run]) -> None:
    """Issue 18: five entries pasted from another release are five problems, each at its
    own line -- not the first one only. A kind listed twice is said beside them."""
    text = LEDGER.replace(f"subjectDigest: {DIGEST}", f"subjectDigest: {OTHER}")
    text = text.replace("kind: sbom\n", "kind: provenance\n")
    write(NEW, text)(repo)
    run = validate(str(repo))
    assert run.code == 1
    bound = [line for line in run.out.splitlines()
             if "subjectDigest: " in line and f"is bound to {OTHER}" in line]
    assert len(bound) == 5, run.out
    assert [f"release.evidence[{i}].subjectDigest" in line for i, line in enumerate(bound)] \
        == [True] * 5
    assert f"{NEW}:20:" in bound[0]
    assert any("release.evidence[1].kind" in line and "listed twice" in line
               for line in run.out.splitlines()), run.out
