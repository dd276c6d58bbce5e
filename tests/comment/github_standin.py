"""A stand-in for GitHub's issue-comment REST endpoints: real HTTP on 127.0.0.1.

Implements the documented shapes (docs.github.com/rest/issues/comments) that
``reconcile comment`` uses:

- ``GET  {prefix}/repos/{o}/{r}/issues/{n}/comments?per_page=&page=``: ascending id,
  ``per_page`` default 30, max 100; a ``Link`` header with ``next``/``last``/``prev``/
  ``first`` as GitHub writes it (absolute URLs over ``/repositories/{id}/…``, which is
  served too); ``ETag`` and ``Cache-Control: private, max-age=60, s-maxage=60``.
- ``POST {prefix}/repos/{o}/{r}/issues/{n}/comments`` ``{"body": …}`` → 201.
- ``PATCH``/``DELETE {prefix}/repos/{o}/{r}/issues/comments/{id}`` → 200 / 204.
- ``GET {prefix}/user`` → the token's user; 403 for an installation token.
- A read-only token (a pull request from a fork): every write is 403 ``Resource not
  accessible by integration``.
- Errors as ``{"message", "documentation_url"[, "errors"]}``: 401 ``Bad credentials``
  (or ``Requires authentication`` for a write without a token), 403 for editing someone
  else's comment, 404 for an unknown repo/PR/comment, 422 for a body over 65,536
  characters, and a secondary rate limit (403 + ``Retry-After``) on demand.

- ``POST {prefix}/repos/{o}/{r}/statuses/{sha}`` (commit statuses: ``state`` one of
  error/failure/pending/success, ``description`` at most 140 characters, else 422), ``GET
  {prefix}/repos/{o}/{r}/deployments?sha=&environment=``, ``POST .../deployments`` and
  ``POST .../deployments/{id}/statuses``: what ``reconcile``'s notifications write.
- ``GET {prefix}/repos/{o}/{r}/commits/{sha}/pulls`` and ``GET
  {prefix}/repos/{o}/{r}/actions/workflows/{file}/runs?head_sha=&event=&status=``: what
  the apply-on-merge workflow asks to find the run that planned the merged PR.

- ``GET``/``PATCH {prefix}/repos/{o}/{r}/pulls/{n}`` (``state``, ``title``, ``body``):
  what closing a superseded promotion's pull request asks.
- ``GET {prefix}/repos/{o}/{r}/pulls?state=&head=OWNER:BRANCH&base=`` and ``POST
  {prefix}/repos/{o}/{r}/pulls`` ``{"title", "head", "base", "body"}`` → 201, or 422
  ``A pull request already exists for OWNER:BRANCH.`` as GitHub words it; when
  ``State.git_remote`` is set the head branch must exist there (422 otherwise). A created
  pull request takes the next issue number and accepts comments.

- ``GET {prefix}/repos/{o}/{r}/branches/{branch}`` → ``{"name", "commit": {"sha"},
  "protected", "protection": {"enabled", ...}, "protection_url"}`` as GitHub answers a
  reader; 404 ``Branch not found`` for a branch ``State.git_remote`` does not have (when
  set). ``StandIn.protect(branch)`` protects one: the endpoint says so, and the remote's
  ``pre-receive`` hook refuses a push to it as GitHub does (``GH006: Protected branch
  update failed``).

``prefix`` is ``""`` (github.com) or ``"/api/v3"`` (GitHub Enterprise Server). Every request
is logged with its arrival time, so tests can check that a retry came after the wait.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DOCS = "https://docs.github.com/rest/issues/comments"
#: What ``_written`` returns when it has sent the reply itself.
_ANSWERED: Any = object()
LIMIT = 65_536
REPO_ID = 4242


@dataclass
class User:
    login: str
    id: int
    type: str = "User"  # "Bot" for github-actions[bot] and App installations
    installation: bool = False  # GET /user → 403 "Resource not accessible by integration"
    read_only: bool = False  # a fork PR's token: every write → 403, as GitHub answers it


@dataclass
class Logged:
    method: str
    path: str
    at: float
    status: int = 0
    authorization: str | None = None


@dataclass
class State:
    owner: str = "acme"
    repo: str = "fleet"
    pulls: set[int] = field(default_factory=lambda: {7})
    tokens: dict[str, User] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_id: int = 1000
    log: list[Logged] = field(default_factory=list)
    # (method, seconds): the next request with that method gets a secondary rate limit.
    rate_limits: list[tuple[str, int]] = field(default_factory=list)
    rate_limited_at: list[tuple[str, float, int]] = field(default_factory=list)
    # Hold the first ``parties`` list requests until all have arrived (forces two runs to
    # see the same comments before either writes); later lists pass straight through.
    list_barrier: threading.Barrier | None = None
    barrier_uses: int = 0
    limit: int = LIMIT  # a server that counts differently (or a lower Enterprise limit)
    # For the apply-on-merge workflow: PRs as ``GET /repos/o/r/commits/{sha}/pulls`` lists
    # them (number, head.sha, merge_commit_sha, merged_at) and workflow runs as ``GET
    # /repos/o/r/actions/workflows/{file}/runs`` lists them (newest first).
    pull_info: dict[int, dict[str, Any]] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    # Commit statuses, deployments and deployment statuses, in the order they were made.
    statuses: list[dict[str, Any]] = field(default_factory=list)
    deployments: list[dict[str, Any]] = field(default_factory=list)
    deployment_statuses: list[dict[str, Any]] = field(default_factory=list)
    # Pull requests opened through ``POST /repos/o/r/pulls`` (by number), and the bare
    # repository that stands for the GitHub-side git remote (checked for the head branch).
    pull_requests: dict[int, dict[str, Any]] = field(default_factory=dict)
    git_remote: str | None = None
    # Branches protected on "GitHub" (``StandIn.protect``).
    protected: set[str] = field(default_factory=set)


class StandIn:
    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix.rstrip("/")
        self.state = State()
        self.lock = threading.RLock()
        handler = type("Handler", (_Handler,), {"standin": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_url(self) -> str:
        return self.base + self.prefix

    def start(self) -> StandIn:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- test helpers -------------------------------------------------------------------

    def add_user(self, token: str, login: str, *, bot: bool = False,
                 installation: bool = False, read_only: bool = False) -> User:
        user = User(login, 500 + len(self.state.tokens), "Bot" if bot else "User",
                    installation, read_only)
        self.state.tokens[token] = user
        return user

    def protect(self, branch: str) -> None:
        """Protect ``branch``: the branches endpoint says ``protected: true``, and the git
        remote (``State.git_remote``, when set) refuses any push to it, in GitHub's words."""
        with self.lock:
            self.state.protected.add(branch)
            remote = self.state.git_remote
            names = sorted(self.state.protected)
        if remote is None:
            return
        hook = Path(remote) / "hooks" / "pre-receive"
        refs = " ".join(f"refs/heads/{n}" for n in names)
        hook.write_text(
            "#!/bin/sh\n"
            "while read old new ref; do\n"
            f"  for p in {refs}; do\n"
            '    if [ "$ref" = "$p" ]; then\n'
            '      echo "error: GH006: Protected branch update failed for $ref." >&2\n'
            '      echo "error: Changes must be made through a pull request." >&2\n'
            "      exit 1\n"
            "    fi\n"
            "  done\n"
            "done\n"
            "exit 0\n")
        hook.chmod(0o755)

    def seed(self, pr: int, body: str, login: str, *, bot: bool = False) -> int:
        with self.lock:
            user = next((u for u in self.state.tokens.values() if u.login == login),
                        User(login, 900, "Bot" if bot else "User"))
            return self._create(pr, body, user)["id"]

    def comments_on(self, pr: int) -> list[dict[str, Any]]:
        with self.lock:
            return sorted((dict(c) for c in self.state.comments.values()
                           if c["_pr"] == pr), key=lambda c: c["id"])

    def requests(self, method: str | None = None) -> list[Logged]:
        with self.lock:
            return [e for e in self.state.log if method is None or e.method == method]

    # -- the model ------------------------------------------------------------------------

    def _create(self, pr: int, body: str, user: User) -> dict[str, Any]:
        self.state.next_id += 1
        cid = self.state.next_id
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        o, r = self.state.owner, self.state.repo
        comment = {
            "id": cid, "node_id": f"IC_{cid}",
            "url": f"{self.api_url}/repos/{o}/{r}/issues/comments/{cid}",
            "html_url": f"https://github.example/{o}/{r}/pull/{pr}#issuecomment-{cid}",
            "issue_url": f"{self.api_url}/repos/{o}/{r}/issues/{pr}",
            "body": body,
            "user": {"login": user.login, "id": user.id, "type": user.type,
                     "node_id": f"U_{user.id}", "site_admin": False},
            "created_at": now, "updated_at": now,
            "author_association": "NONE" if user.type == "Bot" else "MEMBER",
            "_pr": pr,
        }
        self.state.comments[cid] = comment
        return comment


