"""Environments in one repo: the ``Pipeline``, ``Freeze`` and ``Policy`` documents.

Owns the pydantic models of the documents that sit at the *pipeline root* (the directory
holding ``pipeline.yaml``), above the environments' own desired-state roots:

- ``Pipeline`` names the environments in promotion order, each with its desired-state
  directory, and says how a release moves into it from the one before: ``soak`` (how long
  the digest must have been proven there) and ``windows`` (cron + duration + IANA time
  zone allow/deny windows, evaluated by ``core.windows``);
- ``Freeze`` stops every promotion into the environments it names until a time
  (``reconcile freeze`` / ``unfreeze`` write and commit them);
- ``Policy`` holds CEL rules evaluated against each promotion (``core.policy``).

Also owns the duration grammar of ``soak`` and ``windows[].duration`` (``30m``, ``1h30m``,
``2d``) and the rules that span those documents (unique names, paths that do not nest).

Pure: no file access; ``shell.environments`` finds and reads the files and maps model
errors to file:line. The cron and time-zone checks only parse (croniter, zoneinfo).
"""

from __future__ import annotations

import posixpath
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import Field, Strict, field_validator, model_validator

from reconciler.core import names
from reconciler.core.desired import MODEL_CONFIG, LocatedError
from reconciler.core.lean import LeanModel

PIPELINE_FILE = "pipeline.yaml"
FREEZE_DIR = "freezes"
POLICY_DIR = "policies"

Identifier = Annotated[str, Strict(), Field(pattern=names.IDENTIFIER)]
Text = Annotated[str, Strict(), Field(min_length=1, max_length=500,
                                      pattern=names.anchored(r"(?=.*\S)[^\x00-\x1f\x7f]+"))]

_PART = re.compile(r"(\d+)(d|h|m|s)")
_WHOLE = re.compile(r"(?:\d+(?:d|h|m|s))+")
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}


class _Model(LeanModel):
    model_config = MODEL_CONFIG


def duration_seconds(text: str) -> int:
    """``30m``, ``1h30m``, ``2d``, ``45s`` as whole seconds (more than 0); ValueError else."""
    value = text.strip()
    if not _WHOLE.fullmatch(value):
        raise ValueError(f"{text!r} is not a duration: give NUMBER+UNIT parts such as 30m, "
                         "1h30m, 2d, 45s (units d, h, m, s)")
    total = sum(int(n) * _UNIT[unit] for n, unit in _PART.findall(value))
    if total <= 0:
        raise ValueError(f"{text!r} is not more than 0")
    return total


def show_duration(seconds: float) -> str:
    """``12m 5s``, ``2h``, ``1d 3h``: a duration for a sentence (whole seconds)."""
    left = max(0, int(seconds))
    if left == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join(parts)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ValueError when the tz database does not know it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"{name!r} is not an IANA time zone (e.g. Europe/Berlin, UTC)") \
            from exc


