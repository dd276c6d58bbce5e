"""Rules that span documents: what no single model can check on its own.

Owns the repo-wide rules of the desired state: exactly one ``Settings``; service names,
``serviceId``s and ``appId``s unique; no two services propose the same ``create.namespace``
(the control plane would refuse the second as ``NAMESPACE_COLLISION`` only after the first
was created); every grant names a declared service; no two
``Grant`` documents give the same user the same service; the ``Route`` rules of
``core.routedocs``. Called by
``shell.validating`` after every document has passed its own model.

Also owns which positions a validated document keeps (``keep``): once a file has passed
its models, only the values these rules can point at are ever located again, so a
document keeps their positions alone -- not the position of every value of the file.

Pure: takes validated documents with their positions, returns diagnostics; reads no
file and raises nothing for bad input.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from reconciler.core import routedocs
from reconciler.core.desired import Document, Grant, Hold, Route, Service, Settings, Verification
from reconciler.core.diagnostics import NO_POSITION, Diagnostic, field_path

Loc = tuple[str | int, ...]
Position = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Located:
    """A validated document and where it (and the values the rules point at) was written.

    ``positions`` maps a value's path in the document (YAML keys, i.e. the models'
    aliases, and list indexes) to its 1-based (line, column): for the ``Settings``
    document every value's (``reconcile config`` says where each setting was written),
    for the others only the paths ``keep`` names (``Kept``), each with the position
    ``at`` gave it when the file was loaded.
    """

    document: Document
    path: str
    line: int
    column: int
    positions: Mapping[Loc, Position]

    def at(self, loc: Loc, message: str) -> Diagnostic:
        """A diagnostic pointing at ``loc`` (or its nearest written ancestor)."""
        line, column = self.position(loc)
        return Diagnostic(self.path, line, column, field_path(loc), message)

    def position(self, loc: Loc) -> Position:
        """Where ``loc`` was written, or its nearest written ancestor, or the document."""
        return _position(self.positions, loc, (self.line, self.column))

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _position(positions: Mapping[Loc, Position], loc: Loc, document: Position) -> Position:
    for end in range(len(loc), -1, -1):
        found = positions.get(loc[:end])
        if found is not None:
            return found
    return document


class Kept(Mapping[Loc, Position]):
    """The positions a validated document keeps: a few paths, in a compact form.

    At fleet scale a repo is 10,000 Service files of about 25 values each; a dict of
    every value's position (a path tuple and a position tuple per value) was most of the
    memory a loaded file kept. ``paths`` is one tuple shared by every document of the
    same shape; ``lines_columns`` holds line, column of each path in turn."""

    __slots__ = ("_lines_columns", "_paths")

    def __init__(self, paths: tuple[Loc, ...], lines_columns: tuple[int, ...]) -> None:
        self._paths = paths
        self._lines_columns = lines_columns

    def __getitem__(self, loc: Loc) -> Position:
        try:
            index = 2 * self._paths.index(loc)
        except ValueError:
            raise KeyError(loc) from None
        return self._lines_columns[index], self._lines_columns[index + 1]

    def __iter__(self) -> Iterator[Loc]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


_SERVICE: Final[tuple[Loc, ...]] = (("name",), ("serviceId",), ("appId",))
_SERVICE_CREATED: Final[tuple[Loc, ...]] = (*_SERVICE, ("create", "namespace"))
_HOLD: Final[tuple[Loc, ...]] = (("service",), ("digest",))
_ROUTE: Final[tuple[Loc, ...]] = (("owner",), ("owner", "service"), ("name",), ("priority",))


def _verification(document: Verification) -> tuple[Loc, ...]:
    services = document.scope.services
    return (("name",), ("scope", "services"),
            *(("scope", "services", index) for index in range(
                0 if services == "all" else len(services))),
            *(("checks", index, "prometheus") for index in range(len(document.checks))),
            *(("checks", index, "prometheus", "query")
              for index in range(len(document.checks))),
            *(("checks", index, "http", "host") for index in range(len(document.checks))))


@lru_cache(maxsize=256)
def _grant(entries: int) -> tuple[Loc, ...]:
    return tuple(("services", index, "service") for index in range(entries))


def kept_paths(document: Document) -> tuple[Loc, ...] | None:
    """The paths of ``document`` that the rules of this module, ``core.routedocs`` and
    ``shell.validating`` (a ``Settings`` ``stateDir``) may point at once it is
    validated; None: every path (the ``Settings`` document). A rule that points at
    another path must add it here (``tests/validation/test_kept_positions.py`` compares
    every rule's diagnostics with all positions and with the kept ones)."""
    if isinstance(document, Service):
        return _SERVICE_CREATED if document.create is not None else _SERVICE
    if isinstance(document, Grant):
        return _grant(len(document.services))
    if isinstance(document, Hold):
        return _HOLD
    if isinstance(document, Route):
        return _ROUTE
    if isinstance(document, Verification):
        return _verification(document)
    return None


def keep(document: Document, path: str, line: int,
         column: int, positions: Mapping[Loc, Position]) -> Located:
    """``document`` located, keeping only the positions ``kept_paths`` names (each as
    ``Located.at`` finds it in ``positions``: its own, or its nearest written
    ancestor's), so that every diagnostic names the same line as with all of them."""
    paths = kept_paths(document)
    if paths is None:
        return Located(document, path, line, column, positions)
    lines_columns: list[int] = []
    for loc in paths:
        found = positions.get(loc)  # written, nearly always: no ancestor to look for
        lines_columns.extend(found if found is not None
                             else _position(positions, loc, (line, column)))
    return Located(document, path, line, column, Kept(paths, tuple(lines_columns)))


def check(documents: Sequence[Located], *, complete: bool = True,
          repo: str = ".") -> list[Diagnostic]:
    """Every cross-document problem among ``documents``.

    ``complete`` is False when some document of the repo failed on its own: then the
    rules that judge an *absence* (no Settings, a grant naming an undeclared service)
    are skipped, because the missing document may be the one that failed, and saying
    so would send the reader after the wrong problem.
    """
    problems: list[Diagnostic] = []
    settings = [d for d in documents if isinstance(d.document, Settings)]
    services = [d for d in documents if isinstance(d.document, Service)]
    grants = [d for d in documents if isinstance(d.document, Grant)]

    if not settings and complete:
        problems.append(Diagnostic(
            repo, NO_POSITION, NO_POSITION, "",
            "no Settings document: the repo needs exactly one (kind: Settings) "
            "saying where the control plane and the cluster mesh are"))
    if len(settings) > 1:
        for doc in settings:
            others = ", ".join(o.where for o in settings if o is not doc)
            problems.append(doc.at(("kind",), f"a second Settings document; a repo has exactly "
                                              f"one (also declared at {others})"))

    for alias, attribute in (("name", "name"), ("serviceId", "service_id"), ("appId", "app_id")):
        claims: dict[str, list[tuple[Located, Loc]]] = {}
        for doc in services:
            claims.setdefault(getattr(doc.document, attribute), []).append((doc, (alias,)))
        label = f"service {alias}"
        problems.extend(_clashes(claims, _labeller(label)))

    namespaces: dict[str, list[tuple[Located, Loc]]] = {}
    for doc in services:
        service = doc.document
        assert isinstance(service, Service)
        if service.create is not None:
            namespaces.setdefault(service.create.namespace, []).append(
                (doc, ("create", "namespace")))
    problems.extend(_clashes(namespaces, _labeller("proposed namespace"),
                             rule="two new services cannot share a namespace"))

    declared = {d.document.name for d in services if isinstance(d.document, Service)}
    granted: dict[tuple[str, str], list[tuple[Located, Loc]]] = {}
    for doc in grants:
        grant = doc.document
        assert isinstance(grant, Grant)
        for index, entry in enumerate(grant.services):
            loc: Loc = ("services", index, "service")
            if complete and entry.service not in declared:
                problems.append(doc.at(loc, _undeclared(entry.service, declared)))
            granted.setdefault((grant.user_id, entry.service), []).append((doc, loc))
    problems.extend(_clashes(
        granted, lambda key: f"user {key[0]!r} granted service {key[1]!r}",
        rule="one Grant entry per (user, service)"))

    held: dict[tuple[str, str], list[tuple[Located, Loc]]] = {}
    for doc in documents:
        hold = doc.document
        if not isinstance(hold, Hold):
            continue
        if complete and hold.service not in declared:
            problems.append(doc.at(("service",), _undeclared(hold.service, declared)))
        held.setdefault((hold.service, hold.digest), []).append((doc, ("digest",)))
    problems.extend(_clashes(
        held, lambda key: f"a hold on {key[0]}'s release {key[1]}",
        rule="one Hold document per (service, digest)"))
    problems.extend(routedocs.check_documents(
        [d for d in documents if isinstance(d.document, Route)], declared, complete=complete))
    problems.extend(_verifications(documents, declared, settings, complete=complete))
    return problems


def _verifications(documents: Sequence[Located], declared: Collection[str],
                   settings: Sequence[Located], *, complete: bool) -> list[Diagnostic]:
    """Issue 34: a Verification names declared services, is named once, and a
    ``prometheus`` check has a Prometheus to ask (``verification.prometheus``)."""
    problems: list[Diagnostic] = []
    names: dict[str, list[tuple[Located, Loc]]] = {}
    source = settings[0].document if len(settings) == 1 else None
    prometheus = isinstance(source, Settings) and source.verification is not None \
        and source.verification.prometheus is not None
    for doc in documents:
        verification = doc.document
        if not isinstance(verification, Verification):
            continue
        names.setdefault(verification.name, []).append((doc, ("name",)))
        services = verification.scope.services
        if complete and services != "all":
            for index, service in enumerate(services):
                if service not in declared:
                    problems.append(doc.at(("scope", "services", index),
                                           _undeclared(service, declared)))
        if complete and not prometheus:
            for index, check in enumerate(verification.checks):
                if check.prometheus is not None:
                    problems.append(doc.at(
                        ("checks", index, "prometheus"),
                        f"check {check.name!r} asks Prometheus, but the Settings name none: "
                        "add verification.prometheus.url to the Settings document"))
    problems.extend(_clashes(names, _labeller("verification name"),
                             rule="one Verification document per name"))
    if complete:
        problems.extend(_unrouted_hosts(documents))
    return problems


def _serves(pattern: str, host: str) -> bool:
    """Whether a route hostname (``*.`` for one label) takes ``host``."""
    if pattern.startswith("*."):
        head, _, rest = host.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == host


def _unrouted_hosts(documents: Sequence[Located]) -> list[Diagnostic]:
    """An ``http`` check's ``host`` that none of the Route documents of the services it
    holds serves -- when those services declare routes here at all (a repo that manages
    no route of a service cannot say which hostnames reach it). Caught here, not as a
    failing check (a ``421`` from every cluster), which would read as the release's
    failure."""
    served: dict[str, list[str]] = {}
    for doc in documents:
        route = doc.document
        if isinstance(route, Route):
            hosts = served.setdefault(route.owner.service, [])
            hosts.extend(route.match.domains if route.match.domains is not None
                         else [route.owner.hostname] if route.owner.hostname else [])
    problems: list[Diagnostic] = []
    for doc in documents:
        verification = doc.document
        if not isinstance(verification, Verification):
            continue
        services = sorted(served) if verification.scope.services == "all" \
            else [s for s in verification.scope.services if s in served]
        for index, check in enumerate(verification.checks):
            host = check.http.host if check.http is not None else None
            if host is None:
                continue
            for service in services:
                if not any(_serves(p, host) for p in served[service]):
                    problems.append(doc.at(
                        ("checks", index, "http", "host"),
                        f"no Route document of service {service!r} serves host {host!r} "
                        f"(its routes serve {', '.join(sorted(set(served[service])))}): the "
                        "check would only ever be refused"))
    return problems


def _clashes(claims: Mapping[Any, list[tuple[Located, Loc]]], what: Callable[[Any], str],
             *, rule: str = "it must be unique") -> list[Diagnostic]:
    """One diagnostic at every place that claims what another place claims too."""
    problems: list[Diagnostic] = []
    for value, places in claims.items():
        if len(places) < 2:
            continue
        for doc, loc in places:
            others = ", ".join(f"{other.path}:{other.at(where, '').line}"
                               for other, where in places if (other, where) != (doc, loc))
            problems.append(doc.at(loc, f"{what(value)} is also declared at {others}; {rule}"))
    return problems


def _labeller(label: str) -> Callable[[Any], str]:
    def describe(value: Any) -> str:
        return f"{label} {value!r}"
    return describe


def _undeclared(name: str, declared: Collection[str]) -> str:
    message = f"no Service named {name!r} is declared in this repo"
    close = difflib.get_close_matches(name, sorted(declared), n=1)
    return f"{message}; did you mean `{close[0]}`?" if close else message
