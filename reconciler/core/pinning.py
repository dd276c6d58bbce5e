"""Pinning a release: which digest a tag names, which release is the newest, and whether a
pin lags -- decided from the releases the control plane observed for one service.

Owns the resolution rules of ``reconcile pin`` (``docs/pin.md``). Callers: the engine
(``engine.pin``, ``engine.check_pins``), which reads the releases and the desired state and
hands them here; the file rewrite is ``shell.pinning``'s. Pure: no I/O, and no exit codes
(the engine maps a ``Refusal`` to one).

The rules, in the order they are applied:

- **Candidates.** A release is a candidate under a tag when that tag is among its
  ``observedTags``. A release with no observed tag left (the registry moved all its tags to
  newer manifests) is not a candidate for anything: it can be pinned only by digest, by hand.
- **Newest.** The tagged release with the greatest ``firstObservedAt`` (when the control
  plane first saw that manifest in the registry; the push time of the sandbox). Not
  ``lastObservedAt`` (a re-scan of an old manifest would make it "newest"), not acceptance
  or promotion (those say what ran, not what was published). Two different digests first
  observed at the same millisecond are a tie nobody can break honestly: refused.
- **Tag of a release.** Given ``TAG``: that tag. Without: of the newest release's tags, the
  one the repo already pins when it is among them, else the first semantic-version-like
  one (``v1.2.3``, ``1.2.3-rc.1``), else the first one, in the control plane's order.
- **Refusals**, each a distinct ``Refusal``: *unobserved* (no release carries the tag; the
  newest few tags are listed), *ambiguous* (releases with different digests carry it),
  *moved* (the repo pins that very tag to another digest than the one it names now:
  refused unless ``allow_moved``, both digests named), *elsewhere* (the release lives in
  another registry or repository than the file pins: pin changes only digest and tag),
  *unusable* (the control plane reported a tag or digest that is not canonical: live
  strings are untrusted and never written to a file unchecked), *version* (the file has
  ``release.version`` and the new tag is no semantic version, so the version cannot be
  kept true).
- **Version.** ``release.version`` changes only when the file has one: the tag without one
  leading ``v`` (``v2.5.0`` -> ``2.5.0``). A file without it gets none.
- **Lag** (``--check``): a pin lags when its digest is not the newest release's digest.
  Lagging says nothing about what runs (that is the plan's judge): only that the control
  plane observed a newer release than the repo pins.

What ``reconcile pin`` did (``PinRun``) and what ``--check`` found (``PinCheck``) are
plain values declared here, so the engine hands them back and ``render.pinview`` words
them without either knowing the other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from reconciler.core import names
from reconciler.core.desired import SEMVER
from reconciler.core.live import ImageRelease, ReadFailure
from reconciler.core.sanitize import safe

if TYPE_CHECKING:  # annotations only: the planner's models load with the preview
    from reconciler.core.diagnostics import Diagnostic
    from reconciler.core.plans import Plan

#: How many tags an "unobserved" refusal lists, newest first.
SHOWN_TAGS = 5

_TAG = re.compile(names.TAG)
_SEMVER = re.compile(SEMVER)


class Refusal(StrEnum):
    """Why a tag cannot be pinned; the engine gives each its own exit code."""

    UNOBSERVED = "unobserved"
    AMBIGUOUS = "ambiguous"
    MOVED = "moved"
    ELSEWHERE = "elsewhere"
    UNUSABLE = "unusable"
    VERSION = "version"


@dataclass(frozen=True, slots=True)
class Refused:
    """A refusal and the sentence that explains it (names the tag and the digests)."""

    refusal: Refusal
    message: str


@dataclass(frozen=True, slots=True)
class Pinned:
    """What the repo pins now for one service (``release`` of its Service document)."""

    service: str
    registry_host: str
    repository: str
    digest: str
    tag: str | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class Pin:
    """What pin writes: ``digest``, ``tag`` and (only when the file has one) ``version``.

    ``moved_from`` is the repo's digest when the repo's tag moved and ``allow_moved``
    accepted it (None otherwise); ``release`` is the control plane's record it came from.
    """

    digest: str
    tag: str
    version: str | None
    release: ImageRelease
    moved_from: str | None = None

    def changes(self, current: Pinned) -> bool:
        """Whether writing this pin changes the file's ``release`` at all."""
        return (self.digest, self.tag, self.version) != (
            current.digest, current.tag, current.version)


