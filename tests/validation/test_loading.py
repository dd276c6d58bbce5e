"""The loader on its own: typing of scalars, positions, caching, and hostile bytes."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.shell import loading
from reconciler.shell.validating import BlobCache, load_blobs, load_repo


def parse(text: str) -> object:
    documents, problems = loading.parse_bytes(text.encode(), "t.yaml")
    assert problems == ()
    assert len(documents) == 1
    return documents[0].value


def test_no_on_yes_and_leading_zeros_stay_strings() -> None:
    value = parse("a: no\nb: on\nc: yes\nd: 0443\ne: 0x1F\nf: True\ng: NULL\nh: 1_000\n")
    assert value == {"a": "no", "b": "on", "c": "yes", "d": "0443", "e": "0x1F",
                     "f": "True", "g": "NULL", "h": "1_000"}


def test_core_scalars_are_typed() -> None:
    value = parse("a: true\nb: false\nc: null\nd: ~\ne:\nf: -12\ng: 0\nh: 1.5\ni: 2e3\n")
    assert value == {"a": True, "b": False, "c": None, "d": None, "e": None, "f": -12, "g": 0,
                     "h": 1.5, "i": 2000.0}
    assert isinstance(parse("a: 443")["a"], int)  # type: ignore[index]


def test_quoted_and_block_scalars_are_always_strings() -> None:
    assert parse("a: 'true'\nb: \"443\"\nc: |\n  x\nd: >\n  y\n") == {
        "a": "true", "b": "443", "c": "x\n", "d": "y\n"}


def test_positions_are_one_based_and_cover_every_value() -> None:
    documents, _ = loading.parse_bytes(b"# c\na:\n  b: [x, 'y']\n", "t.yaml")
    doc = documents[0]
    assert doc.positions[("a",)] == (3, 3)
    assert doc.positions[("a", "b", 1)] == (3, 10)
    assert doc.key_positions[("a", "b")] == (3, 3)
    assert doc.position_of(("a", "b", "missing")) == (3, 6)


def test_multi_document_files_skip_empty_documents() -> None:
    documents, problems = loading.parse_bytes(b"---\n---\na: 1\n---\n# only a comment\n",
                                              "t.yaml")
    assert problems == ()
    assert [d.value for d in documents] == [{"a": 1}]
    assert documents[0].line == 3


def test_yaml_1_2_directive_is_accepted() -> None:
    documents, problems = loading.parse_bytes(b"%YAML 1.2\n---\na: 1\n", "t.yaml")
    assert problems == () and documents[0].value == {"a": 1}


def test_flow_sequence_of_colon_words_reads_as_yaml_1_2() -> None:
    # libyaml (1.1) refuses `a:b` inside [...]; the loader falls back to ruamel's parser.
    assert parse("c: [deployment:preflight, x:y]\n") == {"c": ["deployment:preflight", "x:y"]}


def test_paths_leaving_the_root_are_refused(tmp_path: Path) -> None:
    for rel in ("../x.yaml", "/etc/passwd", "a/../../x.yaml", "a//b.yaml"):
        loaded = loading.load_file(tmp_path, rel)
        assert loaded.documents == ()
        assert "repo" in loaded.diagnostics[0].message or "normalised" in \
            loaded.diagnostics[0].message


def test_a_symlinked_parent_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x.yaml").write_text("a: 1\n")
    os.symlink(tmp_path / "real", tmp_path / "link")
    loaded = loading.load_file(tmp_path, "link/x.yaml")
    assert loaded.documents == () and "symbolic link" in loaded.diagnostics[0].message
    assert loading.load_file(tmp_path, "real/x.yaml").documents[0].value == {"a": 1}


def test_dot_directories_are_skipped_and_order_is_deterministic(tmp_path: Path) -> None:
    for rel in ("b.yaml", "a/z.yml", "a/b.yaml", ".git/x.yaml", ".reconcile/j.yaml",
                "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("a: 1\n")
    assert loading.discover(tmp_path) == (("a/b.yaml", "a/z.yml", "b.yaml"), ())


def _blobs(repo: Path) -> dict[str, bytes]:
    return {p.relative_to(repo).as_posix(): p.read_bytes() for p in sorted(repo.rglob("*.yaml"))}


def test_blob_cache_reparses_only_changed_files(repo: Path) -> None:
    """What the watcher keeps between commits: a file whose blob is unchanged is neither
    read nor validated again; a changed one is, and its new content counts."""
    contents = _blobs(repo)
    asked: list[str] = []

    def files() -> list[tuple[str, str]]:
        return [(rel, hashlib.sha1(data).hexdigest()) for rel, data in contents.items()]

    def read(oids: Sequence[str]) -> list[bytes | int]:
        asked.extend(oids)
        by_oid = {hashlib.sha1(data).hexdigest(): data for data in contents.values()}
        return [by_oid[oid] for oid in oids]

    cache = BlobCache()
    first = load_blobs(repo, files(), read, cache=cache)
    assert first.valid and cache.misses == 8 and cache.hits == 0 and len(asked) == 8
    second = load_blobs(repo, files(), read, cache=cache)
    assert second.state == first.state and cache.hits == 8 and len(asked) == 8

    contents["services/search.yaml"] = contents["services/search.yaml"].replace(
        b"egress: []", b"egress: [{host: x.example}]")
    third = load_blobs(repo, files(), read, cache=cache)
    assert cache.misses == 9 and cache.hits == 15 and len(asked) == 9
    assert third.state is not None
    search = third.state.service_by_name("search")
    assert search is not None and search.egress is not None and search.egress[0].host == "x.example"


def test_each_file_is_read_once_per_load(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One walk, one read and one parse per file: nothing is read twice, nothing kept."""
    reads: list[str] = []
    real = loading.load_file

    def counted(root: Path, rel: str) -> loading.LoadedFile:
        reads.append(rel)
        return real(root, rel)

    monkeypatch.setattr(loading, "load_file", counted)
    result = load_repo(repo)
    assert result.valid and sorted(reads) == sorted(result.files) and len(reads) == 8
    assert load_repo(repo).state == result.state and len(reads) == 16


