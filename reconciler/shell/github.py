"""GitHub's issue-comment REST endpoints: list, create, update, delete. The client side of
``reconcile comment``.

Built on ``githubkit`` (typed, httpx-based, maintained; its paginator follows ``Link``
headers, so an absolute ``next`` URL, e.g. ``/repositories/ID/…`` or an Enterprise host's
``/api/v3/…``, is followed as GitHub gives it). What this module sets on it, and why:

- ``http_cache=False``: the re-list made after writing (the step that finds a
  concurrent run's duplicates) must come from the server. githubkit's default hishel
  cache did not serve a stale list in a measurement against the stand-in with GitHub's
  ``Cache-Control: private, max-age=60`` (a shared cache does not store authorised
  replies), but a run makes a handful of calls and gains nothing from one, so it is off.
- ``auto_retry=BoundedRetry(...)``: githubkit's default retries a rate-limited request
  once after however long GitHub asks (a primary limit's reset can be an hour away) and
  logs through ``logging``. Ours retries a secondary rate limit (403/429 with
  ``Retry-After``, or GitHub's "secondary rate limit" message, which means "wait at least a
  minute") and 5xx on idempotent methods, within one total wait budget for the whole
  command, and reports each wait through ``on_wait``. A POST is not retried on 5xx: it may
  have been applied; the caller's duplicate sweep handles that.
- ``X-GitHub-Api-Version: 2022-11-28`` on every call: the installed schema namespace would
  send a newer version, which older GitHub Enterprise Server releases reject; these four
  endpoints are the same in both.
- Replies are read as JSON (``id``, ``body``, ``user.login``/``type``, ``html_url``) rather
  than through githubkit's pydantic models, which require every documented field: an
  Enterprise server of another release, or a stand-in, may omit one we never use.

Errors become ``GitHubError`` with the method, the path, the status and GitHub's own
``message`` (made safe); the token is never in one: messages are built here, passed
through ``redact``, and raised ``from None`` so no chained exception (whose request holds
the ``Authorization`` header) travels with them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from githubkit import GitHub
from githubkit.exception import (
    GitHubException,
    PrimaryRateLimitExceeded,
    RateLimitExceeded,
    RequestFailed,
    RequestTimeout,
)
from githubkit.retry import RetryOption

from reconciler import __version__
from reconciler.core.comments import Comment
from reconciler.core.sanitize import register_secret, safe

API_VERSION = "2022-11-28"
DEFAULT_API_URL = "https://api.github.com"
BODY_LIMIT = 65_536  # GitHub: "Body is too long (maximum is 65536 characters)"
_SECONDARY = re.compile(r"secondary rate limit", re.IGNORECASE)
_HEADERS = {"X-GitHub-Api-Version": API_VERSION}


class GitHubError(Exception):
    """A failed GitHub call, described without the token."""

    def __init__(self, message: str, status: int | None = None, *,
                 body_too_long: bool = False, rate_limited: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.body_too_long = body_too_long
        self.rate_limited = rate_limited


def redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def check_api_url(api_url: str, *, with_token: bool) -> str:
    """The base URL, normalised; a token is never sent in clear text off this machine."""
    try:
        parts = urlsplit(api_url)
        host = parts.hostname  # raises for a malformed authority (e.g. "http://[::1")
    except ValueError:
        raise GitHubError("the GitHub API URL is malformed: must be http(s)://HOST[/PATH]") \
            from None
    if parts.scheme not in ("https", "http") or not host:
        raise GitHubError(f"the GitHub API URL must be http(s)://HOST[/PATH], got {safe(api_url)}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise GitHubError("the GitHub API URL must carry no credentials, query or fragment")
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    if parts.scheme == "http" and with_token and not loopback:
        raise GitHubError(f"refusing to send the token over plain http to {safe(host)}"
                          " (use https)")
    return api_url.rstrip("/")


@dataclass
class BoundedRetry:
    """githubkit's retry decision: secondary rate limits and idempotent 5xx, one budget.

    ``budget`` is the total number of seconds this client may spend waiting; a wait that
    would overrun it is not taken and the request fails with GitHub's reason instead.
    """

    budget: float = 120.0
    max_attempts: int = 5
    on_wait: Callable[[float, str], None] | None = None
    waited: float = field(default=0.0, init=False)

    def __call__(self, exc: GitHubException, retry_count: int) -> RetryOption:
        if retry_count >= self.max_attempts or not isinstance(exc, RequestFailed):
            return RetryOption(False)
        status = exc.response.status_code
        method = exc.request.method
        wait: float | None = None
        why = ""
        if isinstance(exc, RateLimitExceeded) and not isinstance(exc, PrimaryRateLimitExceeded):
            wait, why = exc.retry_after.total_seconds(), "secondary rate limit"
        elif isinstance(exc, PrimaryRateLimitExceeded):
            wait, why = exc.retry_after.total_seconds(), "rate limit"
        elif status in (403, 429) and _SECONDARY.search(_message(exc.response.raw_response)):
            wait, why = 60.0, "secondary rate limit"  # GitHub: wait at least one minute
        elif status >= 500 and method in ("GET", "PATCH", "DELETE"):
            wait, why = float(2 ** retry_count), f"server error {status}"
        if wait is None or self.waited + wait > self.budget:
            return RetryOption(False)
        wait = max(wait, 0.0)
        self.waited += wait
        if self.on_wait is not None:
            self.on_wait(wait, why)
        return RetryOption(True, timedelta(seconds=wait))


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    message = str(data.get("message", ""))
    details = [str(e.get("message", "")) for e in data.get("errors") or ()
               if isinstance(e, dict) and e.get("message")]
    return "; ".join([message, *details]) if details else message


def _comment(data: Any) -> Comment:
    if not isinstance(data, dict) or not isinstance(data.get("id"), int):
        raise GitHubError("GitHub answered with something that is not an issue comment")
    user = data.get("user") if isinstance(data.get("user"), dict) else {}
    assert isinstance(user, dict)
    return Comment(id=data["id"], body=str(data.get("body") or ""),
                   author=str(user.get("login") or ""),
                   author_is_bot=user.get("type") == "Bot",
                   url=str(data.get("html_url") or ""))


class CommentsClient:
    """One repository's issue comments, through one githubkit client."""

    def __init__(self, api_url: str, repo: str, token: str | None, *,
                 wait_budget: float = 120.0, timeout: float = 30.0,
                 on_wait: Callable[[float, str], None] | None = None) -> None:
        self.api_url = check_api_url(api_url, with_token=bool(token))
        owner, sep, name = repo.partition("/")
        if not sep or not owner or not name or "/" in name:
            raise GitHubError(f"a repository is OWNER/NAME, got {safe(repo)}")
        self.owner, self.name = owner, name
        self._token = token or None
        register_secret(self._token)  # never printed, whichever output a reply reaches
        self.retry = BoundedRetry(budget=wait_budget, on_wait=on_wait)
        self._github: GitHub[Any] = GitHub(
            self._token, base_url=self.api_url + "/", user_agent=f"reconcile/{__version__}",
            timeout=timeout, http_cache=False, auto_retry=self.retry)

    @property
    def authenticated(self) -> bool:
        return self._token is not None

    # -- the four endpoints ---------------------------------------------------------

    def list_comments(self, number: int) -> list[Comment]:
        """Every comment on the issue or PR, all pages, ascending id."""
        what = f"GET /repos/{self.owner}/{self.name}/issues/{number}/comments"
        with self._errors(what):
            pages = self._github.rest.paginate(
                self._github.rest.issues.list_comments, map_func=lambda r: list(r.json()),
                owner=self.owner, repo=self.name, issue_number=number, per_page=100,
                headers=_HEADERS)
            return sorted((_comment(item) for item in pages), key=lambda c: c.id)

    def create(self, number: int, body: str) -> Comment:
        what = f"POST /repos/{self.owner}/{self.name}/issues/{number}/comments"
        with self._errors(what):
            reply = self._github.rest.issues.create_comment(
                self.owner, self.name, number, body=body, headers=_HEADERS)
            return _comment(reply.json())

    def update(self, comment_id: int, body: str) -> Comment:
        what = f"PATCH /repos/{self.owner}/{self.name}/issues/comments/{comment_id}"
        with self._errors(what):
            reply = self._github.rest.issues.update_comment(
                self.owner, self.name, comment_id, body=body, headers=_HEADERS)
            return _comment(reply.json())

    def delete(self, comment_id: int) -> bool:
        """Delete a comment; False when it was already gone (a concurrent run's sweep)."""
        what = f"DELETE /repos/{self.owner}/{self.name}/issues/comments/{comment_id}"
        try:
            with self._errors(what):
                self._github.rest.issues.delete_comment(
                    self.owner, self.name, comment_id, headers=_HEADERS)
        except GitHubError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def identity(self) -> str | None:
        """The token's login, or None when GitHub will not say (an Actions or App
        installation token gets 403 from ``GET /user``); no token: None."""
        if self._token is None:
            return None
        try:
            with self._errors("GET /user"):
                reply = self._github.rest.users.get_authenticated(headers=_HEADERS)
                data = reply.json()
        except GitHubError as exc:
            if exc.status in (403, 404) and not exc.rate_limited:
                return None
            raise
        login = data.get("login") if isinstance(data, dict) else None
        return str(login) if login else None

    def __enter__(self) -> CommentsClient:
        # Inside ``with`` githubkit keeps one httpx client (one connection) for every call.
        self._github.__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._github.__exit__(*exc_info)  # type: ignore[arg-type]

    # -- errors ---------------------------------------------------------------------

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except RequestFailed as exc:
            raise self._failed(what, exc.response.raw_response) from None
        except RequestTimeout:
            raise GitHubError(redact(f"{what}: GitHub at {self.api_url} did not answer in time",
                                     self._token)) from None
        except GitHubException as exc:
            cause = getattr(exc, "exc", exc)
            raise GitHubError(redact(
                f"{what}: cannot reach GitHub at {self.api_url}: "
                f"{safe(type(cause).__name__)}: {safe(cause)}", self._token)) from None
        except httpx.HTTPError as exc:
            raise GitHubError(redact(f"{what}: {safe(type(exc).__name__)}: {safe(exc)}",
                                     self._token)) from None
        except (ValueError, TypeError) as exc:
            raise GitHubError(redact(f"{what}: unreadable reply from GitHub: {safe(exc)}",
                                     self._token)) from None

    def _failed(self, what: str, response: httpx.Response) -> GitHubError:
        status = response.status_code
        message = safe(_message(response) or response.reason_phrase, 500)
        hint = ""
        limited = status in (403, 429) and (
            "Retry-After" in response.headers or bool(_SECONDARY.search(message))
            or response.headers.get("X-RateLimit-Remaining") == "0")
        if status == 401:
            hint = " (the token is missing, expired or wrong)"
        elif limited:
            asked = safe(response.headers.get("Retry-After", "60"), 20)
            hint = (f" (rate limited; GitHub asked to wait {asked}s,"
                    f" over the {self.retry.budget:g}s wait budget)")
        elif status == 403:
            hint = " (the token needs permission to write pull-request/issue comments)"
        elif status == 404:
            hint = " (no such repository, pull request or comment, or the token cannot see it)"
        too_long = status == 422 and "too long" in message.lower()
        text = f"{what}: GitHub answered {status}: {message}{hint}"
        return GitHubError(redact(text, self._token), status, body_too_long=too_long,
                           rate_limited=limited)


def pr_from_event(event: Any) -> int | None:
    """The pull request number in a GitHub Actions event payload (``GITHUB_EVENT_PATH``):
    ``pull_request``/``pull_request_target`` events, or an ``issue_comment`` on a PR."""
    if not isinstance(event, dict):
        return None
    pull = event.get("pull_request")
    if isinstance(pull, dict) and isinstance(pull.get("number"), int):
        return int(pull["number"])
    issue = event.get("issue")
    if isinstance(issue, dict) and "pull_request" in issue and isinstance(issue.get("number"), int):
        return int(issue["number"])
    return None