@dataclass(frozen=True, slots=True)
class Lag:
    """``--check``: the repo pins ``pinned``; the control plane's newest release is
    ``newest`` (its tag ``newest_tag``). ``moved``: the repo's own tag now names another
    digest (the pin is then not merely old: the tag it quotes lies)."""

    pinned: Pinned
    newest: ImageRelease
    newest_tag: str
    moved: bool

    @property
    def lags(self) -> bool:
        return self.pinned.digest != self.newest.digest


def when(ms: int) -> str:
    """Epoch milliseconds as an ISO 8601 UTC time (to the second), for messages."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def is_semver_tag(tag: str) -> bool:
    return version_of(tag) is not None


def version_of(tag: str) -> str | None:
    """The canonical semantic version a tag spells (one leading ``v`` dropped), or None."""
    bare = tag[1:] if tag.startswith("v") else tag
    return bare if _SEMVER.fullmatch(bare) else None


def tagged_newest_first(releases: Iterable[ImageRelease]) -> list[ImageRelease]:
    """The releases carrying at least one tag, newest ``firstObservedAt`` first (ties in
    the control plane's order)."""
    tagged = [r for r in releases if r.tags]
    return sorted(tagged, key=lambda r: -r.first_observed_at)


def newest(releases: Sequence[ImageRelease]) -> ImageRelease | Refused | None:
    """The newest tagged release (module docstring), a refusal for a tie between two
    digests, or None when no release carries a tag."""
    ordered = tagged_newest_first(releases)
    if not ordered:
        return None
    top = ordered[0]
    tied = sorted({r.digest for r in ordered if r.first_observed_at == top.first_observed_at})
    if len(tied) > 1:
        return Refused(Refusal.AMBIGUOUS, (
            f"the newest release is ambiguous: {len(tied)} digests were first observed at "
            f"the same time ({when(top.first_observed_at)}): "
            + ", ".join(safe(d, 80) for d in tied) + "; name the tag to pin"))
    return top


def tag_of(release: ImageRelease, current: Pinned) -> str:
    """Which of a release's tags pin writes when no tag is named (module docstring)."""
    if current.tag is not None and current.tag in release.tags:
        return current.tag
    return next((t for t in release.tags if is_semver_tag(t)), release.tags[0])


def observed_tags(releases: Sequence[ImageRelease], limit: int = SHOWN_TAGS) -> list[str]:
    """The newest ``limit`` distinct tags, newest release first."""
    seen: dict[str, None] = {}
    for release in tagged_newest_first(releases):
        for tag in release.tags:
            seen.setdefault(tag, None)
    return list(seen)[:limit]


def resolve(current: Pinned, releases: Sequence[ImageRelease], tag: str | None, *,
            allow_moved: bool = False) -> Pin | Refused:
    """The pin for ``tag`` (the newest release when None), or why there is none."""
    label = f"{current.service}: "
    if tag is None:
        found = newest(releases)
        if found is None:
            return Refused(Refusal.UNOBSERVED, label + (
                "the control plane observed no tagged release for this service"
                + (f" ({len(releases)} release(s), none with a tag left)" if releases else "")
                + "; nothing to pin"))
        if isinstance(found, Refused):
            return Refused(found.refusal, label + found.message)
        release, chosen = found, tag_of(found, current)
    else:
        carrying = [r for r in releases if tag in r.tags]
        if not carrying:
            shown = observed_tags(releases)
            there = (", ".join(safe(t, 130) for t in shown) if shown else "none")
            return Refused(Refusal.UNOBSERVED, label + (
                f"tag {safe(tag, 130)} was not observed by the control plane (newest observed "
                f"tags: {there}); push it first, or check the spelling"))
        digests = sorted({r.digest for r in carrying})
        if len(digests) > 1:
            listed = "; ".join(
                f"{safe(r.digest, 80)} (first observed {when(r.first_observed_at)})"
                for r in sorted(carrying, key=lambda r: -r.first_observed_at))
            return Refused(Refusal.AMBIGUOUS, label + (
                f"tag {safe(tag, 130)} is ambiguous: the control plane observed it on "
                f"{len(digests)} different digests: {listed}; pin the digest by hand"))
        release, chosen = max(carrying, key=lambda r: r.first_observed_at), tag
    return _pin(current, release, chosen, allow_moved=allow_moved)


def _pin(current: Pinned, release: ImageRelease, tag: str, *,
         allow_moved: bool) -> Pin | Refused:
    label = f"{current.service}: "
    if not names.is_digest(release.digest) or not _TAG.fullmatch(tag):
        return Refused(Refusal.UNUSABLE, label + (
            f"the control plane reported tag {safe(tag, 130)!r} with digest "
            f"{safe(release.digest, 80)!r}, which is not a canonical OCI tag and sha256 "
            "digest; nothing written"))
    if (release.registry_host, release.repository) != (current.registry_host,
                                                        current.repository):
        return Refused(Refusal.ELSEWHERE, label + (
            f"tag {tag} names a release in {safe(release.registry_host, 255)}/"
            f"{safe(release.repository, 255)}, but the file pins "
            f"{current.registry_host}/{current.repository}; pin changes only the digest and "
            "the tag: change registryHost/repository by hand"))
    moved = current.tag == tag and current.digest != release.digest
    if moved and not allow_moved:
        return Refused(Refusal.MOVED, label + (
            f"tag {tag} moved: the repo pins it to {current.digest}, but the control plane "
            f"now reports it on {release.digest} (first observed "
            f"{when(release.first_observed_at)}); a moved tag is refused: check who pushed "
            "it, then pass --allow-moved to pin the new digest"))
    version = current.version
    if version is not None:
        version = version_of(tag)
        if version is None:
            return Refused(Refusal.VERSION, label + (
                f"the file has release.version {current.version}, but tag {tag} is no "
                "semantic version (vMAJOR.MINOR.PATCH), so the version cannot follow it; "
                "set version (or remove it) by hand"))
    return Pin(digest=release.digest, tag=tag, version=version, release=release,
               moved_from=current.digest if moved else None)


def lag(current: Pinned, releases: Sequence[ImageRelease]) -> Lag | Refused | None:
    """``--check`` for one service: the comparison with the newest release, a refusal
    (tie, non-canonical live data), or None when the control plane observed no tagged
    release (nothing to lag behind)."""
    found = newest(releases)
    if found is None:
        return None
    if isinstance(found, Refused):
        return Refused(found.refusal, f"{current.service}: {found.message}")
    tag = tag_of(found, current)
    if not names.is_digest(found.digest) or not _TAG.fullmatch(tag):
        return Refused(Refusal.UNUSABLE, f"{current.service}: the control plane reported a "
                       f"newest release with tag {safe(tag, 130)!r} and digest "
                       f"{safe(found.digest, 80)!r}, which are not canonical")
    moved = current.tag is not None and any(
        current.tag in r.tags and r.digest != current.digest for r in releases)
    return Lag(pinned=current, newest=found, newest_tag=tag, moved=moved)


# -- what the operations hand back (worded by render.pinview) ----------------------------

@dataclass(frozen=True)
class PinRun:
    """What ``reconcile pin`` did to one service's file. ``before``/``after`` are the file's
    bytes (equal when it already pinned this); ``problems``: what the rewritten document
    fails (evidence still bound to the old digest); ``preview``: the plan for that service
    over the working tree as if it were committed, or why there is none."""

    service: str
    path: str
    pinned: Pinned
    pin: Pin
    before: bytes
    after: bytes
    written: bool
    problems: tuple[Diagnostic, ...] = ()
    stale_comments: tuple[int, ...] = ()
    preview: Plan | None = None
    preview_error: str | None = None


@dataclass(frozen=True)
class PinCheck:
    """``pin --check`` for one service: a ``Lag`` (lagging or current), a refusal (the
    newest is a tie, or live data is not canonical), a ``ReadFailure`` (the control plane
    has no such service), or None (it observed no tagged release)."""

    service: str
    outcome: Lag | Refused | ReadFailure | None

    @property
    def lags(self) -> bool:
        return isinstance(self.outcome, Lag) and self.outcome.lags

    @property
    def unknown(self) -> bool:
        """Not compared because the answer is not one release (a tie, untrusted data)."""
        return isinstance(self.outcome, Refused)
