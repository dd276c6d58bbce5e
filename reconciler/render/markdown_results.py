"""The PR comment when no plan exists for the newest commit: *invalid* or *error*.

Owns two comment bodies and the block that keeps the previous plan:

- **invalid**: the headline says the desired state at this commit is invalid and that
  there is no plan for it; the first problems follow (file:line relative to the git
  work tree, so they match the PR's file list), the rest collapsed, a bounded number
  listed in all; then what to do.
- **error**: the headline says this commit could not be planned and names what could
  not be read (the subject of the engine's sentence); the full message in a fenced block;
  then that no plan exists for this commit and what to do.
- **superseded**: the plan the comment showed before, kept only collapsed under
  "superseded: plan for <commit>", so a reviewer sees it is not the newest word. It is
  our own earlier comment body (``reconcile comment`` reads it back, ownership checked);
  its headings are demoted so they do not compete with this comment's headline.

Every string that comes from the desired state or a server (paths, messages, the error)
is embedded as a code span or in a fenced block, never as Markdown or HTML
(``markdown.code``), as in the plan comment. ``<summary>`` holds only this module's
words, numbers and hex commit ids. Pure.
"""

from __future__ import annotations

import posixpath
import re
import textwrap

from reconciler.core.diagnostics import NO_POSITION, Diagnostic
from reconciler.core.results import PlanResult, ResultKind, for_pull_request
from reconciler.core.sanitize import safe
from reconciler.render.delivery import Delivery
from reconciler.render.markdown import code, esc

#: Problems shown before the rest collapse, and the most listed at all.
SHOWN = 5
LISTED = 200
_HEX = re.compile(r"[0-9a-f]{7,64}")
_HEADING = re.compile(r"^(#{1,4}) ", re.M)
SUPERSEDED_OPEN = "<!-- reconcile:superseded -->"
SUPERSEDED_CLOSE = "<!-- /reconcile:superseded -->"


def short_commit(commit: str | None) -> str | None:
    """The first 12 hex digits, or None for anything that is not a commit id."""
    if commit is None or not _HEX.fullmatch(commit):
        return None
    return commit[:12]


def _where(result: PlanResult, delivery: Delivery | None) -> str:
    bits = []
    short = short_commit(result.commit)
    bits.append(f"commit {code(short)}" if short else "commit unknown")
    directory = _directory(result)
    if directory and directory != ".":
        bits.append(f"desired state {code(directory, 200)}")
    if delivery is not None and delivery.run_url:
        bits.append(f"[workflow run {esc(delivery.run_id or '')}]({delivery.run_url})")
    return "**Where:** " + " · ".join(bits) + "\n\n"


def _directory(result: PlanResult) -> str | None:
    """The desired-state directory relative to its git work tree (``.`` at the top)."""
    if result.path and result.root and posixpath.isabs(result.path) \
            and posixpath.isabs(result.root):
        relative = posixpath.relpath(result.path, result.root)
        if not relative.startswith(".."):
            return relative
    return None


def _located(diagnostic: Diagnostic, directory: str | None) -> str:
    path = diagnostic.path
    if directory and directory != "." and path != ".":
        path = posixpath.join(directory, path)
    if diagnostic.line != NO_POSITION:
        path = f"{path}:{diagnostic.line}:{diagnostic.column}"
    return path


def _problem(diagnostic: Diagnostic, directory: str | None) -> str:
    field = f" · {code(diagnostic.field, 200)}" if diagnostic.field else ""
    return (f"- {code(_located(diagnostic, directory), 500)}{field} — "
            f"{code(diagnostic.message, 1000)}\n")


def _n(count: int, one: str) -> str:
    return f"{count:,} {one}{'' if count == 1 else 's'}"


def render_invalid(result: PlanResult, *, delivery: Delivery | None = None,
                   superseded: str = "", budget: int = 60_000) -> str:
    """The comment for a desired state that does not validate at this commit; problems
    past ``budget`` characters (or past ``LISTED``) are counted, not listed."""
    assert result.outcome is ResultKind.INVALID
    problems = sorted(result.diagnostics, key=Diagnostic.sort_key)
    directory = _directory(result)
    short = short_commit(result.commit)
    files = len({d.path for d in problems})
    text = (f"## reconcile: ❌ **invalid desired state** — {_n(len(problems), 'problem')} in "
            f"{_n(files, 'file')}"
            + (f" at {code(short)}" if short else "")
            + "; no plan exists for this commit\n\n")
    text += _where(result, delivery)
    text += "".join(_problem(d, directory) for d in problems[:SHOWN]) + "\n"
    rest: list[str] = []
    size = len(text) + len(superseded) + 2_000  # the closing words and the summary
    for diagnostic in problems[SHOWN:LISTED]:
        line = _problem(diagnostic, directory)
        if size + len(line) > budget:
            break
        rest.append(line)
        size += len(line)
    if rest:
        text += (f"<details><summary>{_n(len(rest), 'more problem')}</summary>\n\n"
                 + "".join(rest) + "\n</details>\n\n")
    unlisted = len(problems) - min(len(problems), SHOWN) - len(rest)
    if unlisted:
        text += (f"… and {unlisted:,} more: `reconcile validate` lists every one.\n\n")
    where = f" {directory}" if directory and directory != "." else ""
    them = "it" if len(problems) == 1 else "them"
    text += (f"**What next:** fix {them} and push; this comment then shows the plan for that "
             f"commit. `reconcile validate{esc(where)}` lists the same locally, and "
             "the check's annotations mark each line in *Files changed*. Nothing can be "
             "applied from this commit.\n\n")
    return text + superseded


