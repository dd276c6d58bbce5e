"""The resolution rules of ``reconcile pin`` (``core.pinning``), without network or files:
a tag to its digest, the newest release, and the refusals (unobserved, ambiguous, moved,
elsewhere, unusable, version)."""

from __future__ import annotations

import hashlib

import pytest

from reconciler.core import pinning
from reconciler.core.live import ImageRelease
from reconciler.core.pinning import Lag, Pin, Pinned, Refusal, Refused

HOST, REPO = "registry.sandbox.test", "shop/checkout"
DAY = 86_400_000


def digest(seed: str) -> str:
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def release(tags: tuple[str, ...], at: int, *, seed: str | None = None,
            repository: str = REPO, raw_digest: str | None = None) -> ImageRelease:
    value = raw_digest or digest(seed or ",".join(tags) + str(at))
    return ImageRelease(id=f"rel-{value[7:15]}", registry_host=HOST, repository=repository,
                        digest=value, media_type="application/vnd.oci.image.index.v1+json",
                        tags=tags, first_observed_at=at)


V23 = release(("v2.3.0",), 1 * DAY)
V24 = release(("v2.4.0",), 2 * DAY)
V25 = release(("v2.5.0", "latest"), 3 * DAY)
RELEASES = (V23, V25, V24)  # not in time order: "newest" must not depend on the order


def pinned(tag: str | None = "v2.4.0", digest_: str = V24.digest,
           version: str | None = None) -> Pinned:
    return Pinned(service="checkout", registry_host=HOST, repository=REPO, digest=digest_,
                  tag=tag, version=version)


def test_a_tag_resolves_to_the_digest_of_the_release_carrying_it() -> None:
    found = pinning.resolve(pinned(), RELEASES, "v2.5.0")
    assert isinstance(found, Pin)
    assert (found.digest, found.tag, found.version) == (V25.digest, "v2.5.0", None)
    assert found.changes(pinned())
    assert found.moved_from is None


def test_without_a_tag_the_newest_first_observed_release_is_pinned() -> None:
    found = pinning.resolve(pinned(), RELEASES, None)
    assert isinstance(found, Pin)
    # Of v2.5.0's two tags, the semantic-version one is written, not `latest`.
    assert (found.digest, found.tag) == (V25.digest, "v2.5.0")


def test_newest_is_by_first_observed_time_not_list_order_or_promotion() -> None:
    promoted_old = V23.model_copy(update={"accepted_at": 9 * DAY, "last_promoted_at": 9 * DAY})
    assert pinning.newest((promoted_old, V25, V24)) == V25


def test_a_release_with_no_tag_left_is_never_the_newest() -> None:
    untagged = release((), 5 * DAY, seed="untagged")
    assert pinning.newest((V24, untagged)) == V24
    assert pinning.newest((untagged,)) is None
    refused = pinning.resolve(pinned(), (untagged,), None)
    assert isinstance(refused, Refused) and refused.refusal is Refusal.UNOBSERVED
    assert "none with a tag left" in refused.message


def test_without_a_tag_the_tag_the_repo_already_pins_is_kept_when_the_release_has_it() -> None:
    found = pinning.resolve(pinned(tag="latest", digest_=V25.digest), RELEASES, None)
    assert isinstance(found, Pin) and found.tag == "latest"
    assert not found.changes(pinned(tag="latest", digest_=V25.digest))


def test_an_unobserved_tag_is_refused_listing_the_newest_observed_tags() -> None:
    many = tuple(release((f"v1.{n}.0",), n * DAY) for n in range(1, 9))
    refused = pinning.resolve(pinned(), many, "v9.9.9")
    assert isinstance(refused, Refused) and refused.refusal is Refusal.UNOBSERVED
    assert "v9.9.9 was not observed" in refused.message
    assert "v1.8.0, v1.7.0, v1.6.0, v1.5.0, v1.4.0)" in refused.message
    assert "v1.3.0" not in refused.message  # only the newest few


def test_an_unobserved_tag_with_no_release_at_all_says_none() -> None:
    refused = pinning.resolve(pinned(), (), "v2.5.0")
    assert isinstance(refused, Refused) and "newest observed tags: none" in refused.message


def test_a_tag_on_two_digests_is_ambiguous_and_both_are_named() -> None:
    again = release(("v2.5.0",), 4 * DAY, seed="rebuilt")
    refused = pinning.resolve(pinned(), (*RELEASES, again), "v2.5.0")
    assert isinstance(refused, Refused) and refused.refusal is Refusal.AMBIGUOUS
    assert V25.digest in refused.message and again.digest in refused.message


def test_two_records_of_the_same_digest_are_not_ambiguous() -> None:
    twin = V25.model_copy(update={"id": "rel-twin", "first_observed_at": 4 * DAY})
    found = pinning.resolve(pinned(), (*RELEASES, twin), "v2.5.0")
    assert isinstance(found, Pin) and found.digest == V25.digest


