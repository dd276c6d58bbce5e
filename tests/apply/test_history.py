"""`reconcile history`: past applies read back from the journal, newest first, bounded;
a corrupt journal named with its path and line, never skipped.

Most cases write journals through the Journal API (run records, intents, results); one
end-to-end case runs refused (a down cluster), converged and failed (a stuck cluster)
applies against the sandbox and reads them back (the engine's ``Reconciler.apply``
writes the run records).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.commands import history as history_cmd
from reconciler.core.evidence import Proof
from reconciler.core.outcomes import ApplyReport, ChangeResult, GateReport, Outcome
from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Plan
from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from reconciler.shell import journal as journal_mod
from reconciler.shell.journal import Journal, JournalError, history
from tests.e2e_repo import PROJECT, Repo
from tests.plan import builders as b

COMMIT_A, COMMIT_B = "a" * 40, "b" * 40


def go_plan(commit: str = COMMIT_A) -> Plan:
    return plan(b.reference_desired(), b.reference_live(), Provenance(commit=commit))


def no_go_plan(commit: str = COMMIT_A) -> Plan:
    return plan(b.reference_desired(), b.sn2_down_live(), Provenance(commit=commit))


def report(p: Plan, *, converged: bool | None, outcome: Outcome = Outcome.APPLIED,
           ) -> ApplyReport:
    results = tuple(ChangeResult(change=c, outcome=outcome, detail="ok") for c in p.changes)
    if converged is None:
        return ApplyReport(results=results)
    proofs = tuple(pr.model_copy(update={"proof": Proof.CONVERGED, "clusters": ()})
                   if converged else pr for pr in p.proofs if pr.proof is not Proof.CONVERGED)
    return ApplyReport(results=results,
                       gate=GateReport(attempts=3, waited_seconds=1.5, proofs=proofs))


def cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = history_cmd.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_runs_read_back_newest_first_with_commit_fingerprint_outcomes_gate_duration(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    first = go_plan(COMMIT_A)
    run = journal.run_started(first)
    for change in first.changes:
        journal.intent(change)
        journal.result(change, "applied", "ok")
    journal.run_finished(run, report(first, converged=True))
    second = go_plan(COMMIT_B)
    run = journal.run_started(second)
    journal.run_finished(run, report(second, converged=False))
    journal.run_started(no_go_plan(COMMIT_B))

    runs = history(path)
    assert [r.status for r in runs] == ["refused", "not_converged", "converged"]
    refused, failed, converged = (r.to_json() for r in runs)
    assert converged["commit"] == COMMIT_A and failed["commit"] == COMMIT_B
    assert converged["plan_fingerprint"] == first.fingerprint
    assert converged["duration_seconds"] is not None and converged["duration_seconds"] >= 0
    assert converged["gate"]["converged"] is True
    assert {c["outcome"] for c in converged["changes"]} == {"applied"}
    assert {c["key"] for c in converged["changes"]} == {c.idempotency_key
                                                        for c in first.changes}
    assert failed["gate"]["converged"] is False and failed["gate"]["pending"]
    assert refused["blockers"] and all(c["outcome"] == "not_sent"
                                       for c in refused["changes"])
    assert any(bl["code"] == "cluster_unreachable" for bl in refused["blockers"])


def test_the_text_view_is_bounded_and_names_the_journal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    p = go_plan()
    for _ in range(5):
        run = journal.run_started(p)
        journal.run_finished(run, report(p, converged=True))
    code, out, _ = cli("--journal", str(path), "--limit", "2", capsys=capsys)
    assert code == Exit.OK
    assert out.startswith(f"{path}: 2 of 5 apply run(s), newest first")
    assert out.count("converged  commit aaaaaaaaaaaa") == 2
    assert "3 older run(s)" in out
    digest = history(path)[0].plan_digest
    assert digest is not None and digest.startswith("sha256:")
    assert f"plan {digest[:19]} ({len(p.changes)} changes)  → {p.control_plane_url}" in out
    assert "gate: converged after 3 poll(s), 1.5s" in out


def test_json_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    p = go_plan()
    run = journal.run_started(p, saved_plan=True)
    journal.run_finished(run, report(p, converged=None, outcome=Outcome.FAILED))
    code, out, _ = cli("--journal", str(path), "--format", "json", capsys=capsys)
    assert code == Exit.OK
    doc = json.loads(out)
    assert doc["format_version"] == 1 and doc["total"] == doc["shown"] == 1
    only = doc["runs"][0]
    assert only["status"] == "failed" and only["saved_plan"] is True
    assert {c["outcome"] for c in only["changes"]} == {"failed"}


def test_an_interrupted_run_shows_what_was_sent(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    p = go_plan()
    journal.run_started(p)
    journal.intent(p.changes[0])
    journal.result(p.changes[0], "applied")
    journal.intent(p.changes[1])
    [run] = history(path)
    assert run.status == "interrupted"
    outcomes = {c["key"]: c["outcome"] for c in run.to_json()["changes"]}
    assert outcomes == {p.changes[0].idempotency_key: "applied",
                        p.changes[1].idempotency_key: "in_doubt"}


def test_a_journal_from_before_run_records_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    p = go_plan()
    for change in p.changes:
        journal.intent(change)
        journal.result(change, "applied")
    [run] = history(path)
    assert run.status == "legacy"
    assert {c["outcome"] for c in run.to_json()["changes"]} == {"applied"}
    # And the run records do not disturb what apply reads back.
    journal.run_started(p)
    assert Journal.open(path).sent == {c.idempotency_key for c in p.changes}


def test_run_records_are_skipped_by_a_reader_that_knows_only_intents_and_results(
        tmp_path: Path) -> None:
    """Every run record carries the fields an older reader requires (v, key, event, sum)."""
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    p = go_plan()
    run = journal.run_started(p)
    journal.run_finished(run, report(p, converged=True))
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        summed = entry.pop("sum")
        assert summed == journal_mod._checksum(entry)
        assert entry["v"] == journal_mod.VERSION and isinstance(entry["key"], str)
        assert entry["event"] in ("run_started", "run_finished")


def test_a_corrupt_journal_is_named_with_path_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    p = go_plan()
    run = journal.run_started(p)
    journal.run_finished(run, report(p, converged=True))
    lines = path.read_text().splitlines()
    lines.insert(1, lines[1].replace('"writes_ok": true', '"writes_ok": false'))
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(JournalError, match=rf"^{path}:2: the apply journal is corrupt"):
        history(path)
    code, out, err = cli("--journal", str(path), capsys=capsys)
    assert code == Exit.ERROR and not out
    assert f"{path}:2:" in err
    # A torn tail does not hide the damage above it.
    path.write_text(path.read_text() + '{"torn')
    code, _, err = cli("--journal", str(path), capsys=capsys)
    assert code == Exit.ERROR and f"{path}:2:" in err


def test_no_journal_yet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli("--journal", str(tmp_path / "journal.jsonl"), capsys=capsys)
    assert code == Exit.OK and "no applies recorded" in out


def test_the_journal_is_found_as_apply_finds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    Journal.open(state / "journal.jsonl").run_started(go_plan())
    monkeypatch.setenv("RECONCILE_STATE_DIR", str(state))
    code, out, _ = cli(str(tmp_path), capsys=capsys)
    assert code == Exit.OK and out.startswith(f"{state / 'journal.jsonl'}: 1 of 1")


# -- end to end: needs the engine wiring ------------------------------------------------

def _history(repo: Repo) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from reconciler.commands.history import main; "
         "sys.exit(main(sys.argv[1:]))", str(repo.path), "--format", "json"],
        cwd=PROJECT, env=repo.env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout))


@pytest.mark.integration  # starts a process of its own
@pytest.mark.integration
def test_history_after_a_refused_a_converged_and_a_failed_apply(
        repo_factory: Callable[..., Repo], sandbox: Sandbox) -> None:
    repo = repo_factory(sandbox, attempts=4)
    sandbox.fault("sn2", "down")
    refused = repo.run("apply", str(repo.path), "--auto-approve")
    assert refused.code == Exit.REFUSED_EVIDENCE, refused.out + refused.err
    sandbox.clear_faults()
    converged = repo.run("apply", str(repo.path), "--auto-approve")
    assert converged.code == Exit.OK, converged.out + converged.err
    first = git_head(repo)
    # Back to v2.3.0, with sn1 stuck on v2.4.0: the gate must fail.
    checkout = repo.path / "services" / "checkout.yaml"
    checkout.write_text(checkout.read_text()
                        .replace(b.digest("checkout", "v2.4.0"), b.digest("checkout", "v2.3.0"))
                        .replace("tag: v2.4.0", "tag: v2.3.0"))
    repo.commit("checkout back to v2.3.0")
    sandbox.fault("sn1", "stuck")
    failed = repo.run("apply", str(repo.path), "--auto-approve")
    assert failed.code == Exit.NOT_CONVERGED, failed.out + failed.err

    doc = _history(repo)
    runs = doc["runs"]
    assert [r["status"] for r in runs] == ["not_converged", "converged", "refused"], runs
    stuck, last, down = runs
    assert down["commit"] == last["commit"] == first and stuck["commit"] == git_head(repo)
    assert all(r["plan_fingerprint"] for r in runs)
    assert last["gate"]["converged"] is True and last["duration_seconds"] > 0
    # 5 writes, the creation of ledger (issue 12) and the two routes of the example (issue 21)
    assert len(last["changes"]) == 8
    assert {c["outcome"] for c in last["changes"]} == {"applied"}
    assert stuck["gate"]["converged"] is False
    assert any("sn1" in reason for p in stuck["gate"]["pending"] for reason in p["reasons"])
    assert [c["service"] for c in stuck["changes"]] == ["checkout"]
    assert any("sn2" in bl["message"] for bl in down["blockers"])
    assert {c["outcome"] for c in down["changes"]} == {"not_sent"}

    text = subprocess.run(
        [sys.executable, "-c", "import sys; from reconciler.commands.history import main; "
         "sys.exit(main(sys.argv[1:]))", str(repo.path), "--limit", "2"],
        cwd=PROJECT, env=repo.env(), capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "2 of 3 apply run(s)" in text.stdout and "NOT converged" in text.stdout


def git_head(repo: Repo) -> str:
    return subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_plan_digest_tells_apart_what_the_fingerprint_cannot(tmp_path: Path) -> None:
    """A no-op apply, a NO-GO refusal and a promotion at another commit, all over the same
    live side (so the same fingerprint of its preconditions): three plan digests, each
    with its change count and the control plane it ran against."""
    path = tmp_path / "journal.jsonl"
    journal = Journal.open(path)
    promotion = go_plan(COMMIT_A)
    elsewhere = go_plan(COMMIT_B)
    noop = promotion.model_copy(update={"changes": ()})
    refusal = no_go_plan(COMMIT_A).model_copy(update={"fingerprint": promotion.fingerprint})
    for p in (promotion, elsewhere, noop, refusal):
        journal.run_started(p)
    runs = [r.to_json() for r in reversed(history(path))]
    assert len({r["plan_fingerprint"] for r in runs}) == 1
    assert len({r["plan_digest"] for r in runs}) == 4
    assert [r["change_count"] for r in runs] == [len(promotion.changes),
                                                 len(elsewhere.changes), 0,
                                                 len(refusal.changes)]
    assert {r["control_plane_url"] for r in runs} == {promotion.control_plane_url}
    # Read again: the digest comes from the record, so it is stable.
    assert [r.to_json()["plan_digest"] for r in reversed(history(path))] == \
        [r["plan_digest"] for r in runs]
