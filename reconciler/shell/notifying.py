"""Delivering notifications: CDEvents to webhooks, Slack messages, GitHub statuses.

Owns the I/O around ``core.notifying``'s decision: reading the sinks' secrets (from the
variables and files ``notifications`` names; each registered with ``core.sanitize`` so
no output shows it), the memory of what was sent (``notifications.json`` in the state
directory, written atomically, so a restarted watcher does not send again), and the
delivery itself -- each (notification, sink) one background task on the running loop,
retried with exponential backoff a bounded number of times, each request bounded by
``delivery.timeoutSeconds`` as a whole (a total deadline from sending to the last byte of
the answer, not only each read: a receiver that trickles its answer a byte at a time is
cut off like one that never answers). Deliveries are counted (``count(sink, result)``: the
watcher's ``reconcile_notifications_total``) and a failure is logged (``logging``,
logger ``reconcile.notify``), never raised: a notification must never fail or block an
apply. ``Notifier.drain`` waits at most ``delivery.drainSeconds`` for what is still in
flight (a one-shot ``apply`` calls it after its work is done) and gives the rest up.

The formats:

- a webhook receives CDEvents 0.4 (cdevents.dev) as CloudEvents in HTTP binary mode
  (``ce-*`` headers, the CDEvent JSON as the body), built with the ``cloudevents``
  library; each event's id is derived from the notification's key, so a receiver can
  deduplicate a retried delivery;
- Slack receives an incoming-webhook message (``text`` plus Block Kit ``blocks``);
- GitHub receives a commit status on the commit (``context``: ``reconcile/<env>``), and
  with ``deployments`` a deployment per commit and environment (found again by listing)
  with a deployment status (githubkit, async).

Must not decide what to say (``core.notifying``) or when (the engine), and must not
print.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from reconciler import __version__
from reconciler.core import notifying
from reconciler.core.desired import Delivery, Notifications, Settings
from reconciler.core.notifying import Kind, Memory, Notification, ServiceLine, WayBack
from reconciler.core.outcomes import ApplyReport, GateReport
from reconciler.core.plans import Plan
from reconciler.core.sanitize import register_secret, safe

STATE_FILE = "notifications.json"
CDEVENTS_VERSION = "0.4.1"
#: Slack: a header's text is at most 150 characters, a section's 3000.
SLACK_HEADER = 150
SLACK_SECTION = 3000
#: GitHub: a commit status's description is at most 140 characters.
STATUS_DESCRIPTION = 140

log = logging.getLogger("reconcile.notify")

#: ``count(sink, result)``; result is ``delivered``, ``retried`` or ``failed``.
Counter = Callable[[str, str], None]


class DeliveryError(Exception):
    """One attempt failed; ``permanent``: another attempt cannot succeed (a 4xx)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Sink(Protocol):
    kind: str  # webhook | slack | github: the metrics label
    name: str  # webhook[0], slack[0], github: what a log line names
    kinds: frozenset[Kind]

    async def send(self, note: Notification, timeout: float) -> None: ...


# -- secrets ----------------------------------------------------------------------------


class SecretError(ValueError):
    """A secret named by the settings cannot be read; the message names where."""


