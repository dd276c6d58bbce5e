"""``watch --promote-from``'s proposals (``Proposer``): gate → pin → plan → commit beside
the checkout → branch and pull request → journal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.core import (
    promotion,
    proposals,
    writegate,
)
from reconciler.core.desired import DesiredState, Service
from reconciler.core.live import (
    LiveSnapshot,
)
from reconciler.core.planning import (
    Provenance,
)
from reconciler.core.plans import Plan, restrict
from reconciler.core.preflight import Greenfield
from reconciler.core.promoted import Promotion
from reconciler.engine.reconciling import environment_rules
from reconciler.engine.wiring import (
    ProposalTarget,
    _candidate,
    _evidence_line,
    make_plan,
    state_dir,
)
from reconciler.shell import (
    environments,
)
from reconciler.shell import journal as journal_mod
from reconciler.shell import pinning as pin_files
from reconciler.shell import reverting as revert_git
from reconciler.shell.journal import Journal, JournalError

if TYPE_CHECKING:  # for annotations only: these load where they are used
    from reconciler.shell.pullrequests import PullRequest


@dataclass(frozen=True)
class Proposal:
    """One service at one observation: the decision (``core.proposals``), the pull request
    opened or found open, what failed (git, GitHub, the journal), and whether it is news
    (not said before: a soak's eligible time is said once, not at every resync)."""

    decision: proposals.Decision
    pull: PullRequest | None = None
    error: str | None = None
    news: bool = True
    note: str | None = None
    #: the superseded proposal's pull request, closed by this one (None: none was open)
    closed: int | None = None


class Proposer:
    """``watch --promote-from``'s memory across cycles: the proposals made (the journal's,
    read once, then kept here), what was said, and the failures counted. Each ``run`` is
    one pass over ENV's services after an observation; it never writes the checkout (the
    commit is built beside it, ``shell.reverting.make_commit``) and never applies."""

    def __init__(self, target: ProposalTarget, env: Mapping[str, str]) -> None:
        self.target = target
        self.env = env
        self.earlier: list[proposals.Earlier] | None = None
        self.said: set[str] = set()
        self.failures = 0

    def _journal(self, stage: environments.Selected, desired: DesiredState) -> Path:
        return state_dir(desired, stage.root, self.env, stage.name) / journal_mod.JOURNAL_FILE

    def _recorded(self, stage: environments.Selected, path: Path) -> list[proposals.Earlier]:
        if self.earlier is None:
            try:
                records = journal_mod.proposals(path, on_torn=lambda _torn: None)
            except JournalError:
                records = []  # GitHub still finds an open pull request of the same branch
            self.earlier = [proposals.Earlier(
                service=str(r.get("service")), digest=str(r.get("digest")),
                branch=str(r.get("branch")), number=r.get("pull") if isinstance(
                    r.get("pull"), int) else None, url=str(r.get("url") or ""))
                for r in records if r.get("environment") == stage.name]
        return self.earlier

    def run(self, stage: environments.Selected, desired: DesiredState, snapshot: LiveSnapshot,
            provenance: Provenance, greenfield: Greenfield | None,
            upstream: promotion.Upstream | None, only: frozenset[str],
            now_ms: int) -> tuple[Proposal, ...]:
        if stage.upstream is None or upstream is None:
            return ()
        path = self._journal(stage, desired)
        earlier = self._recorded(stage, path)
        out: list[Proposal] = []
        for svc in desired.services:
            if only and svc.name not in only:
                continue
            decision, made = self._decide(stage, desired, svc, snapshot, provenance,
                                          greenfield, upstream, earlier, now_ms)
            if decision.step is proposals.Step.PROPOSE and made is not None:
                out.append(self._open(stage, desired, svc, decision, made, provenance, path,
                                      now_ms))
                continue
            news = decision.key not in self.said
            self.said.add(decision.key)
            out.append(Proposal(decision, news=news))
        return tuple(out)

    def _decide(self, stage: environments.Selected, desired: DesiredState, svc: Service,
                snapshot: LiveSnapshot, provenance: Provenance, greenfield: Greenfield | None,
                upstream: promotion.Upstream, earlier: list[proposals.Earlier],
                now_ms: int) -> tuple[proposals.Decision,
                                      tuple[Plan, bytes, promotion.Gate] | None]:
        """The decision for ``svc``: the gate of ``engine.promote`` (the digest the
        previous environment proves, soak, windows, freezes), then -- when that allows
        it -- ENV's plan with the pin (policies: ``environment_rules``, the same rules
        ``plan --env`` applies). Returns the plan and the rewritten file to propose."""
        name = svc.name
        digest, tag, gate, refused = _candidate(stage, upstream, name, now_ms)
        if digest is None:
            problem = refused if upstream.error is not None else None
            return proposals.decide(stage.name, proposals.Candidate(
                name, None, None, svc.release.digest, problem=problem), earlier), None
        assert gate is not None
        held = tuple(b for b in gate.blockers
                     if not (stage.override and b.code in promotion.OVERRIDABLE))
        candidate = proposals.Candidate(name, digest, tag, svc.release.digest, held,
                                        gate.eligible_at,
                                        problem=None if held else refused or
                                        proposals.older_than_pinned(
                                            stage.name, snapshot.services.get(svc.service_id),
                                            svc.release.digest, digest))
        decision = proposals.decide(stage.name, candidate, earlier)
        if decision.step is not proposals.Step.PROPOSE:
            return decision, None
        assert tag is not None
        rel = desired.sources[f"Service/{name}"].path
        facts = upstream.services[name]
        try:
            if provenance.commit is None:
                raise pin_files.PinFileError(f"{stage.root} has no commit to propose on")
            data = revert_git.blob(stage.root, provenance.commit, rel)
            if data is None:
                raise pin_files.PinFileError(f"{rel} is not in commit {provenance.commit[:12]}")
            after = pin_files.rewrite(data, rel, name, pin_files.Values(
                digest=digest, tag=tag,
                version=facts.version if facts.pinned == digest else None))
            model, problems = pin_files.candidate(rel, after, name)
            if problems or model is None:
                raise pin_files.PinFileError("; ".join(p.render() for p in problems)
                                             or f"{rel}: the rewritten file does not load")
        except (pin_files.PinFileError, revert_git.RevertGitError) as exc:
            return proposals.decide(stage.name, dataclasses.replace(
                candidate, problem=str(exc)), earlier), None
        scoped = desired.model_copy(update={"services": (model,)})
        made = restrict(environment_rules(stage, make_plan(scoped, snapshot, provenance,
                                                           greenfield), scoped, upstream),
                        frozenset({name}))
        if not any(c.service == name and c.action in promotion.PROMOTING
                   for c in made.changes):
            # Going back to a release ENV accepted before (staging rolled back after ENV
            # took the newer one) is a rollback, not a promotion: never proposed here.
            return proposals.Decision(name, proposals.Step.NOTHING, digest=digest, tag=tag,
                                      reason=f"{stage.name} accepted it before: a rollback, "
                                      "not a promotion"), None
        found = writegate.verdict(made, writegate.Write.PROMOTION, {name},
                                  override=stage.override)
        if not found.go:  # the one gate: a policy, a hold on the digest, …
            return proposals.decide(stage.name, dataclasses.replace(
                candidate, blockers=found.refusing_of(name), eligible_at=None), earlier), None
        return decision, (made, after, gate)

    def _open(self, stage: environments.Selected, desired: DesiredState, svc: Service,
              decision: proposals.Decision, made: tuple[Plan, bytes, promotion.Gate],
              provenance: Provenance, path: Path, now_ms: int) -> Proposal:
        """Build the commit (HEAD with the pin; the checkout untouched), push the branch,
        open the pull request -- or find the one already open -- and journal it."""
        from reconciler.shell import pullrequests  # githubkit loads only for a proposal

        plan_value, after, gate = made
        assert decision.branch is not None and decision.digest is not None
        assert provenance.commit is not None and stage.upstream is not None
        up = stage.upstream.name
        evidence = _evidence_line(stage, up, Promotion(
            service=svc.name, digest=decision.digest, tag=decision.tag, gate=gate))
        title = f"Promote {svc.name} to {stage.name} from {up}"
        superseded = decision.supersedes
        said = (f"supersedes the proposal of {superseded.digest}"
                + (f" (#{superseded.number})" if superseded.number else "")) \
            if superseded else ""
        message = (f"promote {svc.name} to {stage.name} from {up}\n\n{evidence}\n"
                   + (f"{said}\n" if said else ""))
        rel = desired.sources[f"Service/{svc.name}"].path
        pull = self.target.pull
        if not pull.repo:
            self.failures += 1
            return Proposal(decision, error="no GitHub repository (--repo or "
                            "GITHUB_REPOSITORY)")
        try:
            since = gate.since or now_ms  # the same promotion is the same commit
            commit = revert_git.make_commit(stage.root, provenance.commit, {rel: after},
                                            message, date=f"@{since // 1000} +0000")
            base = self.target.base or revert_git.branch(stage.root) or "main"
            body = "\n".join(x for x in (f"- {evidence}", f"- {said}" if said else "") if x)
            _pushed, opened = pullrequests.open_pull_request(
                stage.root, api_url=pull.api_url, repo=pull.repo, token=pull.token,
                branch=decision.branch, base=base, title=title,
                body=body + "\n\n" + self.target.body(plan_value), commit=commit,
                remote=pull.remote, keep_existing=True)
        except (pullrequests.PullRequestError, revert_git.RevertGitError) as exc:
            self.failures += 1
            return Proposal(decision, error=str(exc))
        assert self.earlier is not None
        self.earlier.append(proposals.Earlier(svc.name, decision.digest, decision.branch,
                                              opened.number, opened.url))
        self.said.add(decision.key)
        note = None
        try:
            Journal.open(path).proposed(decision.branch, {
                "environment": stage.name, "upstream": up, "service": svc.name,
                "digest": decision.digest, "tag": decision.tag, "branch": decision.branch,
                "base": base, "commit": commit, "pull": opened.number, "url": opened.url,
                "created": opened.created, "evidence": evidence,
                "supersedes": superseded.digest if superseded else None})
        except JournalError as exc:  # the pull request is open: GitHub finds it again
            note = f"not journaled: {exc}"
        closed: int | None = None
        if superseded is not None and superseded.number is not None \
                and superseded.branch != decision.branch:
            # The older proposal would pin a digest this one replaces: merged after it,
            # it would take ENV back. Closed with a comment naming the newer one; one a
            # person merged or closed is left as it is (``close_superseded``).
            comment = (f"Superseded by #{opened.number} ({opened.url}): {up} now proves "
                       f"{svc.name} {decision.digest}"
                       + (f" ({decision.tag})" if decision.tag else "")
                       + f". Closed by reconcile watch --env {stage.name} --promote-from "
                       f"{up}; this branch is left as it is.")
            try:
                if pullrequests.close_superseded(
                        api_url=pull.api_url, repo=pull.repo, token=pull.token,
                        number=superseded.number, branch=superseded.branch,
                        comment=comment):
                    closed = superseded.number
            except pullrequests.PullRequestError as exc:
                note = "; ".join(x for x in (note, f"the superseded pull request "
                                             f"#{superseded.number} is still open: {exc}")
                                 if x)
        return Proposal(decision, pull=opened, note=note, closed=closed)
