"""``make demo-environments`` end to end (two real sandboxes, on free ports): a release
goes to staging, is refused for prod while it soaks -- by ``promote`` and by prod's own
plan of a pin made early, both naming the same eligible time -- then is promoted and
proven on every prod cluster."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from reconciler import demo_environments

pytestmark = pytest.mark.integration

ELIGIBLE = re.compile(r"not_soaked\b.*proven on staging \d+s of 60s\b.*?; eligible "
                      r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ)")


def steps(out: str) -> dict[str, str]:
    """Each step's output, by the command typed (``$ reconcile ...   # why``)."""
    found: dict[str, str] = {}
    for part in out.split("\n$ ")[1:]:
        head, _, body = part.partition("\n")
        found[head.split("   #", 1)[0]] = body
    return found


def test_the_demo_refuses_prod_while_staging_soaks_then_promotes_and_proves_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo_environments, "STATE", tmp_path / "demo")
    # The example's soak (20s) with room for a loaded machine: the early pin must come
    # before the soak ends for prod's plan to hold it.
    example = tmp_path / "example"
    shutil.copytree(demo_environments.EXAMPLE, example)
    pipeline = example / "pipeline.yaml"
    text = pipeline.read_text().replace("soak: 20s", "soak: 60s")
    # The example's weekend deny window is about the calendar, not the soak: left in, this
    # test would fail from Friday 18:00 to Monday 07:00 Berlin time.
    windows = text.index("    windows:")
    pipeline.write_text(text[:windows])
    monkeypatch.setattr(demo_environments, "EXAMPLE", example)
    monkeypatch.setattr(demo_environments, "PORTS", {"staging": (0, 0), "prod": (0, 0)})
    code = demo_environments.main()
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    said = steps(out.out)
    repo = str(tmp_path / "demo" / "environments-demo")

    refused = said[f"reconcile promote checkout --to prod -C {repo}"]
    assert "✗ checkout: not promoted to prod: not_soaked:" in refused
    assert refused.rstrip().endswith("(exit 10)")
    [when] = ELIGIBLE.findall(refused)

    early = said[f"reconcile pin checkout v2.4.0 --env prod -C {repo}"]
    assert "→ NO-GO" in early
    assert ELIGIBLE.findall(early) == [when]  # prod's plan: the same rule, the same time

    status = said[f"reconcile status {repo}"]
    assert f"not_soaked; eligible {when}" in status

    promoted = said[f"reconcile promote checkout --to prod -C {repo} --commit"]
    assert "promoted checkout to prod:" in promoted and "committed " in promoted
    applied = said[f"reconcile apply {repo} --env prod --auto-approve"]
    assert "Converged: every expected cluster (sn1, sn2, sn3)" in applied
    final = said[f"reconcile status {repo} --clusters"]
    [prod] = [x for x in final.splitlines() if x.startswith("checkout  prod ")][:1]
    assert "v2.4.0" in prod and "3/3 converged" in prod
    for cluster in ("sn1", "sn2", "sn3"):
        assert re.search(rf"checkout\s+prod\s+{cluster}\s+\S+\s+(\S+)\s+yes", final), final
