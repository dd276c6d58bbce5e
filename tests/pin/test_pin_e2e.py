"""``reconcile pin`` against the real sandbox (control plane and clusters as processes,
real HTTP and TLS): a pushed tag is pinned in place with every other byte kept, the plan
for the service follows; refusals exit with their own code and write nothing; ``--check``
exits 20 while a pin lags and 0 once it is current."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from reconciler.exitcodes import Exit
from reconciler.sandbox import rollouts, seeding
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import Repo

CHECKOUT = Path("services") / "checkout.yaml"
V240 = rollouts.seeded_digest("checkout", "v2.4.0")  # what the example pins


def changed_lines(before: bytes, after: bytes) -> list[tuple[bytes, bytes]]:
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]


def pin(repo: Repo, *args: str) -> tuple[int, str, str]:
    result = repo.run("pin", *args, "-C", str(repo.path))
    return result.code, result.out, result.err


def test_a_pushed_tag_is_pinned_in_place_and_the_plan_promotes_it(repo: Repo) -> None:
    path = repo.path / CHECKOUT
    before = path.read_bytes()
    path.chmod(0o640)
    pushed = repo.sandbox.push("checkout", "v2.5.0")

    code, out, err = pin(repo, "checkout", "v2.5.0")

    assert code == Exit.OK, err
    after = path.read_bytes()
    assert changed_lines(before, after) == [
        (f"  digest: {V240}\n".encode(), f"  digest: {pushed}\n".encode()),
        (b"  tag: v2.4.0\n", b"  tag: v2.5.0\n"),
    ]
    assert oct(path.stat().st_mode & 0o777) == oct(0o640)
    # The diff, then the plan for that service over the working tree.
    assert f"-  digest: {V240}" in out and f"+  digest: {pushed}" in out
    assert "wrote services/checkout.yaml" in out
    assert re.search(r"promote checkout to v2\.5\.0 \(sha256:" + pushed[7:19], out), out
    assert "Plan:" in out and "→ GO" in out
    # The header comment still says v2.4.0: pointed at, not edited.
    assert "services/checkout.yaml:2: a comment mentions the previous tag" in err
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def test_without_a_tag_the_newest_release_is_pinned(repo: Repo) -> None:
    repo.sandbox.push("checkout", "v2.5.0")
    newest = repo.sandbox.push("checkout", "v2.6.0")
    code, out, err = pin(repo, "checkout", "--no-plan")
    assert code == Exit.OK, err
    text = (repo.path / CHECKOUT).read_text()
    assert f"digest: {newest}" in text and "tag: v2.6.0" in text
    assert "plan for checkout" not in out


def test_check_exits_20_while_a_pin_lags_and_0_once_pinned(repo: Repo) -> None:
    pushed = repo.sandbox.push("checkout", "v2.5.0")
    before = (repo.path / CHECKOUT).read_bytes()

    code, out, err = pin(repo, "--check", "checkout")
    assert code == Exit.PIN_LAGS, err
    assert f"checkout  lags     v2.4.0 {V240} → v2.5.0 {pushed}" in out
    assert (repo.path / CHECKOUT).read_bytes() == before  # --check writes nothing

    # Every service: catalog pins v5.0.1 (a deliberate rollback) and lags v5.1.0 too.
    code, out, _ = pin(repo, "--check")
    assert code == Exit.PIN_LAGS
    assert re.search(r"^catalog +lags ", out, re.M) and re.search(r"^search +current ", out,
                                                                 re.M)

    assert pin(repo, "checkout", "--no-plan")[0] == Exit.OK
    code, out, err = pin(repo, "--check", "checkout")
    assert code == Exit.OK, out + err
    assert f"checkout  current  v2.5.0 {pushed}" in out
    assert pin(repo, "catalog", "--no-plan")[0] == Exit.OK
    code, out, err = pin(repo, "--check")
    assert code == Exit.OK, out + err
    # ledger, the reference repo's new service, is not on the control plane yet: absent,
    # nothing to compare with, and never called current.
    assert re.search(r"^ledger\s+absent\s", out, re.M), out
    assert "4 of 5 pin(s) current; not compared: 1 not on the control plane" in err


def test_an_unreachable_control_plane_is_a_clear_error_and_nothing_is_written(
        repo: Repo) -> None:
    before = (repo.path / CHECKOUT).read_bytes()
    code, out, err = pin(repo, "checkout", "v2.4.0", "--control-plane", "https://127.0.0.1:9")
    assert code == Exit.ERROR
    assert re.search(r"^error: control plane https://127\.0\.0\.1:9: .*unreachable.*; is it "
                     r"running\?.*; nothing written$", err, re.M), err
    assert "Traceback" not in err and out == ""
    assert (repo.path / CHECKOUT).read_bytes() == before
    code, _, err = pin(repo, "--check", "--control-plane", "https://127.0.0.1:9")
    assert code == Exit.ERROR and "unreachable" in err


def test_an_unobserved_tag_exits_21_listing_the_observed_tags(repo: Repo) -> None:
    before = (repo.path / CHECKOUT).read_bytes()
    code, _, err = pin(repo, "checkout", "v2.5.0")
    assert code == Exit.PIN_UNOBSERVED
    assert "tag v2.5.0 was not observed by the control plane (newest observed tags: " \
        "v2.4.0, v2.3.0)" in err
    assert (repo.path / CHECKOUT).read_bytes() == before


def test_a_moved_tag_exits_23_naming_both_digests_until_allowed(repo: Repo) -> None:
    before = (repo.path / CHECKOUT).read_bytes()
    moved = repo.sandbox.push("checkout", "v2.4.0")  # the registry moves the tag
    assert moved != V240

    code, _, err = pin(repo, "checkout", "v2.4.0")
    assert code == Exit.PIN_MOVED
    assert V240 in err and moved in err and "--allow-moved" in err
    assert (repo.path / CHECKOUT).read_bytes() == before
    assert pin(repo, "checkout")[0] == Exit.PIN_MOVED  # the newest is that same tag
    code, out, _ = pin(repo, "--check", "checkout")
    assert code == Exit.PIN_LAGS and "(its tag v2.4.0 moved)" in out

    code, out, err = pin(repo, "checkout", "v2.4.0", "--allow-moved", "--no-plan")
    assert code == Exit.OK, err
    assert f"tag v2.4.0 moved from {V240} to {moved}" in err
    assert changed_lines(before, (repo.path / CHECKOUT).read_bytes()) == [
        (f"  digest: {V240}\n".encode(), f"  digest: {moved}\n".encode())]


def test_an_ambiguous_tag_exits_22_and_writes_nothing(repo: Repo, sandbox: Sandbox) -> None:
    seed = copy.deepcopy(seeding.DEFAULT_SEED)
    checkout = next(s for s in seed["services"] if s["name"] == "checkout")
    rebuilt = rollouts.seeded_digest("checkout", "v2.4.0-rebuilt")
    checkout["releases"] = [*checkout["releases"],
                            {"tag": "v2.4.0", "digest": rebuilt, "id": "rel-checkout-rebuilt"}]
    sandbox.seed(seed)
    before = (repo.path / CHECKOUT).read_bytes()
    code, _, err = pin(repo, "checkout", "v2.4.0")
    assert code == Exit.PIN_AMBIGUOUS, err
    assert V240 in err and rebuilt in err
    assert (repo.path / CHECKOUT).read_bytes() == before


def test_dry_run_shows_the_diff_and_the_plan_and_writes_nothing(repo: Repo) -> None:
    before = (repo.path / CHECKOUT).read_bytes()
    pushed = repo.sandbox.push("checkout", "v2.5.0")
    code, out, err = pin(repo, "checkout", "v2.5.0", "--dry-run")
    assert code == Exit.OK, err
    assert f"+  digest: {pushed}" in out and "dry run: services/checkout.yaml not written" in out
    assert "promote checkout to v2.5.0" in out
    assert (repo.path / CHECKOUT).read_bytes() == before


def test_pinning_what_is_already_pinned_changes_nothing(repo: Repo) -> None:
    before = (repo.path / CHECKOUT).read_bytes()
    code, out, err = pin(repo, "checkout", "v2.4.0", "--no-plan")
    assert code == Exit.OK, err
    assert f"checkout: already pins v2.4.0 {V240}" in out
    assert (repo.path / CHECKOUT).read_bytes() == before


def test_version_follows_and_stale_evidence_is_reported_after_the_write(repo: Repo) -> None:
    path = repo.path / CHECKOUT
    source = path.read_text()
    evidence = (f"  version: 2.4.0\n  evidence:\n    - kind: provenance\n"
                f"      statementDigest: sha256:{'1' * 64}\n      subjectDigest: {V240}\n"
                "      verifier: sandbox-verifier\n      verifiedAt: 1780000000000\n")
    path.write_text(source.replace("  mediaType:", evidence + "  mediaType:"))
    pushed = repo.sandbox.push("checkout", "v2.5.0")

    code, _, err = pin(repo, "checkout", "v2.5.0")

    assert code == Exit.ERROR
    text = path.read_text()
    assert f"  digest: {pushed}\n" in text and "  version: 2.5.0\n" in text
    assert f"subjectDigest: {V240}" in text  # evidence is never rewritten by pin
    assert re.search(r"services/checkout\.yaml:\d+:\d+: release\.evidence\[0\]\.subjectDigest",
                     err), err
    assert "is now invalid with this pin" in err


def test_a_service_the_control_plane_does_not_have_is_refused_and_absent_in_check(
        repo: Repo) -> None:
    ledger = Path(__file__).resolve().parents[1] / "validation" / "fixtures" / "ledger.yaml"
    (repo.path / "services" / "ledger.yaml").write_bytes(ledger.read_bytes())
    code, _, err = pin(repo, "ledger", "v1.0.0")
    assert code == Exit.ERROR
    assert "the control plane has no service svc-ledger" in err
    code, out, _ = pin(repo, "--check", "ledger")
    assert code == Exit.OK
    assert re.search(r"^ledger +absent +the control plane has no service svc-ledger", out, re.M)


def test_usage_errors(repo: Repo) -> None:
    assert pin(repo)[0] == Exit.USAGE
    assert pin(repo, "--check", "checkout", "v2.5.0")[0] == Exit.USAGE
    code, _, err = pin(repo, "chekout", "v2.5.0")
    assert code == Exit.USAGE and "no service named chekout" in err and "checkout" in err
