"""Every option that takes a time span takes the same DURATION (``commands.durations``):
``watch --resync 20s`` as ``apply --timeout 4h`` does, a plain number still seconds."""

from __future__ import annotations

import pytest

from reconciler import cli


@pytest.mark.parametrize(("given", "seconds"), [("20s", 20.0), ("4h", 14400.0),
                                                ("1m30s", 90.0), ("20", 20.0)])
def test_watch_resync_takes_a_duration(given: str, seconds: float) -> None:
    args = cli.build_parser().parse_args(["watch", "--resync", given])
    assert args.resync == seconds
    shown = cli.build_parser().parse_args(["watch-status", "--shards", "--resync", given])
    assert shown.resync == seconds


@pytest.mark.parametrize("given", ["0", "-5s", "soon", "20x"])
def test_a_resync_that_is_no_duration_is_a_usage_error(given: str) -> None:
    with pytest.raises(cli.UsageError, match="invalid duration"):
        cli.build_parser().parse_args(["watch", f"--resync={given}"])