class Window(_Model):
    """An allow or deny window: it opens at each time ``schedule`` (cron, five fields, in
    ``timezone``'s wall-clock time) and stays open for ``duration``. Deny beats allow;
    with any allow window, promotions go only while one is open."""

    kind: Literal["allow", "deny"]
    name: Identifier
    schedule: Annotated[str, Strict(), Field(min_length=1, max_length=200)] = Field(
        description="Cron schedule (minute hour day-of-month month day-of-week), read in "
        "`timezone`'s local time.")
    duration: Annotated[str, Strict()] = Field(
        description="How long the window stays open from each start: 30m, 8h, 2d, 1h30m.")
    timezone: Annotated[str, Strict()] = Field(
        default="UTC", description="IANA time zone the schedule is read in.")

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if len(value.split()) != 5 or not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a five-field cron schedule "
                             "(minute hour day-of-month month day-of-week)")
        return value

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        duration_seconds(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        zone(value)
        return value

    @property
    def seconds(self) -> int:
        return duration_seconds(self.duration)


class Environment(_Model):
    """One environment: where its desired state is, and how a release reaches it."""

    name: Identifier
    path: Annotated[str, Strict(), Field(min_length=1, max_length=4096,
                                         pattern=names.anchored(r"[^\x00-\x1f]+"))] = Field(
        description="Its desired-state directory (with its own Settings), relative to the "
        "pipeline root.")
    soak: Annotated[str, Strict()] | None = Field(
        default=None, description="How long a digest must have been proven on the previous "
        "environment before it may be promoted here: 30m, 2h, 1d.")
    windows: tuple[Window, ...] = ()

    @field_validator("soak")
    @classmethod
    def _soak(cls, value: str | None) -> str | None:
        if value is not None:
            duration_seconds(value)
        return value

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        normal = posixpath.normpath(value)
        if value.startswith("/") or normal == ".." or normal.startswith("../"):
            raise ValueError(f"{value!r} must be a directory inside the pipeline root")
        return normal

    @property
    def soak_seconds(self) -> int:
        return duration_seconds(self.soak) if self.soak else 0


class Pipeline(_Model):
    """The environments of this repo, in promotion order (the first has no upstream)."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Pipeline"]
    environments: tuple[Environment, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _rules(self) -> Pipeline:
        seen: dict[str, int] = {}
        paths: dict[str, int] = {}
        for index, env in enumerate(self.environments):
            if env.name in seen:
                raise LocatedError(("environments", index, "name"),
                                   f"{env.name!r} is listed twice (also environments"
                                   f"[{seen[env.name]}])")
            seen[env.name] = index
            for other, at in paths.items():
                if other == env.path or env.path.startswith(other + "/") \
                        or other.startswith(env.path + "/") or "." in (other, env.path):
                    raise LocatedError(("environments", index, "path"),
                                       f"{env.path!r} overlaps environments[{at}]'s "
                                       f"{other!r}: each environment needs a directory of "
                                       "its own")
            paths[env.path] = index
        first = self.environments[0]
        if first.soak is not None:
            raise LocatedError(("environments", 0, "soak"),
                               f"{first.name!r} is the first environment: there is no "
                               "previous one to soak on")
        return self

    def named(self, name: str) -> Environment | None:
        return next((e for e in self.environments if e.name == name), None)

    def upstream_of(self, name: str) -> Environment | None:
        """The environment a release comes from before ``name`` (None for the first)."""
        for index, env in enumerate(self.environments):
            if env.name == name:
                return self.environments[index - 1] if index else None
        return None


#: The latest instant any reader computes with. A freeze's ``until`` (and any instant the
#: rules derive) later than this is read as this: every reader adds to the instants it is
#: given (a window's duration, a year's horizon looking for the next opening), and
#: ``datetime`` ends at 9999-12-31, so ``until: 9999-12-31T23:59:59Z`` would overflow. Three
#: years short of the end leaves room for each; a freeze this long is, for every reader,
#: one that lasts until it is lifted (an open-ended one says so without a date).
LAST_INSTANT = datetime(9997, 1, 1, tzinfo=UTC)
LAST_INSTANT_MS = int(LAST_INSTANT.timestamp() * 1000)
assert datetime.max.replace(tzinfo=UTC) - LAST_INSTANT > timedelta(days=2 * 366)


def eligible_shown(ms: int) -> int:
    """An eligible instant as every view says it: rounded up to the whole second (a reader
    who acts at the time shown finds the change eligible; rounded down, it could still be
    waiting for most of a second) and clamped to ``LAST_INSTANT_MS``."""
    return min(max(-(-ms // 1000) * 1000, 0), LAST_INSTANT_MS)


def clamp_instant(at: datetime) -> datetime:
    """``at``, or ``LAST_INSTANT`` when it is later (one rule for every reader)."""
    return min(at, LAST_INSTANT)


def parse_instant(value: str) -> datetime:
    """An RFC 3339 time with a zone (``2026-12-03T00:00:00Z``); ValueError else."""
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not an RFC 3339 time like 2026-12-03T18:00:00Z") \
            from exc
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone: write Z or an offset like +01:00")
    return parsed.astimezone(UTC)


class Freeze(_Model):
    """No promotion into ``environments`` (every one when empty) until ``until``, or
    until ``reconcile unfreeze`` removes it when ``until`` is left out."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Freeze"]
    reason: Text
    until: Annotated[str, Strict()] | None = Field(
        default=None, description="RFC 3339 time the freeze ends, e.g. "
        "2026-12-03T18:00:00Z; without it the freeze lasts until it is removed "
        "(`reconcile unfreeze`). A time after 9997-01-01T00:00:00Z is read as that time.")
    environments: tuple[Identifier, ...] = Field(
        default=(), description="The environments it freezes; every one when empty.")

    @field_validator("until")
    @classmethod
    def _until(cls, value: str | None) -> str | None:
        if value is not None:
            parse_instant(value)
        return value

    @property
    def until_ms(self) -> int | None:
        """When it ends (ms, clamped to ``LAST_INSTANT``); None: when it is removed."""
        if self.until is None:
            return None
        return int(clamp_instant(parse_instant(self.until)).timestamp() * 1000)

    def holds_at(self, now_ms: int) -> bool:
        """Whether it is in force at ``now_ms`` (an open-ended one always is)."""
        end = self.until_ms
        return end is None or end > now_ms

    @property
    def shown_until(self) -> str:
        """``until 2026-12-03 18:00:00Z`` or ``until it is lifted``, for a sentence."""
        if self.until is None:
            return "until it is lifted"
        return f"until {parse_instant(self.until):%Y-%m-%d %H:%M:%S}Z"

    def covers(self, environment: str) -> bool:
        return not self.environments or environment in self.environments


class Rule(_Model):
    """One CEL rule: ``expression`` must be true for each promotion, else ``message``."""

    name: Identifier
    expression: Annotated[str, Strict(), Field(min_length=1, max_length=4000)]
    message: Text


class Policy(_Model):
    """Rules as code, evaluated against every promotion into ``environments`` (every one
    when empty); a rule that is false blocks with its name and message."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Policy"]
    name: Identifier
    environments: tuple[Identifier, ...] = ()
    timezone: Annotated[str, Strict()] = Field(
        default="UTC", description="IANA time zone of the rules' `local` variables.")
    rules: tuple[Rule, ...] = Field(min_length=1)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        zone(value)
        return value

    def covers(self, environment: str) -> bool:
        return not self.environments or environment in self.environments


PIPELINE_KINDS: dict[str, type[Pipeline] | type[Freeze] | type[Policy]] = {
    "Pipeline": Pipeline, "Freeze": Freeze, "Policy": Policy}