def test_a_tie_for_newest_between_two_digests_is_refused() -> None:
    other = release(("v2.6.0",), 3 * DAY, seed="same-millisecond")
    refused = pinning.resolve(pinned(), (*RELEASES, other), None)
    assert isinstance(refused, Refused) and refused.refusal is Refusal.AMBIGUOUS
    assert V25.digest in refused.message and other.digest in refused.message


def test_a_moved_tag_is_refused_naming_both_digests() -> None:
    moved = release(("v2.4.0",), 5 * DAY, seed="re-pushed")
    current = pinned()  # the repo pins v2.4.0 to V24's digest
    old = V24.model_copy(update={"tags": ()})  # the registry moved the tag away from it
    refused = pinning.resolve(current, (V23, old, moved), "v2.4.0")
    assert isinstance(refused, Refused) and refused.refusal is Refusal.MOVED
    assert V24.digest in refused.message and moved.digest in refused.message
    assert "--allow-moved" in refused.message


def test_a_moved_tag_is_refused_when_it_is_also_the_newest() -> None:
    moved = release(("v2.4.0",), 5 * DAY, seed="re-pushed")
    refused = pinning.resolve(pinned(), (V23, moved), None)
    assert isinstance(refused, Refused) and refused.refusal is Refusal.MOVED


def test_allow_moved_accepts_a_moved_tag_and_remembers_the_old_digest() -> None:
    moved = release(("v2.4.0",), 5 * DAY, seed="re-pushed")
    found = pinning.resolve(pinned(), (V23, moved), "v2.4.0", allow_moved=True)
    assert isinstance(found, Pin)
    assert (found.digest, found.moved_from) == (moved.digest, V24.digest)


def test_pinning_another_tag_is_not_a_move() -> None:
    found = pinning.resolve(pinned(tag="v2.3.0", digest_=digest("hand-written")),
                            RELEASES, "v2.5.0")
    assert isinstance(found, Pin) and found.moved_from is None


def test_a_release_in_another_repository_is_refused() -> None:
    elsewhere = release(("v3.0.0",), 9 * DAY, repository="shop/checkout-next")
    refused = pinning.resolve(pinned(), (*RELEASES, elsewhere), "v3.0.0")
    assert isinstance(refused, Refused) and refused.refusal is Refusal.ELSEWHERE
    assert "shop/checkout-next" in refused.message


@pytest.mark.parametrize(("tags", "raw"), [
    (("v2.6.0\x1b[31m",), None),
    (("v2.6.0",), "sha256:NOT-HEX"),
])
def test_non_canonical_live_data_is_never_pinned(tags: tuple[str, ...], raw: str | None) -> None:
    bad = release(tags, 9 * DAY, raw_digest=raw)
    refused = pinning.resolve(pinned(), (*RELEASES, bad), None)
    assert isinstance(refused, Refused) and refused.refusal is Refusal.UNUSABLE
    assert "\x1b" not in refused.message


def test_version_follows_a_semver_tag_only_when_the_file_has_one() -> None:
    with_version = pinning.resolve(pinned(version="2.4.0"), RELEASES, "v2.5.0")
    assert isinstance(with_version, Pin) and with_version.version == "2.5.0"
    without = pinning.resolve(pinned(), RELEASES, "v2.5.0")
    assert isinstance(without, Pin) and without.version is None


def test_a_file_version_with_a_non_semver_tag_is_refused() -> None:
    refused = pinning.resolve(pinned(version="2.4.0"), RELEASES, "latest")
    assert isinstance(refused, Refused) and refused.refusal is Refusal.VERSION


@pytest.mark.parametrize(("tag", "version"), [
    ("v1.2.3", "1.2.3"), ("1.2.3", "1.2.3"), ("v1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5"),
    ("vv1.2.3", None), ("v1.2", None), ("v01.2.3", None), ("latest", None),
])
def test_version_of_a_tag(tag: str, version: str | None) -> None:
    assert pinning.version_of(tag) == version


def test_lag_compares_the_pinned_digest_with_the_newest_release() -> None:
    lag = pinning.lag(pinned(), RELEASES)
    assert isinstance(lag, Lag) and lag.lags and not lag.moved
    assert (lag.newest, lag.newest_tag) == (V25, "v2.5.0")
    current = pinning.lag(pinned(tag="v2.5.0", digest_=V25.digest), RELEASES)
    assert isinstance(current, Lag) and not current.lags


def test_lag_says_when_the_pinned_tag_moved() -> None:
    moved = release(("v2.4.0",), 5 * DAY, seed="re-pushed")
    lag = pinning.lag(pinned(), (V23, moved))
    assert isinstance(lag, Lag) and lag.lags and lag.moved


def test_lag_with_nothing_observed_is_none_and_a_tie_is_refused() -> None:
    assert pinning.lag(pinned(), ()) is None
    other = release(("v2.6.0",), 3 * DAY, seed="same-millisecond")
    refused = pinning.lag(pinned(), (*RELEASES, other))
    assert isinstance(refused, Refused) and refused.refusal is Refusal.AMBIGUOUS