@given(st.binary(max_size=2000))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    documents, problems = loading.parse_bytes(data, "fuzz.yaml")
    assert not (documents and problems)
    for problem in problems:
        assert problem.line >= 1 and problem.path == "fuzz.yaml"


_yamlish = st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]),
                   max_size=20)


@given(st.text(alphabet="-[]{}:,#&*!|>'\"%@` \n\tabc019.~?", max_size=300))
@settings(max_examples=300, deadline=None)
def test_yaml_punctuation_soup_never_raises(text: str) -> None:
    documents, problems = loading.parse_bytes(text.encode(), "fuzz.yaml")
    assert not (documents and problems)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | _yamlish
    | st.floats(allow_nan=False, allow_infinity=False, width=32),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_yamlish, inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(_yamlish, json_values, min_size=1, max_size=5))
@settings(max_examples=200, deadline=None)
def test_json_text_reads_back_as_the_same_values(value: dict[str, object]) -> None:
    # JSON is YAML 1.2: the loader must read it exactly (quoted strings stay strings).
    text = json.dumps(value, ensure_ascii=False)
    documents, problems = loading.parse_bytes(text.encode(), "j.yaml")
    assert problems == ()
    assert documents[0].value == value


_soup = st.lists(st.sampled_from([
    "a", "b:c", "deployment:preflight", "1", "0443", "no", "'q:r'", '"s:t"', "[", "]", "{", "}",
    ", ", ": ", ":", "\n", "  ", "- ", "? ", "#c", "&x ", "*x", "!t ", "http://h/p", "x:1",
]), max_size=40).map("".join)


def _written(document: loading.YamlDocument) -> dict[loading.PathKey, loading.Position]:
    def value_at(path: loading.PathKey) -> object:
        value: object = document.value
        for part in path:
            value = value[part]  # type: ignore[index]
        return value

    return {p: pos for p, pos in document.positions.items() if value_at(p) is not None}


@given(_soup)
@settings(max_examples=500, deadline=None)
def test_the_libyaml_fast_path_agrees_with_the_pure_parser(text: str) -> None:
    fast = loading.parse_bytes(text.encode(), "t.yaml")
    pure = loading.parse_bytes(text.encode(), "t.yaml", pure=True)
    if not pure[1]:  # where the authoritative parser accepts, the fast path says the same
        assert [d.value for d in fast[0]] == [d.value for d in pure[0]]
        # Positions agree for every written value (the two put an empty value's mark
        # on either side of the blank after `:`; nothing points at those).
        assert [_written(d) for d in fast[0]] == [_written(d) for d in pure[0]]
        assert fast[1] == ()
    else:
        assert fast[0] == ()


def test_flow_lists_of_capabilities_take_the_fast_path() -> None:
    text = b"c: [deployment:preflight, 'x:y', {k: v:w}]\n"
    assert loading.parse_bytes(text, "t.yaml")[0][0].value == {
        "c": ["deployment:preflight", "x:y", {"k": "v:w"}]}
