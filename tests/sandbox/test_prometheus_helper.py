"""``tests/prometheus.py`` itself: a missing Prometheus fails with how to install it, and
the scrape configuration names every cluster (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.prometheus as helper
from reconciler.sandbox.launcher import Sandbox


def fake_sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(state_dir=tmp_path, control_plane_url="https://127.0.0.1:1",
                   gateway="gateway.sandbox.test", mesh_port=18444,
                   addresses={"sn1": "127.0.0.2", "sn2": "127.0.0.3"},
                   ca_file=tmp_path / "ca.pem", token="t", token_file=tmp_path / "token",
                   signer_key_file=tmp_path / "signer.pem")


def test_a_missing_prometheus_fails_saying_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helper, "PROMETHEUS_BINARY", tmp_path / "no-prometheus")
    with pytest.raises(pytest.fail.Exception, match=r"run `make system-deps` \(Debian's "
                       r"prometheus package\)"):
        helper.start_prometheus(fake_sandbox(tmp_path), tmp_path / "prom")


def test_the_scrape_configuration_labels_each_cluster(tmp_path: Path) -> None:
    sb = fake_sandbox(tmp_path)
    [job] = helper.scrape_config(sb)["scrape_configs"]
    assert job["scheme"] == "https"
    assert job["tls_config"] == {"ca_file": str(sb.ca_file), "server_name": sb.gateway}
    assert job["authorization"]["credentials_file"] == str(tmp_path / "metrics-token")
    assert job["static_configs"] == [
        {"targets": ["127.0.0.2:18444"], "labels": {"cluster": "sn1"}},
        {"targets": ["127.0.0.3:18444"], "labels": {"cluster": "sn2"}}]