def read_secret(env: Mapping[str, str], *, variable: str | None, path: str | None,
                what: str, register: bool = True) -> str | None:
    """The secret from ``variable`` or the file at ``path`` (stripped), registered for
    redaction; None when neither is named."""
    if variable is not None:
        value = env.get(variable, "").strip()
        if not value:
            raise SecretError(f"{what}: the variable {variable} is not set")
    elif path is not None:
        file = Path(path).expanduser()
        try:
            if not file.is_file():
                raise SecretError(f"{what}: {file} is not a regular file")
            if file.stat().st_size > 64 * 1024:
                raise SecretError(f"{what}: {file} is larger than 64 KiB; not a secret")
            value = file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SecretError(f"{what}: cannot read {file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise SecretError(f"{what}: {file} is not UTF-8 text") from None
        if not value:
            raise SecretError(f"{what}: {file} is empty")
    else:
        return None
    if register:
        register_secret(value)
    return value


def _kinds(own: Iterable[str] | None, default: Iterable[str] | None) -> frozenset[Kind]:
    chosen = own if own is not None else default
    return frozenset(Kind) if chosen is None else notifying.subscribed(chosen)


def sinks(config: Notifications, env: Mapping[str, str],
          ) -> tuple[list[Sink], list[str]]:
    """The sinks ``config`` names, and the problems of those that cannot be used (their
    secret is missing: said, and that sink left out; the others still deliver)."""
    def secret(variable: str | None, path: str | None, what: str) -> str:
        value = read_secret(env, variable=variable, path=path, what=what)
        assert value is not None  # the settings require a variable or a file for these
        return value

    def webhook(i: int) -> Sink:
        hook, what = config.webhooks[i], f"notifications.webhooks[{i}]"
        url = hook.url or secret(hook.url_env, hook.url_file, f"{what} URL")
        token = read_secret(env, variable=hook.token_env, path=hook.token_file,
                            what=f"{what} token")
        return WebhookSink(f"webhooks[{i}]", _kinds(hook.on, config.on), url, token)

    def slack(i: int) -> Sink:
        hook = config.slack[i]
        url = secret(hook.url_env, hook.url_file, f"notifications.slack[{i}] URL")
        return SlackSink(f"slack[{i}]", _kinds(hook.on, config.on), url)

    def github() -> Sink:
        gh = config.github
        assert gh is not None
        token = secret(gh.token_env or (None if gh.token_file else "GITHUB_TOKEN"),
                       gh.token_file, "notifications.github token")
        return GitHubSink("github", _kinds(gh.on, config.on), api_url=gh.api_url,
                          repository=gh.repository, token=token, context=gh.context,
                          deployments=gh.deployments, target_url=gh.target_url)

    builds: list[Callable[[], Sink]] = [
        *(functools.partial(webhook, i) for i in range(len(config.webhooks))),
        *(functools.partial(slack, i) for i in range(len(config.slack))),
        *([github] if config.github is not None else [])]
    out: list[Sink] = []
    problems: list[str] = []
    for build in builds:
        # One sink's missing secret is said and that sink left out; the others deliver.
        try:
            out.append(build())
        except SecretError as exc:
            problems.append(str(exc))
    return out, problems


def describe(config: Notifications, env: Mapping[str, str],
             ) -> list[dict[str, Any]]:
    """What ``reconcile config`` shows of each sink: its settings path, where it sends,
    where its secret comes from and whether that can be read (never the value)."""
    out: list[dict[str, Any]] = []

    def secret(variable: str | None, path: str | None, what: str) -> dict[str, Any] | None:
        if variable is None and path is None:
            return None
        try:
            # Read only to say whether it can be: not kept, not registered.
            read_secret(env, variable=variable, path=path, what=what, register=False)
            problem = None
        except SecretError as exc:
            problem = str(exc)
        return {"from": f"env {variable}" if variable else f"file {path}",
                "set": problem is None, "problem": problem}

    def kinds(own: Iterable[str] | None) -> list[str]:
        return sorted(k.value for k in _kinds(own, config.on))

    for i, hook in enumerate(config.webhooks):
        out.append({"name": f"webhooks[{i}]", "path": ("notifications", "webhooks", i),
                    "sink": "webhook (CDEvents)",
                    "to": safe(hook.url, 200) if hook.url else None,
                    "url": secret(hook.url_env, hook.url_file, f"webhooks[{i}] URL"),
                    "token": secret(hook.token_env, hook.token_file, f"webhooks[{i}] token"),
                    "on": kinds(hook.on)})
    for i, slack in enumerate(config.slack):
        out.append({"name": f"slack[{i}]", "path": ("notifications", "slack", i),
                    "sink": "slack", "to": None,
                    "url": secret(slack.url_env, slack.url_file, f"slack[{i}] URL"),
                    "token": None, "on": kinds(slack.on)})
    gh = config.github
    if gh is not None:
        what = "commit statuses" + (" and deployments" if gh.deployments else "")
        out.append({"name": "github", "path": ("notifications", "github"),
                    "sink": f"github {what}", "to": f"{gh.repository} at {gh.api_url}",
                    "url": None, "token": secret(gh.token_env or (
                        None if gh.token_file else "GITHUB_TOKEN"), gh.token_file,
                        "github token"), "on": kinds(gh.on)})
    return out


# -- formats ----------------------------------------------------------------------------


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def purl(line: ServiceLine) -> str | None:
    """The service's artifact as a package URL (``pkg:oci/NAME@sha256%3A...``)."""
    if not line.digest:
        return None
    return f"pkg:oci/{quote(line.service, safe='')}@{quote(line.digest, safe='')}"


def _service_json(line: ServiceLine) -> dict[str, Any]:
    return {"service": line.service, "serviceId": line.service_id, "action": line.action,
            "digest": line.digest, "previousDigest": line.previous,
            "clusters": list(line.clusters), "reasons": [safe(r, 500) for r in line.reasons]}


def _revert_json(note: Notification) -> dict[str, Any] | None:
    """The revert a way-back notification is about: its key, the failed commit, the
    revert commit and whether it landed on the branch, the pull request and why."""
    line = note.revert
    if line is None:
        return None
    return {"key": line.key, "failedCommit": line.failed_commit, "commit": line.commit,
            "landed": line.landed, "pullRequest": line.pull_url,
            "pullNumber": line.pull_number,
            "why": safe(line.why_pr, 500) if line.why_pr else None}


def event_id(note: Notification, event_type: str, subject: ServiceLine | None) -> str:
    """Stable per notification, type and subject: a retried delivery repeats it."""
    raw = f"{note.key}|{event_type}|{subject.service if subject else ''}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def cdevent(note: Notification, event_type: str, subject: ServiceLine | None,
            source: str) -> dict[str, Any]:
    """One CDEvent (the CloudEvent's data): context, subject, and our own ``customData``
    (commit, environment, kind, summary, services, blockers)."""
    environment = {"id": note.environment, "source": source}
    content: dict[str, Any]
    if ".service." in event_type:
        assert subject is not None
        content = {"environment": environment}
        artifact = purl(subject)
        if artifact:
            content["artifactId"] = artifact
        subj = {"id": f"service/{subject.service}", "type": "service", "content": content}
    elif ".environment." in event_type:
        subj = {"id": note.environment, "type": "environment",
                "content": {"name": note.environment, "url": note.control_plane_url}}
    elif ".incident." in event_type:
        content = {"description": safe(note.summary, 1000), "environment": environment}
        if subject is not None:
            content["service"] = {"id": f"service/{subject.service}", "source": source}
            artifact = purl(subject)
            if artifact:
                content["artifactId"] = artifact
        subj = {"id": note.incident, "type": "incident", "content": content}
    else:  # a custom (dev.cdeventsx) event: reconcile-plan, -environment, -revert
        custom: dict[str, Any] = {"environment": environment}
        if note.revert is not None and note.revert.pull_url:
            custom["url"] = note.revert.pull_url
        subj = {"id": f"{note.environment}/{note.commit}",
                "type": event_type.split(".")[2], "content": custom}
    return {
        "context": {"version": CDEVENTS_VERSION, "id": event_id(note, event_type, subject),
                    "source": source, "type": event_type,
                    "timestamp": _rfc3339(note.created_at)},
        "subject": {**subj, "source": source},
        "customDataContentType": "application/json",
        "customData": {"kind": note.kind.value, "environment": note.environment,
                       "commit": note.commit, "summary": safe(note.summary, 1000),
                       "services": [_service_json(s) for s in note.services],
                       "blockers": [safe(b, 500) for b in note.blockers],
                       **({"revert": _revert_json(note)} if note.revert else {})},
    }