def public(comment: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in comment.items() if not k.startswith("_")}


class _Handler(BaseHTTPRequestHandler):
    standin: StandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- plumbing ---------------------------------------------------------------------------

    def _reply(self, status: int, payload: Any = None,
               headers: dict[str, str] | None = None) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-GitHub-Media-Type", "github.v3; format=json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self._entry.status = status

    def _error(self, status: int, message: str, **extra: Any) -> None:
        headers = extra.pop("headers", None)
        self._reply(status, {"message": message, "documentation_url": DOCS,
                             "status": str(status), **extra}, headers)

    def _handle(self, method: str) -> None:
        s = self.standin
        split = urlsplit(self.path)
        self._entry = Logged(method, self.path, time.monotonic(),
                             authorization=self.headers.get("Authorization"))
        with s.lock:
            s.state.log.append(self._entry)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not split.path.startswith(s.prefix + "/"):
            return self._error(404, "Not Found")
        path = split.path[len(s.prefix):]
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}

        with s.lock:
            for i, (m, seconds) in enumerate(s.state.rate_limits):
                if m == method:
                    del s.state.rate_limits[i]
                    s.state.rate_limited_at.append((method, time.monotonic(), seconds))
                    return self._error(
                        403, "You have exceeded a secondary rate limit. Please wait a few "
                        "minutes before you try again.",
                        headers={"Retry-After": str(seconds)})

        user = self._user()
        if user is False:
            return self._error(401, "Bad credentials")
        parts = path.strip("/").split("/")
        o, r = s.state.owner, s.state.repo
        if isinstance(user, User) and user.read_only and method != "GET":
            return self._error(403, "Resource not accessible by integration")

        if parts == ["user"] and method == "GET":
            if user is None:
                return self._error(401, "Requires authentication")
            if user.installation:
                return self._error(403, "Resource not accessible by integration")
            return self._reply(200, {"login": user.login, "id": user.id, "type": user.type})

        if (method == "GET" and len(parts) == 6 and parts[:3] == ["repos", o, r]
                and parts[3] == "commits" and parts[5] == "pulls"):
            sha = parts[4]
            return self._reply(200, [dict(p, number=n) for n, p in sorted(
                s.state.pull_info.items()) if sha in (p.get("merge_commit_sha"),
                                                      p["head"]["sha"])])
        if (method == "GET" and len(parts) == 7 and parts[:3] == ["repos", o, r]
                and parts[3:5] == ["actions", "workflows"] and parts[6] == "runs"):
            def matches(run: dict[str, Any]) -> bool:
                wanted = {k: v for k, v in query.items() if k in ("head_sha", "event")}
                status = query.get("status")  # GitHub matches a status or a conclusion
                return (all(run.get(k) == v for k, v in wanted.items())
                        and status in (None, run.get("status"), run.get("conclusion")))

            runs = [run for run in reversed(s.state.runs)
                    if run["path"].endswith("/" + parts[5]) and matches(run)]
            return self._reply(200, {"total_count": len(runs), "workflow_runs": runs})
        if len(parts) >= 4 and parts[:3] == ["repos", o, r] \
                and parts[3] in ("statuses", "deployments"):
            return self._deployments(method, parts[3:], raw, query, user)
        if len(parts) == 4 and parts[:3] == ["repos", o, r] and parts[3] == "pulls":
            return self._pulls(method, query, raw, user)
        if len(parts) == 5 and parts[:4] == ["repos", o, r, "pulls"] and parts[4].isdigit():
            return self._pull(method, int(parts[4]), raw, user)
        if len(parts) == 5 and parts[:4] == ["repos", o, r, "branches"] and method == "GET":
            return self._branch(parts[4])
        number: int | None = None
        if (len(parts) == 6 and parts[:3] == ["repos", o, r] and parts[3] == "issues"
                and parts[5] == "comments"):
            number = int(parts[4]) if parts[4].isdigit() else None
        elif (len(parts) == 5 and parts[:2] == ["repositories", str(REPO_ID)]
              and parts[2] == "issues" and parts[4] == "comments" and method == "GET"):
            number = int(parts[3]) if parts[3].isdigit() else None
        if number is not None:
            if number not in s.state.pulls:
                return self._error(404, "Not Found")
            if method == "GET":
                return self._list(number, query)
            if method == "POST":
                if user is None:
                    return self._error(401, "Requires authentication")
                body = self._body(raw)
                if body is None:
                    return None
                with s.lock:
                    created = s._create(number, body, user)
                return self._reply(201, public(created), {"Location": created["url"]})
            return self._error(404, "Not Found")

        if (len(parts) == 6 and parts[:3] == ["repos", o, r]
                and parts[3:5] == ["issues", "comments"] and parts[5].isdigit()):
            cid = int(parts[5])
            with s.lock:
                comment = s.state.comments.get(cid)
            if comment is None:
                return self._error(404, "Not Found")
            if method == "GET":
                return self._reply(200, public(comment))
            if user is None:
                return self._error(401, "Requires authentication")
            if comment["user"]["login"] != user.login:
                return self._error(403, "Resource not accessible by integration")
            if method == "PATCH":
                body = self._body(raw)
                if body is None:
                    return None
                with s.lock:
                    comment["body"] = body
                    comment["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                return self._reply(200, public(comment))
            if method == "DELETE":
                with s.lock:
                    s.state.comments.pop(cid, None)
                return self._reply(204)
        return self._error(404, "Not Found")

    def _deployments(self, method: str, parts: list[str], raw: bytes, query: dict[str, str],
                     user: User | None) -> None:
        """Commit statuses and deployments (docs.github.com/rest/commits/statuses,
        /rest/deployments): the fields GitHub validates, the replies' main fields."""
        s = self.standin
        if method == "POST" and user is None:
            return self._error(401, "Requires authentication")
        try:
            data = json.loads(raw or b"{}") if method == "POST" else {}
        except ValueError:
            return self._error(400, "Problems parsing JSON")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with s.lock:
            if parts[0] == "statuses" and len(parts) == 2 and method == "POST":
                if data.get("state") not in ("error", "failure", "pending", "success") or \
                        len(data.get("description") or "") > 140:
                    return self._error(422, "Validation Failed")
                status = {"id": len(s.state.statuses) + 1, "sha": parts[1],
                          "state": data["state"], "description": data.get("description"),
                          "context": data.get("context", "default"),
                          "target_url": data.get("target_url"), "created_at": now}
                s.state.statuses.append(status)
                return self._reply(201, status)
            if parts == ["deployments"] and method == "GET":
                found = [d for d in reversed(s.state.deployments)
                         if query.get("sha") in (None, d["sha"])
                         and query.get("environment") in (None, d["environment"])]
                return self._reply(200, found)
            if parts == ["deployments"] and method == "POST":
                if not isinstance(data.get("ref"), str):
                    return self._error(422, "Validation Failed")
                deployment = {"id": 7000 + len(s.state.deployments), "sha": data["ref"],
                              "ref": data["ref"], "task": data.get("task", "deploy"),
                              "environment": data.get("environment", "production"),
                              "description": data.get("description"), "created_at": now}
                s.state.deployments.append(deployment)
                return self._reply(201, deployment)
            if len(parts) == 3 and parts[0] == "deployments" and parts[2] == "statuses" \
                    and method == "POST" and parts[1].isdigit():
                if not any(d["id"] == int(parts[1]) for d in s.state.deployments):
                    return self._error(404, "Not Found")
                if data.get("state") not in ("error", "failure", "inactive", "in_progress",
                                             "queued", "pending", "success"):
                    return self._error(422, "Validation Failed")
                status = {"id": len(s.state.deployment_statuses) + 1,
                          "deployment_id": int(parts[1]), "state": data["state"],
                          "description": data.get("description"),
                          "environment": data.get("environment"), "created_at": now}
                s.state.deployment_statuses.append(status)
                return self._reply(201, status)
        return self._error(404, "Not Found")
    def _pulls(self, method: str, query: dict[str, str], raw: bytes,
               user: User | bool | None) -> None:
        s = self.standin
        o = s.state.owner
        if method == "GET":
            state = query.get("state", "open")
            with s.lock:
                found = [p for _, p in sorted(s.state.pull_requests.items())
                         if state in ("all", p["state"])
                         and query.get("head") in (None, p["head"]["label"])
                         and query.get("base") in (None, p["base"]["ref"])]
            return self._reply(200, found)
        if method != "POST":
            return self._error(404, "Not Found")
        data = self._written(raw, user)
        if data is _ANSWERED:
            return None
        assert isinstance(user, User)
        if not isinstance(data, dict) or not all(
                isinstance(data.get(k), str) for k in ("head", "base", "title")):
            return self._error(422, "Validation Failed", errors=[{
                "resource": "PullRequest", "code": "missing_field", "field": "head"}])
        head, base = data["head"].split(":")[-1], data["base"]
        if s.state.git_remote is not None:
            out = subprocess.run(["git", "ls-remote", "--heads", s.state.git_remote,
                                  f"refs/heads/{head}"], capture_output=True, text=True,
                                 check=False).stdout
            if not out.strip():
                return self._error(422, "Validation Failed", errors=[{
                    "resource": "PullRequest", "field": "head", "code": "invalid"}])
        with s.lock:
            for p in s.state.pull_requests.values():
                if p["state"] == "open" and p["head"]["ref"] == head \
                        and p["base"]["ref"] == base:
                    return self._error(422, "Validation Failed", errors=[{
                        "resource": "PullRequest", "code": "custom",
                        "message": f"A pull request already exists for {o}:{head}."}])
            number = max([*s.state.pulls, *s.state.pull_requests, 0]) + 1
            pull = {"number": number, "state": "open", "title": data["title"],
                    "body": data.get("body") or "",
                    "html_url": f"https://github.example/{o}/{s.state.repo}/pull/{number}",
                    "head": {"ref": head, "label": f"{o}:{head}"},
                    "base": {"ref": base, "label": f"{o}:{base}"},
                    "user": {"login": user.login, "id": user.id, "type": user.type}}
            s.state.pull_requests[number] = pull
            s.state.pulls.add(number)
        return self._reply(201, pull)

    def _pull(self, method: str, number: int, raw: bytes, user: User | bool | None) -> None:
        """``GET``/``PATCH /repos/o/r/pulls/{n}`` (docs.github.com/rest/pulls/pulls): the
        pull request; a PATCH may set ``state`` (open/closed), ``title`` or ``body``."""
        s = self.standin
        with s.lock:
            pull = s.state.pull_requests.get(number)
        if pull is None:
            return self._error(404, "Not Found")
        if method == "GET":
            return self._reply(200, pull)
        if method != "PATCH":
            return self._error(404, "Not Found")
        data = self._written(raw, user)
        if data is _ANSWERED:
            return None
        if not isinstance(data, dict) or data.get("state", "open") not in ("open", "closed"):
            return self._error(422, "Validation Failed", errors=[{
                "resource": "PullRequest", "code": "invalid", "field": "state"}])
        with s.lock:
            pull.update({k: v for k, v in data.items() if k in ("state", "title", "body")})
        return self._reply(200, pull)

    def _branch(self, name: str) -> None:
        """GET /repos/o/r/branches/{branch} (docs.github.com/rest/branches/branches), the
        fields a reader gets."""
        s = self.standin
        sha = "0" * 40
        if s.state.git_remote is not None:
            out = subprocess.run(["git", "ls-remote", "--heads", s.state.git_remote,
                                  f"refs/heads/{name}"], capture_output=True, text=True,
                                 check=False).stdout.split()
            if not out:
                return self._error(404, "Branch not found")
            sha = out[0]
        with s.lock:
            protected = name in s.state.protected
        url = f"{s.api_url}/repos/{s.state.owner}/{s.state.repo}/branches/{name}"
        return self._reply(200, {
            "name": name, "commit": {"sha": sha, "url": f"{url}/commit"},
            "_links": {"self": url, "html": f"https://github.example/{s.state.owner}/"
                       f"{s.state.repo}/tree/{name}"},
            "protected": protected,
            "protection": {"enabled": protected, "required_status_checks": {
                "enforcement_level": "off", "contexts": [], "checks": []}},
            "protection_url": f"{url}/protection"})

    def _user(self) -> User | bool | None:
        header = self.headers.get("Authorization")
        if header is None:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() not in ("token", "bearer"):
            return False
        return self.standin.state.tokens.get(token.strip(), False)

    def _written(self, raw: bytes, user: User | bool | None) -> Any:
        """A write's JSON body, or ``_ANSWERED`` when its reply is sent already (no user:
        401; not JSON: 400)."""
        if not isinstance(user, User):
            self._error(401, "Requires authentication")
            return _ANSWERED
        try:
            return json.loads(raw or b"null")
        except ValueError:
            self._error(400, "Problems parsing JSON")
            return _ANSWERED

    def _body(self, raw: bytes) -> str | None:
        try:
            data = json.loads(raw or b"null")
        except ValueError:
            self._error(400, "Problems parsing JSON")
            return None
        if not isinstance(data, dict) or not isinstance(data.get("body"), str):
            self._error(422, "Invalid request.\n\n\"body\" wasn't supplied.")
            return None
        body: str = data["body"]
        if len(body) > self.standin.state.limit:
            self._error(422, "Validation Failed", errors=[{
                "resource": "IssueComment", "code": "custom", "field": "body",
                "message": f"body is too long (maximum is {LIMIT} characters)"}])
            return None
        return body

    def _list(self, number: int, query: dict[str, str]) -> None:
        s = self.standin
        with s.lock:
            barrier = s.state.list_barrier
            if barrier is not None and s.state.barrier_uses < barrier.parties:
                s.state.barrier_uses += 1
            else:
                barrier = None
        if barrier is not None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=10)
        per_page = max(1, min(100, int(query.get("per_page", "30"))))
        page = max(1, int(query.get("page", "1")))
        items = [public(c) for c in s.comments_on(number)]
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]
        link = f"{s.api_url}/repositories/{REPO_ID}/issues/{number}/comments?per_page={per_page}"
        rels = []
        if page < last:
            rels += [f'<{link}&page={page + 1}>; rel="next"', f'<{link}&page={last}>; rel="last"']
        if page > 1:
            rels += [f'<{link}&page={page - 1}>; rel="prev"', f'<{link}&page=1>; rel="first"']
        headers = {"Cache-Control": "private, max-age=60, s-maxage=60",
                   "ETag": f'W/"{hash(json.dumps(chunk)) & 0xffffffff:08x}"',
                   "Vary": "Accept, Authorization, Cookie, X-GitHub-OTP"}
        if rels:
            headers["Link"] = ", ".join(rels)
        self._reply(200, chunk, headers)
