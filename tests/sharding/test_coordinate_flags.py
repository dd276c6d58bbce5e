"""watch --coordinate's flags, environment and settings: precedence and usage errors."""

from __future__ import annotations

import argparse

import pytest

from reconciler.commands import coordinate
from reconciler.core.desired import Coordination
from reconciler.shell.coordination import parse_target


def args(**given: object) -> argparse.Namespace:
    base = {"coordinate": None, "shards": None, "lease_seconds": None,
            "renew_deadline": None, "retry_period": None}
    return argparse.Namespace(**{**base, **given})


class FakeSettings:
    def __init__(self, block: Coordination | None) -> None:
        self.coordination = block


def test_no_coordination_anywhere_is_plain_watching() -> None:
    assert coordinate.resolve(args(), {}, None) is None


def test_flag_beats_env_beats_settings_and_defaults_are_flux_like() -> None:
    block = Coordination.model_validate({"etcd": "etcd://s:1/g", "shards": 8,
                                         "leaseSeconds": 20, "renewDeadlineSeconds": 15,
                                         "retrySeconds": 3})
    got = coordinate.resolve(args(), {}, FakeSettings(block))  # type: ignore[arg-type]
    assert isinstance(got, coordinate.Coordinate)
    assert (got.target, got.shards, got.timing.ttl, got.timing.renew_deadline,
            got.timing.retry) == ("etcd://s:1/g", 8, 20, 15.0, 3.0)
    got = coordinate.resolve(args(shards=4), {"RECONCILE_COORDINATE": "etcd://e:2",
                                              "RECONCILE_SHARDS": "32"},
                             FakeSettings(block))  # type: ignore[arg-type]
    assert isinstance(got, coordinate.Coordinate)
    assert (got.target, got.shards) == ("etcd://e:2", 4)
    plain = coordinate.resolve(args(coordinate="etcd://h:3"), {}, None)
    assert isinstance(plain, coordinate.Coordinate)
    assert (plain.shards, plain.timing.ttl, plain.timing.renew_deadline,
            plain.timing.retry) == (16, 35, 30.0, 5.0)


@pytest.mark.parametrize(("given", "env", "said"), [
    ({"coordinate": "http://h:1"}, {}, "starts with etcd://"),
    ({"coordinate": "etcd://h"}, {}, "is not HOST:PORT"),
    ({"coordinate": "etcd://h:1/bad group"}, {}, "the group"),
    ({"coordinate": "etcd://h:1", "shards": 0}, {}, "--shards must be between 1 and"),
    ({"coordinate": "etcd://h:1"}, {"RECONCILE_SHARDS": "many"}, "a whole number"),
    ({"shards": 4}, {}, "need --coordinate"),
    ({"coordinate": "etcd://h:1", "renew_deadline": 40.0}, {}, "retry < renew deadline"),
])
def test_usage_errors_say_what_is_wrong(given: dict[str, object], env: dict[str, str],
                                        said: str) -> None:
    got = coordinate.resolve(args(**given), env, None)
    assert isinstance(got, str) and said in got, got


def test_targets_list_endpoints_in_order_and_an_optional_group() -> None:
    t = parse_target("etcd://10.0.0.5:2379,[::1]:2380/shop-prod")
    assert t.endpoints == (("10.0.0.5", 2379), ("::1", 2380)) and t.group == "shop-prod"
    assert parse_target("etcd://h:1").group is None


@pytest.mark.integration  # starts a process of its own
def test_the_cli_refuses_a_bad_coordination_address_with_64(tmp_path: object) -> None:
    import subprocess
    import sys

    from tests.e2e_repo import PROJECT

    proc = subprocess.run([sys.executable, "-m", "reconciler", "watch", str(PROJECT /
                           "examples" / "desired-state"), "--coordinate", "etcd://nohost"],
                          cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 64, proc.stderr
    assert "is not HOST:PORT" in proc.stderr and "Traceback" not in proc.stderr
