"""``reconcile validate`` end to end: exit codes, output formats, and the model it builds."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from reconciler.shell.validating import load_repo
from tests.validation.conftest import EXAMPLES, Run


def test_the_reference_repo_is_valid(validate: Callable[..., Run]) -> None:
    run = validate(str(EXAMPLES))
    assert run.code == 0
    assert run.out.strip() == "valid: 5 services, 2 grants, 2 routes, 1 settings in 8 files"
    assert run.err == ""


def test_load_repo_fills_the_model_and_sources() -> None:
    result = load_repo(EXAMPLES)
    assert result.valid and result.state is not None
    state = result.state
    assert sorted(s.name for s in state.services) == ["catalog", "checkout", "ledger",
                                                      "notifications", "search"]
    assert state.sources["Service/checkout"].path == "services/checkout.yaml"
    assert state.sources["Service/checkout"].line == 3
    assert state.sources["Settings"].path == "settings.yaml"
    assert state.sources["Grant/release-train"].line == 19  # after ledger's grant
    assert result.files == ("grants/deploy-bot.yaml", "routes/shop.yaml",
                            "services/catalog.yaml",
                            "services/checkout.yaml", "services/ledger.yaml",
                            "services/notifications.yaml",
                            "services/search.yaml", "settings.yaml")


def test_egress_omitted_and_empty_are_distinct() -> None:
    state = load_repo(EXAMPLES).state
    assert state is not None
    catalog, search = state.service_by_name("catalog"), state.service_by_name("search")
    checkout = state.service_by_name("checkout")
    assert catalog is not None and catalog.egress is None  # leave live egress alone
    assert search is not None and search.egress == ()  # revoke all
    assert checkout is not None and checkout.egress is not None
    assert [(d.host, d.port) for d in checkout.egress] == [("api.stripe.com", 443),
                                                           ("hooks.slack.com", 443)]


def test_no_and_on_are_strings_in_a_valid_document(repo: Path,
                                                   validate: Callable[..., Run]) -> None:
    settings = repo / "settings.yaml"
    settings.write_text(settings.read_text().replace("walletAddress: rReconcileDeployBot",
                                                     "walletAddress: no"))
    assert validate(str(repo)).code == 0
    state = load_repo(repo).state
    assert state is not None and state.settings.mesh.signer.wallet_address == "no"


def test_every_problem_is_reported_sorted(repo: Path, validate: Callable[..., Run]) -> None:
    (repo / "services" / "b.yaml").write_text("a: [\n")
    (repo / "services" / "a.yaml").write_text("kind: Nope\n")
    checkout = repo / "services" / "checkout.yaml"
    checkout.write_text(checkout.read_text().replace("port: 443", "port: 0"))
    run = validate(str(repo))
    assert run.code == 1
    assert len(run.lines) == 4
    assert run.lines == sorted(run.lines)
    assert run.lines[0].startswith("services/a.yaml:1:1: apiVersion: ")
    assert run.lines[1].startswith("services/a.yaml:1:7: kind: unknown kind 'Nope'")
    assert run.lines[2].startswith("services/b.yaml:")
    assert run.lines[3].startswith("services/checkout.yaml:17:11: egress[1].port: ")
    assert run.err.strip() == "invalid: 4 problems in 10 files"


def test_json_format(repo: Path, validate: Callable[..., Run]) -> None:
    ok = json.loads(validate(str(repo), "--format", "json").out)
    assert ok["format_version"] == "1.0" and ok["valid"] is True and ok["diagnostics"] == []
    (repo / "services" / "x.yaml").write_text("apiVersion: reconcile/v1\nkind: Service\n")
    run = validate(str(repo), "--format", "json")
    assert run.code == 1
    bad = json.loads(run.out)
    assert bad["valid"] is False
    first = bad["diagnostics"][0]
    assert {k: first[k] for k in ("path", "line", "column", "field")} == {
        "path": "services/x.yaml", "line": 1, "column": 1, "field": "appId"}
    assert "required key `appId` is missing" in first["message"]
    assert {d["field"] for d in bad["diagnostics"]} == {"appId", "name", "serviceId", "release"}


def test_control_characters_are_escaped_in_output(repo: Path,
                                                  validate: Callable[..., Run]) -> None:
    (repo / "services" / "x.yaml").write_text(
        'apiVersion: reconcile/v1\nkind: "Serv\\x1b[31mice"\n')
    run = validate(str(repo))
    assert run.code == 1
    assert "\x1b" not in run.out and "\\x1b[31m" in run.out


def test_a_path_that_does_not_exist(tmp_path: Path, validate: Callable[..., Run]) -> None:
    run = validate(str(tmp_path / "nope"))
    assert run.code == 1
    assert "does not exist" in run.out
    assert "Traceback" not in run.out + run.err


def test_a_file_is_validated_within_its_desired_state(validate: Callable[..., Run]) -> None:
    run = validate(str(EXAMPLES / "settings.yaml"))
    assert run.code == 0 and "checked within the desired state" in run.out, run.out


def test_an_unreadable_file_is_a_diagnostic_not_a_traceback(
        repo: Path, validate: Callable[..., Run]) -> None:
    os.mkfifo(repo / "services" / "pipe.yaml")
    run = validate(str(repo))
    assert run.code == 1
    assert run.lines == ["services/pipe.yaml:1:1: is not a regular file"]


def test_usage_errors_exit_64(validate: Callable[..., Run]) -> None:
    run = validate(".", "--format", "xml")
    assert run.code == 64


def test_the_summary_names_verifications_and_holds_where_the_repo_has_them(
        validate: Callable[..., Run], tmp_path: Path) -> None:
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    (repo / "verify.yaml").write_text(
        "apiVersion: reconcile/v1\nkind: Verification\nname: checkout-works\n"
        "scope:\n  services: [checkout]\nchecks:\n  - name: answers\n    http:\n"
        "      path: /healthz\n      status: 200\n")
    (repo / "holds.yaml").write_text(
        "apiVersion: reconcile/v1\nkind: Hold\nservice: checkout\n"
        f"digest: sha256:{'a' * 64}\nreason: failed\nsince: \"2026-01-01T00:00:00Z\"\n")
    run = validate(str(repo))
    assert run.code == 0, run.out + run.err
    assert run.out.strip() == ("valid: 5 services, 2 grants, 2 routes, 1 verification, "
                               "1 hold, 1 settings in 10 files")
    counted = json.loads(validate(str(repo), "--format", "json").out)["counts"]
    assert (counted["verifications"], counted["holds"]) == (1, 1)
