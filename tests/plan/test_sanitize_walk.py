"""The sanitizing walk (``render.common.untrusted``) over every shape a plan's values take.

The walk takes shortcuts at fleet scale (an object's values read at once, a copy made
only from the first value that changes, only shared objects remembered): its answer must
be the plain rule's -- every string passed through ``safe`` at ``VALUE_LIMIT``, at any
depth -- for pydantic models, frozen slotted dataclasses (the lean values a plan may hold
instead of models), plain dataclasses, tuples, lists, named tuples, dicts and sets; and a
clean value must come back as the very same object, so a clean plan is never copied.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from reconciler.core.sanitize import _UNSAFE, safe
from reconciler.render.common import VALUE_LIMIT, _sanitize

OSC8 = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
HOSTILE = f"ok \x1b[2J{OSC8} \u202eevil\u202c \x9b31m\nforged"


@dataclass(frozen=True, slots=True)
class Leaf:
    """A lean value as ``core`` may hold one: frozen, slotted, no ``__dict__``."""

    name: str
    count: int = 0
    note: str | None = None


@dataclass(frozen=True, slots=True)
class One:
    only: Any


@dataclass(frozen=True, slots=True)
class Node:
    label: str
    leaves: tuple[Leaf, ...] = ()
    extra: Any = None


@dataclass(frozen=True)
class Computed:
    """A dataclass with a field its ``__init__`` does not take."""

    base: str
    shown: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown", f"[{self.base}]")


class Pair(NamedTuple):
    left: Any
    right: Any


class Box(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    title: str
    items: tuple[Any, ...] = ()
    leaf: Any = None


def reference(value: Any) -> Any:
    """The rule written out the slow way: every plain string made safe, at any depth."""
    if type(value) is str:
        return safe(value, VALUE_LIMIT)
    if isinstance(value, BaseModel):
        return type(value).model_construct(**{k: reference(v) for k, v in value.__dict__.items()})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        copy = dataclasses.replace(value, **{f.name: reference(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
        for f in dataclasses.fields(value):
            if not f.init:
                object.__setattr__(copy, f.name, reference(getattr(value, f.name)))
        return copy
    if isinstance(value, Pair):
        return Pair(*(reference(v) for v in value))
    if isinstance(value, tuple | list | set | frozenset):
        return type(value)(reference(v) for v in value)
    if isinstance(value, dict):
        return {reference(k): reference(v) for k, v in value.items()}
    return value


def strings_of(value: Any) -> list[str]:
    """Every plain string inside ``value``."""
    if type(value) is str:
        return [value]
    if isinstance(value, BaseModel):
        items: Any = value.__dict__.values()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, tuple | list | set | frozenset):
        items = value
    else:
        return []
    return [s for item in items for s in strings_of(item)]


def test_a_frozen_slotted_dataclass_holding_a_hostile_string_is_copied_safe() -> None:
    leaf = Leaf(HOSTILE, 3, "fine")
    assert not hasattr(leaf, "__dict__")
    made = _sanitize(leaf)
    assert type(made) is Leaf and made is not leaf
    assert made == Leaf(safe(HOSTILE, VALUE_LIMIT), 3, "fine")
    assert "\x1b" not in made.name and "\\x1b" in made.name
    assert leaf.name == HOSTILE  # the original is untouched (it is frozen; a copy is made)
    one = _sanitize(One(HOSTILE))  # one field: read as a 1-tuple, not the value itself
    assert one == One(safe(HOSTILE, VALUE_LIMIT))


def test_a_hostile_string_deep_in_dataclasses_inside_a_model_is_made_safe() -> None:
    clean = Leaf("clean")
    box = Box(title="t", items=(Node("n", (clean, Leaf("x", 1, HOSTILE))),), leaf=clean)
    made = _sanitize(box)
    assert made == reference(box)
    assert not any("\x1b" in s or "\u202e" in s for s in strings_of(made))
    assert made.leaf is clean  # what did not change is shared, not copied
    assert made.items[0].leaves[0] is clean


def test_a_clean_value_comes_back_as_the_same_object() -> None:
    value = Box(title="t", items=(Node("n", (Leaf("a"), Leaf("b", 2, "c")), {"k": ["v"]}),
                                  Pair("l", frozenset({"s"})), Computed("c")), leaf=One("o"))
    assert _sanitize(value) is value


def test_a_shared_hostile_object_is_made_safe_everywhere_and_copied_once() -> None:
    shared = Leaf(HOSTILE)
    made = _sanitize((Node("a", (shared,)), Node("b", (shared, shared)), shared))
    copies = {id(made[0].leaves[0]), id(made[1].leaves[0]), id(made[1].leaves[1]),
              id(made[2])}
    assert len(copies) == 1 and made[2] == Leaf(safe(HOSTILE, VALUE_LIMIT))


def test_a_field_init_does_not_take_is_made_safe_too() -> None:
    made = _sanitize(Computed(HOSTILE))
    assert made.base == safe(HOSTILE, VALUE_LIMIT)
    assert made.shown == safe(f"[{HOSTILE}]", VALUE_LIMIT)


def test_keys_values_named_tuples_and_sets_are_walked() -> None:
    value = ({HOSTILE: "v", "k": [HOSTILE]}, Pair(HOSTILE, 1), frozenset({HOSTILE}), {"a"})
    made = _sanitize(value)
    assert made == reference(value)
    assert type(made[1]) is Pair and type(made[2]) is frozenset and made[3] is value[3]


def test_a_long_string_is_bounded() -> None:
    made = _sanitize(Leaf("x" * (VALUE_LIMIT + 10)))
    assert made.name == "x" * VALUE_LIMIT + "…(+10 chars)"


texts = st.one_of(st.sampled_from(["", "plain", "sn1", HOSTILE, "\x07", "é", "\u2066x",
                                   "y" * (VALUE_LIMIT + 1)]), st.text(max_size=6))
leaves = st.builds(Leaf, texts, st.integers(0, 3), st.none() | texts)
scalars = st.one_of(texts, st.integers(), st.none(), st.booleans(), leaves)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4).map(tuple), st.lists(children, max_size=3),
        st.dictionaries(texts, children, max_size=3),
        st.builds(Node, texts, st.lists(leaves, max_size=3).map(tuple), children),
        st.builds(Pair, children, children), st.builds(One, children),
        st.frozensets(texts, max_size=3), st.builds(Computed, texts),
        st.builds(Box, title=texts, items=st.lists(children, max_size=3).map(tuple),
                  leaf=children))


@settings(max_examples=300, deadline=None)
@given(st.recursive(scalars, _containers, max_leaves=20), st.booleans())
def test_the_walk_is_the_plain_rule(value: Any, share: bool) -> None:
    if share:  # the same objects met twice, as a plan shares its clusters' runtimes
        value = (value, [value], Node("s", (), value))
    made = _sanitize(value)
    assert made == reference(value)
    assert not any(_UNSAFE.search(s) for s in strings_of(made))  # no raw control left
    if reference(value) == value:
        assert made is value


# -- the fast looks at a plan's observations and cluster proofs (``render.common._FAST``) ---

from reconciler.core.evidence import ClusterProof, Proof, Why  # noqa: E402
from reconciler.core.live import ClusterRuntime, Observation, ObservationKind  # noqa: E402
from reconciler.core.sanitize import forget_secrets, register_secret, unchanged  # noqa: E402
from reconciler.render.common import _FAST  # noqa: E402


def test_the_fast_looks_know_their_classes_fields() -> None:
    """A field added to either class must be taught to its look; until then the class
    falls back to the full walk, and this test says so."""
    assert set(_FAST) == {Observation, ClusterProof}


@settings(max_examples=300, deadline=None)
@given(st.one_of(texts, st.sampled_from([
    "https://h/x?token=abc", "a?b", "://x", "ok sekret-value-1 here", "\u00a0", "\t"])),
    st.sampled_from([5, 300, VALUE_LIMIT]))
def test_unchanged_never_says_so_of_a_string_safe_would_change(text: str, limit: int) -> None:
    register_secret("sekret-value-1")
    try:
        if unchanged(text, limit):
            assert safe(text, limit) == text
    finally:
        forget_secrets()


def _observation(cluster: str, address: str | None, reason: str | None,
                 runtime: ClusterRuntime | None) -> Observation:
    kind = ObservationKind.ANSWERED if runtime is not None else ObservationKind.SILENT
    return Observation(cluster_id=cluster, address=address, kind=kind, runtime=runtime,
                       reason=reason, observed_at=1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(texts, st.none() | texts, st.none() | texts, st.booleans(),
                          texts, st.none() | texts), min_size=1, max_size=6),
       st.sampled_from(["sha256:a", HOSTILE]))
def test_observations_and_proofs_met_after_clean_ones_are_still_made_safe(
        rows: list[tuple[str, str | None, str | None, bool, str, str | None]],
        state: str) -> None:
    """The fast looks skip a value only when every string in it was already seen safe
    and its runtime already walked unchanged: a hostile string or runtime in the tenth
    observation of a service is made safe as in the first."""
    runtime = ClusterRuntime(state=state, resolved_digest="sha256:a")
    observations = tuple(_observation(c, a, r, runtime if shared else None)
                         for c, a, r, shared, _, _ in rows)
    proofs = tuple(ClusterProof(cluster=c, proof=Proof.NOT_CONVERGED, why=Why.NO_RECORD,
                                detail=d, running=e) for c, _, _, _, d, e in rows)
    value = (observations, proofs, observations[::-1], proofs[::-1])
    made = _sanitize(value)
    assert made == reference(value)
    assert not any(_UNSAFE.search(s) for s in strings_of(made))
    if reference(value) == value:
        assert made is value