def _subject(message: str) -> str:
    """What could not be read, as the engine's sentence names it first: the text before
    its first ``": "`` (``control plane https://cp.example``, ``cluster sn2``,
    ``settings``), else the first line; bounded."""
    first = message.split("\n", 1)[0]
    head, sep, _ = first.partition(": ")
    return safe(head if sep and 3 <= len(head) <= 120 else first, 200)


#: The widest line of a fenced block: GitHub's conversation column (about 880 px) shows
#: about this many monospace characters; a code block never wraps, it cuts off.
FENCE_WIDTH = 96


def _wrapped(line: str) -> list[str]:
    """``line`` in pieces of at most ``FENCE_WIDTH`` characters, broken at spaces where
    it can be (a long token is broken anyway); continuation lines indented."""
    if len(line) <= FENCE_WIDTH:
        return [line]
    return textwrap.wrap(line, FENCE_WIDTH, subsequent_indent="  ", break_on_hyphens=False,
                         drop_whitespace=True) or [line[:FENCE_WIDTH]]


def _fenced(text: str) -> str:
    lines = [piece for line in text.split("\n")[:60] for piece in _wrapped(safe(line, 2000))]
    body = "\n".join(lines)
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}\n\n"


def render_error(result: PlanResult, *, delivery: Delivery | None = None,
                 superseded: str = "") -> str:
    """The comment for a commit that could not be planned (something could not be read)."""
    assert result.outcome is ResultKind.ERROR
    short = short_commit(result.commit)
    commit = f"commit {code(short)}" if short else "this commit"
    error = for_pull_request(result.error)  # advice meant for a terminal, not a CI run
    subject = _subject(error)
    text = (f"## reconcile: ⚠️ **could not plan {commit}** — {code(subject, 300)} could not "
            "be read\n\n" if subject else
            f"## reconcile: ⚠️ **could not plan {commit}** — reconcile plan failed\n\n")
    text += _where(result, delivery)
    text += ("**No plan exists for this commit**: there is nothing to review and nothing "
             "that can be applied from it.\n\n")
    text += "**What could not be read:**\n\n" + _fenced(error or "(no message)")
    rerun = (f"re-run [the workflow run]({delivery.run_url})" if delivery is not None
             and delivery.run_url else "re-run the check")
    text += (f"**What next:** when it can be read again, {rerun} or push; this comment then "
             "shows the plan for the newest commit." + (
                 " The plan below is for an older commit and does not describe this one."
                 if superseded else "") + "\n\n")
    return text + superseded


def superseded(previous: str, commit: str | None, *, room: int, parts: int = 1) -> str:
    """The previous plan comment, collapsed; a note instead when it does not fit ``room``.

    ``previous`` is the body of our own earlier comment (part 1, markers removed);
    ``parts`` how many comments that plan had (only part 1 is kept)."""
    short = short_commit(commit)
    label = (f"superseded: plan for <code>{short}</code>" if short
             else "superseded: the previous plan")
    demoted = _HEADING.sub(lambda m: "#" * min(6, len(m.group(1)) + 2) + " ", previous.strip())
    more = (f"\n\n_(part 1 of {parts:,}; the other parts were removed with it)_"
            if parts > 1 else "")
    block = (f"{SUPERSEDED_OPEN}\n<details><summary>{label} — it does not describe the "
             f"newest commit</summary>\n\n{demoted}{more}\n\n</details>\n{SUPERSEDED_CLOSE}\n")
    if len(block) <= room:
        return block
    note = (f"{SUPERSEDED_OPEN}\n<details><summary>{label} — it does not describe the newest "
            "commit</summary>\n\n_(too long to keep in this comment; the workflow run that "
            f"made it still has it)_\n\n</details>\n{SUPERSEDED_CLOSE}\n")
    return note if len(note) <= room else ""


def kept_superseded(body: str) -> str:
    """The superseded block an invalid or error comment already carries (to keep it when
    the next run fails too), or ``""``."""
    start = body.find(SUPERSEDED_OPEN)
    end = body.find(SUPERSEDED_CLOSE, start + 1)
    if start < 0 or end < 0:
        return ""
    return body[start:end + len(SUPERSEDED_CLOSE)] + "\n"
