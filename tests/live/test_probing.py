"""The cluster prober against an in-process fake mesh: attribution, auth, silences, bounds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.live import MeshView, Observation, ObservationKind
from reconciler.shell.endpoints import ConfigError
from reconciler.shell.probing import Prober, load_signer_key
from tests.live.fakes import (
    GATEWAY,
    PORT,
    FakeCluster,
    FakeMesh,
    connection,
    runtime,
    signer_pem,
    three_clusters,
)

KEY = signer_pem()


def probe(mesh: FakeMesh, apps: Sequence[str] = ("checkout",), *, extra: Sequence[str] = (),
          passes: int = 1, prober_kwargs: dict[str, Any] | None = None,
          **conn: Any) -> tuple[MeshView, dict[str, tuple[Observation, ...]], Prober]:
    async def go() -> tuple[MeshView, dict[str, tuple[Observation, ...]], Prober]:
        prober = Prober(connection(**conn), signer_key=KEY, transport=mesh.transport(),
                        **(prober_kwargs or {}))
        async with prober:
            result: dict[str, tuple[Observation, ...]] = {}
            for _ in range(passes):
                result = await prober.observe_apps(apps, extra_expected=extra)
            return await prober.resolve(), result, prober

    return asyncio.run(go())


def by_cluster(rows: tuple[Observation, ...]) -> dict[str, Observation]:
    return {o.cluster_id: o for o in rows}


def test_every_cluster_answers_and_each_answer_is_attributed() -> None:
    mesh = FakeMesh(three_clusters())
    view, obs, _ = probe(mesh)
    assert view.expected_clusters == ("sn1", "sn2", "sn3")
    rows = by_cluster(obs["checkout"])
    assert [rows[c].address for c in ("sn1", "sn2", "sn3")] == [
        "127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert all(o.kind is ObservationKind.ANSWERED for o in rows.values())
    runtime_ = rows["sn1"].runtime
    assert runtime_ is not None and runtime_.resolved_digest == "sha256:" + "a" * 64
    assert runtime_.replica_counts is not None and runtime_.replica_counts.verified == 2
    assert runtime_.egress is not None and runtime_.egress[0].port == 443


def test_sni_and_host_are_pinned_to_the_gateway_on_every_request() -> None:
    mesh = FakeMesh(three_clusters())
    probe(mesh)
    assert mesh.seen
    for request in mesh.seen:
        assert request.headers["Host"] == GATEWAY  # never with :port (a strict ingress: 421)
        assert request.extensions["sni_hostname"] == GATEWAY
        assert request.url.port == PORT and request.url.scheme == "https"


def test_a_404_is_no_record_not_silence() -> None:
    clusters = three_clusters()
    clusters["127.0.0.3"].status = {}
    rows = by_cluster(probe(FakeMesh(clusters))[1]["checkout"])
    assert rows["sn2"].kind is ObservationKind.NO_RECORD
    assert rows["sn1"].kind is ObservationKind.ANSWERED


def test_a_runtime_without_resolved_digest_is_not_inferred_from_the_image() -> None:
    clusters = three_clusters()
    clusters["127.0.0.2"].status = {"checkout": runtime("checkout", digest=None)}
    rows = by_cluster(probe(FakeMesh(clusters))[1]["checkout"])
    assert rows["sn1"].runtime is not None and rows["sn1"].runtime.resolved_digest is None


@pytest.mark.parametrize(("body", "reason"), [
    (b"{garbage", "malformed JSON"),
    (b'{"appId": "checkout", "runtime": "RUNNING"}', "malformed status"),
    (b'{"appId": "other", "runtime": {}}', "answered for another app"),
    (b"[1, 2]", "malformed JSON"),
])
def test_malformed_replies_are_silent_with_a_reason(body: bytes, reason: str) -> None:
    clusters = three_clusters()
    clusters["127.0.0.4"].status = {"checkout": body}
    rows = by_cluster(probe(FakeMesh(clusters))[1]["checkout"])
    assert rows["sn3"].kind is ObservationKind.SILENT
    assert rows["sn3"].reason is not None and reason in rows["sn3"].reason


def test_ansi_and_control_characters_from_a_cluster_are_neutralised() -> None:
    clusters = three_clusters()
    nasty = "\x1b[31mFAILED\x1b[0m\r\n\x07" + "x" * 5000
    clusters["127.0.0.2"].status = {"checkout": runtime(
        "checkout", lastError=nasty, runtimeState="\x1b]0;pwned\x07FAILED")}
    rows = by_cluster(probe(FakeMesh(clusters))[1]["checkout"])
    rt = rows["sn1"].runtime
    assert rt is not None and rt.last_error is not None and rt.runtime_state is not None
    for text in (rt.last_error, rt.runtime_state):
        assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in text)
    assert "\\x1b" in rt.last_error
    assert len(rt.last_error) < 400


def test_server_errors_are_silent_with_the_status() -> None:
    clusters = three_clusters()
    clusters["127.0.0.3"].status = {"checkout": 503}
    rows = by_cluster(probe(FakeMesh(clusters))[1]["checkout"])
    assert rows["sn2"].kind is ObservationKind.SILENT
    assert rows["sn2"].reason == "status read HTTP 503"


def test_a_refused_connection_is_unreachable() -> None:
    clusters = three_clusters()
    clusters["127.0.0.4"].refuse = True
    view, obs, _ = probe(FakeMesh(clusters))
    assert view.unnamed_addresses == ("127.0.0.4",)
    rows = by_cluster(obs["checkout"])
    assert rows["sn3"].kind is ObservationKind.SILENT and rows["sn3"].address is None
    assert "unreachable: connection refused" in (rows["sn3"].reason or "")
    # The unnamed address is reported by address, silent.
    assert rows["127.0.0.4"].kind is ObservationKind.SILENT
    assert "cannot be attributed" in (rows["127.0.0.4"].reason or "")


def test_an_address_whose_health_fails_is_reported_by_address_and_not_trusted() -> None:
    clusters = three_clusters()
    clusters["127.0.0.3"].health = b"<html>"
    view, obs, _ = probe(FakeMesh(clusters))
    rows = by_cluster(obs["checkout"])
    assert view.resolved[1].error == "health: malformed JSON"
    assert rows["sn2"].kind is ObservationKind.SILENT
    assert rows["127.0.0.3"].kind is ObservationKind.SILENT


def test_two_addresses_claiming_one_cluster_make_it_silent() -> None:
    clusters = three_clusters()
    clusters["127.0.0.4"].cluster_id = "sn2"
    view, obs, _ = probe(FakeMesh(clusters))
    assert view.duplicate_claims == ("sn2",)
    rows = by_cluster(obs["checkout"])
    assert rows["sn2"].kind is ObservationKind.SILENT
    assert rows["sn2"].reason is not None
    assert rows["sn2"].reason.startswith("address 127.0.0.4 answered as sn2 (claimed twice")
    assert rows["sn3"].kind is ObservationKind.SILENT  # nobody answered as sn3


def test_an_empty_dns_answer_is_a_total_gap_never_one_cluster() -> None:
    async def nothing(host: str, port: int) -> list[str]:
        return []

    for settings_clusters in (("sn1", "sn2", "sn3"), ()):
        view, obs, _ = probe(FakeMesh(three_clusters()), static_addresses=None,
                             settings_clusters=settings_clusters,
                             prober_kwargs={"resolver": nothing})
        assert view.resolve_error is not None and "answered no address" in view.resolve_error
        assert obs["checkout"], "an empty answer must still yield (silent) rows"
        assert all(o.kind is ObservationKind.SILENT for o in obs["checkout"])
        assert all("not resolved by DNS" in (o.reason or "") for o in obs["checkout"])


def test_a_dns_failure_is_a_resolve_error() -> None:
    async def broken(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    view, obs, _ = probe(FakeMesh(three_clusters()), static_addresses=None,
                         prober_kwargs={"resolver": broken})
    assert view.resolve_error == "DNS: Name or service not known"
    assert len(obs["checkout"]) == 3


def test_a_short_dns_answer_leaves_the_missing_cluster_silent() -> None:
    view, obs, _ = probe(FakeMesh(three_clusters()),
                         static_addresses=("127.0.0.2", "127.0.0.3"))
    rows = by_cluster(obs["checkout"])
    assert view.expected_clusters == ("sn1", "sn2", "sn3")
    assert rows["sn3"].kind is ObservationKind.SILENT
    assert "not resolved by DNS" in (rows["sn3"].reason or "")


def test_a_long_dns_answer_adds_the_advertised_cluster_to_the_expected_set() -> None:
    clusters = three_clusters()
    clusters["127.0.0.5"] = FakeCluster("sn4", status={"checkout": runtime("checkout")})
    view, obs, _ = probe(FakeMesh(clusters), static_addresses=(
        "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"))
    assert view.expected_clusters == ("sn1", "sn2", "sn3", "sn4")
    assert by_cluster(obs["checkout"])["sn4"].kind is ObservationKind.ANSWERED


def test_the_system_resolver_is_asked_once_per_prober() -> None:
    calls: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.2", "127.0.0.3", "127.0.0.4"]

    probe(FakeMesh(three_clusters()), passes=3, static_addresses=None,
          prober_kwargs={"resolver": resolver})
    assert calls == [GATEWAY]


def test_extra_expected_clusters_no_address_named_are_silent() -> None:
    _, obs, _ = probe(FakeMesh(three_clusters()), extra=("sn9",))
    rows = by_cluster(obs["checkout"])
    assert rows["sn9"].kind is ObservationKind.SILENT


def test_each_address_gets_its_own_token_minted_once_and_reused() -> None:
    mesh = FakeMesh(three_clusters(("a", "b", "c")))
    _, obs, _ = probe(mesh, ("a", "b", "c"), passes=2)
    assert all(o.kind is ObservationKind.ANSWERED for rows in obs.values() for o in rows)
    for cluster in mesh.clusters.values():
        assert cluster.minted == 1
        assert all(t.startswith(next(a for a, c in mesh.clusters.items() if c is cluster))
                   for t in cluster.tokens)


def test_a_reused_token_that_gets_401_is_re_minted_once() -> None:
    mesh = FakeMesh(three_clusters(("a", "b")))
    mesh.clusters["127.0.0.3"].reauth = True  # every token is good for one read only
    _, obs, _ = probe(mesh, ("a", "b"), concurrency=1)
    assert all(o.kind is ObservationKind.ANSWERED for rows in obs.values() for o in rows)
    assert mesh.clusters["127.0.0.3"].minted == 2
    assert mesh.clusters["127.0.0.2"].minted == 1


def test_a_fresh_token_that_gets_401_is_an_auth_error_not_a_loop() -> None:
    mesh = FakeMesh(three_clusters())
    sn2 = mesh.clusters["127.0.0.3"]
    original = mesh.handle

    async def reject_all(request: Any) -> Any:
        if request.url.host == "127.0.0.3" and "/deployment/" in request.url.path:
            import httpx
            return httpx.Response(401)
        return await original(request)

    mesh.handle = reject_all  # type: ignore[method-assign]
    rows = by_cluster(probe(mesh)[1]["checkout"])
    assert rows["sn2"].kind is ObservationKind.SILENT
    assert rows["sn2"].reason == "auth: status read HTTP 401 with a freshly minted token"
    assert sn2.minted == 1


def test_a_failed_handshake_is_silent_with_auth_reason_and_not_repeated_per_app() -> None:
    mesh = FakeMesh(three_clusters(("a", "b", "c")))
    mesh.clusters["127.0.0.2"].verify_status = 401
    _, obs, _ = probe(mesh, ("a", "b", "c"))
    for rows in obs.values():
        assert by_cluster(rows)["sn1"].reason == "auth: verify HTTP 401"
    challenges = [r for r in mesh.seen
                  if r.url.host == "127.0.0.2" and r.url.path.endswith("/challenge")]
    assert len(challenges) == 1


def test_a_black_holed_cluster_costs_one_timeout_and_the_pass_ends_in_time() -> None:
    clusters = three_clusters(tuple(f"app{i}" for i in range(40)))
    clusters["127.0.0.4"].blackhole = True
    started = time.monotonic()
    view, obs, _ = probe(FakeMesh(clusters), tuple(f"app{i}" for i in range(40)),
                         probe_timeout=0.3)
    assert time.monotonic() - started < 2.0
    assert view.resolved[2].error == "health: timed out after 0.3s"
    for rows in obs.values():
        assert by_cluster(rows)["sn3"].kind is ObservationKind.SILENT


def _delay_deployment_reads(mesh: FakeMesh, host: str, seconds: float) -> None:
    """The cluster at ``host`` answers its deployment reads only after ``seconds``; its
    health and identity at once (a cluster that is slow, or dark, after naming itself)."""
    original = mesh.handle

    async def delayed(request: Any) -> Any:
        if request.url.host == host and "/deployment/" in request.url.path:
            await asyncio.sleep(seconds)
        return await original(request)

    mesh.handle = delayed  # type: ignore[method-assign]


def test_a_cluster_that_goes_dark_after_naming_itself_is_cut_off_by_the_breaker() -> None:
    clusters = three_clusters(tuple(f"app{i}" for i in range(60)))
    mesh = FakeMesh(clusters)
    _delay_deployment_reads(mesh, "127.0.0.4", 3600)  # dark after naming itself
    started = time.monotonic()
    _, obs, _ = probe(mesh, tuple(f"app{i}" for i in range(60)), probe_timeout=0.3,
                      concurrency=4)
    assert time.monotonic() - started < 3.0
    reasons = {by_cluster(rows)["sn3"].reason for rows in obs.values()}
    assert "timed out after 0.3s" in reasons
    assert any(r and r.startswith("not attempted: 127.0.0.4 failed ") for r in reasons)
    dark = [r for r in mesh.seen if r.url.host == "127.0.0.4" and "/deployment/" in r.url.path]
    assert len(dark) <= 3 + 4


def test_the_pass_deadline_makes_unfinished_clusters_silent() -> None:
    clusters = three_clusters()
    clusters["127.0.0.3"].delay = 0.0
    mesh = FakeMesh(clusters)
    _delay_deployment_reads(mesh, "127.0.0.3", 0.8)
    started = time.monotonic()
    _, obs, _ = probe(mesh, probe_timeout=5.0, prober_kwargs={"deadline": 0.4})
    assert time.monotonic() - started < 1.5
    rows = by_cluster(obs["checkout"])
    assert rows["sn2"].kind is ObservationKind.SILENT
    assert "deadline of 0.4s" in (rows["sn2"].reason or "")
    assert rows["sn1"].kind is ObservationKind.ANSWERED


def test_concurrency_is_bounded() -> None:
    clusters = three_clusters(tuple(f"app{i}" for i in range(30)))
    mesh = FakeMesh(clusters)
    original = mesh.handle
    in_flight = 0
    peak = 0

    async def counting(request: Any) -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(0.005)
            return await original(request)
        finally:
            in_flight -= 1

    mesh.handle = counting  # type: ignore[method-assign]
    probe(mesh, tuple(f"app{i}" for i in range(30)), concurrency=5)
    assert 1 < peak <= 5


def test_load_signer_key_accepts_pem_and_raw_and_rejects_others(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    path.write_bytes(KEY)
    assert load_signer_key(path).public_key() is not None
    assert load_signer_key(b"\x01" * 32).public_key() is not None
    with pytest.raises(ConfigError, match="cannot be read"):
        load_signer_key(tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match="PEM"):
        load_signer_key(b"not a key at all")