def cloudevents(note: Notification, source: str) -> list[tuple[dict[str, str], bytes]]:
    """The HTTP requests (headers, body) of every CloudEvent ``note`` becomes, in binary
    content mode (the CDEvents HTTP binding)."""
    from cloudevents.core.bindings.http import to_binary_event
    from cloudevents.core.v1.event import CloudEvent

    out = []
    for event_type, subject in note.cdevent_types():
        data = cdevent(note, event_type, subject, source)
        event = CloudEvent(attributes={
            "id": data["context"]["id"], "source": source, "type": event_type,
            "subject": data["subject"]["id"], "datacontenttype": "application/json",
            "time": datetime.fromtimestamp(note.created_at / 1000, UTC)}, data=data)
        message = to_binary_event(event)
        out.append((dict(message.headers), message.body))
    return out


_SLACK_ICON = {notifying.Severity.INFO: ":white_check_mark:",
               notifying.Severity.WARNING: ":warning:", notifying.Severity.ERROR: ":x:"}


def _mrkdwn(text: str, limit: int = 500) -> str:
    """Untrusted text made safe for Slack's mrkdwn: redacted, controls escaped, and the
    three characters Slack asks to escape."""
    return safe(text, limit).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(note: Notification) -> dict[str, Any]:
    """An incoming-webhook message: ``text`` (notifications, fallback) and ``blocks``."""
    spec = note.spec
    icon = _SLACK_ICON[spec.severity]
    headline = f"{note.environment}: {spec.title}"
    lines = []
    for line in note.services[:10]:
        digest = f" `{notifying.short(line.digest)}`" if line.digest else ""
        why = f" — {_mrkdwn('; '.join(line.reasons), 300)}" if line.reasons else ""
        lines.append(f"• *{_mrkdwn(line.service, 100)}*{digest}{why}")
    if len(note.services) > 10:
        lines.append(f"… and {len(note.services) - 10} more service(s)")
    lines.extend(f"• {_mrkdwn(b, 300)}" for b in note.blockers[:10])
    fields = [{"type": "mrkdwn", "text": f"*Commit*\n`{note.commit[:12]}`"},
              {"type": "mrkdwn", "text": f"*Environment*\n{_mrkdwn(note.environment, 100)}"}]
    revert = note.revert
    if revert is not None:
        where = f"<{_mrkdwn(revert.pull_url, 300)}|pull request #{revert.pull_number}>" \
            if revert.pull_url else (f"commit `{revert.commit[:12]}`" if revert.commit
                                     else "not made")
        fields.append({"type": "mrkdwn", "text": f"*Revert*\n{where}"})
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "emoji": True,
                                    "text": safe(f"{headline}", SLACK_HEADER - 5)}},
        {"type": "section", "text": {"type": "mrkdwn",
                                     "text": f"{icon} {_mrkdwn(note.summary, 1000)}"}},
        {"type": "section", "fields": fields},
    ]
    if lines:
        body = "\n".join(lines)
        blocks.append({"type": "section", "text": {
            "type": "mrkdwn", "text": body if len(body) <= SLACK_SECTION
            else body[:SLACK_SECTION - 1] + "…"}})
    return {"text": f"{icon} {_mrkdwn(note.summary, 1000)}", "blocks": blocks}


