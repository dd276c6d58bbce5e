"""Two new services proposing one namespace: a repo-wide rule (``core.crosscheck``).

The control plane would only refuse the second creation (``NAMESPACE_COLLISION``) after
the first was made; the repo can say it before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.validation.conftest import Run
from tests.validation.test_corpus import write
from tests.validation.test_greenfield_fields import LEDGER, NEW

TWIN = "services/ledger-two.yaml"


def test_two_services_proposing_one_namespace_are_both_named(
        repo: Path, validate: Callable[..., Run]) -> None:
    write(NEW, LEDGER)(repo)
    twin = (LEDGER.replace("name: ledger", "name: ledger-two")
            .replace("serviceId: svc-ledger", "serviceId: svc-ledger-two")
            .replace("appId: ledger", "appId: ledger-two"))
    assert "namespace: ledger\n" in twin
    write(TWIN, twin)(repo)
    run = validate(str(repo))
    assert run.code == 1, run.out + run.err
    said = " create.namespace: proposed namespace 'ledger'"
    clashes = [line for line in run.lines if said in line]
    assert len(clashes) == 2, run.out
    assert any(line.startswith(f"{NEW}:") and f"also declared at {TWIN}:" in line
               for line in clashes), run.out
    assert any(line.startswith(f"{TWIN}:") and f"also declared at {NEW}:" in line
               for line in clashes), run.out


def test_distinct_namespaces_are_fine(repo: Path, validate: Callable[..., Run]) -> None:
    write(NEW, LEDGER)(repo)
    twin = (LEDGER.replace("name: ledger", "name: ledger-two")
            .replace("serviceId: svc-ledger", "serviceId: svc-ledger-two")
            .replace("appId: ledger", "appId: ledger-two")
            .replace("namespace: ledger\n", "namespace: ledger-two\n"))
    write(TWIN, twin)(repo)
    run = validate(str(repo))
    assert run.code == 0, run.out + run.err