def status_description(note: Notification) -> str:
    text = safe(note.summary, 1000)
    return text if len(text) <= STATUS_DESCRIPTION else text[:STATUS_DESCRIPTION - 1] + "…"


# -- sinks ------------------------------------------------------------------------------


def _raise_for(response: httpx.Response, what: str) -> None:
    if response.is_success:
        return
    status = response.status_code
    # 408, 429 and 5xx may pass on a later attempt; any other 4xx will not.
    permanent = 400 <= status < 500 and status not in (408, 429)
    raise DeliveryError(f"{what} answered {status}", permanent=permanent)


@contextlib.asynccontextmanager
async def _deadline(seconds: float, what: str) -> AsyncIterator[None]:
    """One request, bounded as a whole: the client's timeout bounds each read, so an
    answer trickled a byte at a time would hold the delivery for as long as it lasts."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise DeliveryError(f"{what}: no complete answer within {seconds:g}s") from None


async def _post(url: str, *, timeout: float, what: str, headers: Mapping[str, str],
                content: bytes) -> None:
    try:
        async with _deadline(timeout, what), httpx.AsyncClient(
                timeout=timeout, trust_env=False, follow_redirects=False) as client:
            response = await client.post(url, headers=dict(headers), content=content)
    except httpx.HTTPError as exc:
        raise DeliveryError(f"{what}: {type(exc).__name__}: {safe(exc, 200)}") from None
    _raise_for(response, what)


@dataclass
class WebhookSink:
    name: str
    kinds: frozenset[Kind]
    url: str
    token: str | None = None
    kind: str = "webhook"
    #: the CloudEvent ids this sink took: a retry sends only those it did not
    delivered: set[str] = field(default_factory=set)

    async def send(self, note: Notification, timeout: float) -> None:
        source = f"reconcile/{note.environment}"
        for headers, body in cloudevents(note, source):
            ident = headers.get("ce-id", "")
            if ident in self.delivered:
                continue
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            headers["User-Agent"] = f"reconcile/{__version__}"
            await _post(self.url, timeout=timeout, what=f"webhook {self.name}",
                        headers=headers, content=body)
            self.delivered.add(ident)


@dataclass
class SlackSink:
    name: str
    kinds: frozenset[Kind]
    url: str
    kind: str = "slack"

    async def send(self, note: Notification, timeout: float) -> None:
        body = json.dumps(slack_message(note), ensure_ascii=False).encode()
        await _post(self.url, timeout=timeout, what=f"slack {self.name}",
                    headers={"Content-Type": "application/json"}, content=body)


@dataclass
class GitHubSink:
    name: str
    kinds: frozenset[Kind]
    api_url: str
    repository: str
    token: str
    context: str | None = None
    deployments: bool = False
    target_url: str | None = None
    kind: str = "github"
    #: commit + environment -> the deployment made for it (this process)
    _deployment_ids: dict[str, int] = field(default_factory=dict)

    async def send(self, note: Notification, timeout: float) -> None:
        from githubkit import GitHub
        from githubkit.exception import GitHubException, RequestFailed

        from reconciler.shell.github import _HEADERS, GitHubError, check_api_url

        try:
            base = check_api_url(self.api_url, with_token=True)
        except GitHubError as exc:
            raise DeliveryError(f"github: {exc}", permanent=True) from None
        owner, repo = self.repository.split("/", 1)
        spec = note.spec
        github: GitHub[Any] = GitHub(self.token, base_url=base + "/", timeout=timeout,
                                     user_agent=f"reconcile/{__version__}",
                                     http_cache=False, auto_retry=False)
        what = f"github {self.repository}"
        try:
            async with github:
                status: Any = {"state": spec.commit_state,
                               "context": self.context or f"reconcile/{note.environment}",
                               "description": status_description(note)}
                # A proposed revert's status links its pull request (what to review).
                target = self.target_url or (note.revert.pull_url if note.revert else None)
                if target:
                    status["target_url"] = target
                # Each request bounded as a whole (``_deadline``), as for the webhooks.
                async with _deadline(timeout, what):
                    await github.rest.repos.async_create_commit_status(
                        owner, repo, note.commit, data=status, headers=_HEADERS)
                if self.deployments and spec.deployment_state is not None:
                    deployment = await self._deployment(github, owner, repo, note, timeout)
                    state: Any = {"state": spec.deployment_state,
                                  "description": status_description(note),
                                  "environment": note.environment}
                    async with _deadline(timeout, what):
                        await github.rest.repos.async_create_deployment_status(
                            owner, repo, deployment, data=state, headers=_HEADERS)
        except RequestFailed as exc:
            _raise_for(exc.response.raw_response, what)
        except GitHubException as exc:
            cause = getattr(exc, "exc", exc)
            raise DeliveryError(f"{what}: {type(cause).__name__}: "
                                f"{safe(cause, 200)}") from None

    async def _deployment(self, github: Any, owner: str, repo: str,
                          note: Notification, timeout: float) -> int:
        """The deployment of this commit to this environment: made once, found again
        (by listing) after a restart."""
        from reconciler.shell.github import _HEADERS

        key = f"{note.commit}@{note.environment}"
        if key in self._deployment_ids:
            return self._deployment_ids[key]
        what = f"github {self.repository}"
        async with _deadline(timeout, what):
            listed = await github.rest.repos.async_list_deployments(
                owner, repo, sha=note.commit, environment=note.environment,
                headers=_HEADERS)
        found = [d for d in listed.json() if isinstance(d, dict) and isinstance(d.get("id"), int)]
        if found:
            ident = int(found[0]["id"])
        else:
            async with _deadline(timeout, what):
                made = await github.rest.repos.async_create_deployment(
                    owner, repo, ref=note.commit, environment=note.environment,
                    auto_merge=False, required_contexts=[], task="deploy",
                    description=status_description(note), headers=_HEADERS)
            ident = int(made.json()["id"])
        self._deployment_ids[key] = ident
        return ident


# -- delivery ---------------------------------------------------------------------------


@dataclass
class Failure:
    sink: str
    kind: Kind
    commit: str
    message: str


class Deliveries:
    """Each (notification, sink) delivered by one task on the running loop, retried
    ``attempts`` times with the wait doubling from ``backoff``; never raises."""

    def __init__(self, targets: list[Sink], delivery: Delivery, *,
                 count: Counter | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.targets = targets
        self.delivery = delivery
        self.count = count or (lambda sink, result: None)
        self.sleep = sleep
        self.tasks: set[asyncio.Task[None]] = set()
        #: what each task in flight delivers: a delivery given up at the drain is named
        self.inflight: dict[asyncio.Task[None], tuple[Sink, Notification]] = {}
        self.failures: list[Failure] = []
        self.delivered = 0

    def submit(self, notes: Iterable[Notification]) -> None:
        loop = asyncio.get_running_loop()
        for note in notes:
            for sink in self.targets:
                if note.kind in sink.kinds:
                    task = loop.create_task(self._deliver(sink, note))
                    self.tasks.add(task)
                    self.inflight[task] = (sink, note)
                    task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.inflight.pop(task, None)

    async def _deliver(self, sink: Sink, note: Notification) -> None:
        wait = self.delivery.backoff_seconds
        message = "not attempted"
        for attempt in range(1, self.delivery.attempts + 1):
            try:
                # Each request has its own deadline; this bounds the attempt as a whole
                # (a webhook sends one event per released service, GitHub up to four).
                await asyncio.wait_for(sink.send(note, self.delivery.timeout_seconds),
                                       self.delivery.timeout_seconds
                                       * (4 + len(note.cdevent_types())))
            except DeliveryError as exc:
                message = str(exc)
                if exc.permanent:
                    break
            except TimeoutError:
                message = f"no answer within {self.delivery.timeout_seconds:g}s"
            except Exception as exc:  # a sink's bug must not reach an apply
                message = f"{type(exc).__name__}: {exc}"
            else:
                self.delivered += 1
                self.count(sink.kind, "delivered")
                return
            if attempt < self.delivery.attempts:
                self.count(sink.kind, "retried")
                await self.sleep(wait)
                wait *= 2
        self._failed(sink, note, message)

    def _failed(self, sink: Sink, note: Notification, message: str) -> None:
        """Given up: counted (``result="failed"``, what the documented alert watches),
        kept, and logged naming the sink, the kind and the commit."""
        self.count(sink.kind, "failed")
        failure = Failure(sink.name, note.kind, note.commit, safe(message, 300))
        self.failures.append(failure)
        log.warning("notify: %s: %s of commit %s not delivered: %s", sink.name,
                    note.kind.value, note.commit[:12], failure.message,
                    extra={"event": "notify-failed",
                           "fields": {"sink": sink.name, "sink_kind": sink.kind,
                                      "kind": note.kind.value, "commit": note.commit}})

    async def drain(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the deliveries in flight; give up the rest, each
        named and counted as failed like a delivery out of attempts."""
        pending = set(self.tasks)
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=seconds)
        given_up = [(task, self.inflight.get(task)) for task in late]
        for task in late:
            task.cancel()
        if not late:
            return
        ended = await asyncio.gather(*late, return_exceptions=True)
        for (_task, what), result in zip(given_up, ended, strict=True):
            if what is None or not isinstance(result, asyncio.CancelledError):
                continue  # it ended on its own meanwhile, and was counted then
            sink, note = what
            self._failed(sink, note, f"given up at the drain after {seconds:g}s "
                         "(still being delivered or retried)")


class MemoryFile:
    """``notifications.json`` in the state directory: the memory of what was sent."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Memory:
        try:
            if not self.path.is_file() or self.path.stat().st_size > 4 * 1024 * 1024:
                return Memory()
            return Memory.from_json(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return Memory()

    def save(self, memory: Memory) -> None:
        """Atomically (a crash leaves the old file or the new one); a failure is logged:
        at worst a restart says something again."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".notifications.", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(memory.to_json(), handle)
            os.replace(tmp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)
            log.warning("notify: cannot record what was sent in %s: %s", self.path,
                        exc.strerror or exc)


class Notifier:
    """One repo's notifications: decide (``core.notifying``), remember, deliver."""

    def __init__(self, config: Notifications, targets: list[Sink], state: Path, *,
                 environment: str, applying: bool = False,
                 count: Counter | None = None) -> None:
        self.config = config
        self.environment = environment
        self.applying = applying
        self.memory = MemoryFile(state / STATE_FILE)
        self.deliveries = Deliveries(targets, config.delivery, count=count)
        wanted = config.on
        self.kinds = frozenset(Kind) if wanted is None else notifying.subscribed(wanted)

    @classmethod
    def build(cls, settings: Settings, state: Path, env: Mapping[str, str], *,
              gateway: str, applying: bool = False,
              count: Counter | None = None) -> Notifier | None:
        """None without a ``notifications`` section or any usable sink; each sink whose
        secret is missing is said once (logged) and left out."""
        config = settings.notifications
        if config is None:
            return None
        targets, problems = sinks(config, env)
        for problem in problems:
            log.warning("notify: %s; that sink is left out", safe(problem, 300))
        if not targets:
            return None
        return cls(config, targets, state, environment=config.environment or gateway,
                   applying=applying, count=count)

    def outcome(self, plan: Plan, report: ApplyReport | None = None) -> tuple[Notification, ...]:
        """Decide what ``plan`` (and the apply's ``report``) earns, remember it, and start
        delivering it in the background (needs a running loop). Returns what is new."""
        memory = self.memory.load()
        return self._deliver(memory, notifying.decide(
            memory, plan, environment=self.environment, report=report,
            applying=self.applying))

    def way_back(self, failed: Plan, gate: GateReport | None,
                 way: WayBack) -> tuple[Notification, ...]:
        """As ``outcome``, for what ``--on-gate-failure revert`` did after ``failed``'s
        gate (``core.notifying.decide_way_back``)."""
        memory = self.memory.load()
        return self._deliver(memory, notifying.decide_way_back(
            memory, failed, gate, way, environment=self.environment))

    def _deliver(self, memory: Memory, decision: notifying.Decision,
                 ) -> tuple[Notification, ...]:
        if decision.memory != memory:
            self.memory.save(decision.memory)
        new = tuple(n for n in decision.new if n.kind in self.kinds)
        if new:
            self.deliveries.submit(new)
        return new

    async def drain(self) -> None:
        await self.deliveries.drain(self.config.delivery.drain_seconds)


def prometheus_counter(registry: Any) -> Counter:
    """``reconcile_notifications_total{sink, result}`` on ``registry``; every label pair
    starts at 0 so a first failure is a rate, not a new series."""
    from prometheus_client import Counter as PromCounter

    counter = PromCounter("reconcile_notifications", "notification deliveries by sink "
                          "(webhook, slack, github) and result (delivered, retried: one "
                          "more attempt after a failed one, failed: given up)",
                          ["sink", "result"], registry=registry)
    for sink in ("webhook", "slack", "github"):
        for result in ("delivered", "retried", "failed"):
            counter.labels(sink=sink, result=result)

    def count(sink: str, result: str) -> None:
        counter.labels(sink=sink, result=result).inc()

    return count
