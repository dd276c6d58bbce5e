"""``shell.pinning``: the release is rewritten in place and every byte outside the replaced
scalars stays the file's own -- comments, key order, quoting, indentation, flow style, CRLF,
``---``, the schema comment, a byte-order mark -- checked byte for byte; what cannot be
rewritten faithfully is refused with nothing written; the write is atomic."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reconciler.shell import pinning
from reconciler.shell.pinning import PinFileError, Values

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLES = PROJECT / "examples" / "desired-state" / "services"
LEDGER = PROJECT / "tests" / "validation" / "fixtures" / "ledger.yaml"

OLD = "sha256:" + "1" * 64
NEW = "sha256:" + "f" * 64
VALUES = Values(digest=NEW, tag="v2.5.0")


def assert_only_release_changed(before: bytes, after: bytes, replaced: dict[str, str],
                                inserted: tuple[bytes, ...] = ()) -> None:
    """Every line equal, except lines where exactly the old values became the new ones
    (and the lines in ``inserted``, added whole)."""
    old_lines = before.splitlines(keepends=True)
    new_lines = [line for line in after.splitlines(keepends=True) if line not in inserted]
    assert len(new_lines) + len(inserted) == len(after.splitlines(keepends=True))
    assert len(old_lines) == len(new_lines)
    changed = 0
    for old, new in zip(old_lines, new_lines, strict=True):
        if old == new:
            continue
        expected = old
        for was, now in replaced.items():
            expected = expected.replace(was.encode(), now.encode())
        assert new == expected, (old, new)
        changed += 1
    assert changed >= 1


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_service_changes_only_its_digest_and_tag_lines(path: Path) -> None:
    before = path.read_bytes()
    name = path.stem
    text = before.decode()
    old_digest = text.split("digest: ")[1].split()[0]
    old_tag = text.split("  tag: ")[1].split()[0]
    after = pinning.rewrite(before, path.name, name, VALUES)
    assert_only_release_changed(before, after, {old_digest: NEW, f"tag: {old_tag}":
                                                "tag: v2.5.0"})
    # Two lines differ, nothing else: same length, same first (schema comment) line.
    assert after.splitlines()[0] == before.splitlines()[0]
    assert sum(a != b for a, b in zip(before.splitlines(), after.splitlines(),
                                      strict=True)) == 2


COMMENTS_EVERYWHERE = f"""\
# yaml-language-server: $schema=../schemas/desired-state.schema.json
---   # a document start with a comment
# before the first key
apiVersion: reconcile/v1   # trailing
kind: Service
name: checkout # the name
serviceId: svc-checkout

appId: checkout
release:     # the pin below is what pin rewrites
  # inside the release, before the host
  registryHost: registry.sandbox.test
  repository: shop/checkout   # repo
  digest: {OLD}   # was v2.4.0
  # between digest and tag
  tag: v2.4.0 #   tag comment
  mediaType: application/vnd.oci.image.index.v1+json
# between blocks

egress:
    -   host: api.stripe.com      # odd indentation kept
        port: 443
    - {{ host: hooks.slack.com ,  port: 443 }}
# the end
""".encode()


def test_comments_blank_lines_odd_indentation_and_document_start_are_kept() -> None:
    after = pinning.rewrite(COMMENTS_EVERYWHERE, "checkout.yaml", "checkout", VALUES)
    assert_only_release_changed(COMMENTS_EVERYWHERE, after, {OLD: NEW, "v2.4.0 #": "v2.5.0 #"})
    assert b"# was v2.4.0" in after  # comments are never edited...
    lines = pinning.comment_mentions(after, ["v2.4.0"])
    assert lines == [14]  # ...but pointed at


FLOW = f"""\
apiVersion: reconcile/v1
kind: Service
name: checkout
serviceId: svc-checkout
appId: checkout
release: {{registryHost: registry.sandbox.test, repository: shop/checkout,
           digest: {OLD}, tag: v2.4.0 }}
egress: [ {{host: api.stripe.com}} , {{ host: hooks.slack.com, port: 443 }} ]
""".encode()


def test_a_flow_style_release_keeps_its_layout() -> None:
    after = pinning.rewrite(FLOW, "checkout.yaml", "checkout", VALUES)
    assert after == FLOW.replace(OLD.encode(), NEW.encode()).replace(b"v2.4.0", b"v2.5.0")


def test_a_flow_style_release_without_a_tag_gets_one_after_the_digest() -> None:
    source = FLOW.replace(b", tag: v2.4.0 }", b" }")
    after = pinning.rewrite(source, "checkout.yaml", "checkout", VALUES)
    assert after == source.replace(OLD.encode(), NEW.encode() + b", tag: v2.5.0")


def test_crlf_line_endings_are_kept() -> None:
    source = COMMENTS_EVERYWHERE.replace(b"\n", b"\r\n")
    after = pinning.rewrite(source, "checkout.yaml", "checkout", VALUES)
    assert after.count(b"\r\n") == source.count(b"\r\n") and b"\n" not in after.replace(
        b"\r\n", b"")
    assert_only_release_changed(source, after, {OLD: NEW, "v2.4.0 #": "v2.5.0 #"})


def test_crlf_file_without_a_tag_gets_a_crlf_tag_line() -> None:
    source = COMMENTS_EVERYWHERE.replace(b"  tag: v2.4.0 #   tag comment\n", b"").replace(
        b"\n", b"\r\n")
    after = pinning.rewrite(source, "checkout.yaml", "checkout", VALUES)
    assert_only_release_changed(source, after, {OLD: NEW}, inserted=(b"  tag: v2.5.0\r\n",))
    assert after.index(b"  tag: v2.5.0\r\n") > after.index(NEW.encode())


def test_a_byte_order_mark_is_kept() -> None:
    source = b"\xef\xbb\xbf" + FLOW
    after = pinning.rewrite(source, "checkout.yaml", "checkout", VALUES)
    assert after.startswith(b"\xef\xbb\xbf") and after[3:] == pinning.rewrite(
        FLOW, "checkout.yaml", "checkout", VALUES)


def test_quoting_styles_are_kept() -> None:
    source = (f'kind: Service\nname: checkout\nrelease:\n  digest: "{OLD}"\n'
              "  tag: 'v2.4.0'\n").encode()
    after = pinning.rewrite(source, "s.yaml", "checkout", VALUES)
    assert after == (f'kind: Service\nname: checkout\nrelease:\n  digest: "{NEW}"\n'
                     "  tag: 'v2.5.0'\n").encode()


def test_a_tag_that_would_not_read_back_as_a_string_is_quoted() -> None:
    source = f"kind: Service\nname: checkout\nrelease:\n  digest: {OLD}\n  tag: v1\n".encode()
    after = pinning.rewrite(source, "s.yaml", "checkout", Values(NEW, "1.10"))
    assert after.endswith(b'  tag: "1.10"\n')


def test_a_digest_on_the_line_after_its_key_is_rewritten_there() -> None:
    source = (f"kind: Service\nname: checkout\nrelease:\n  digest:\n    {OLD}\n"
              "  tag: v2.4.0\n").encode()
    after = pinning.rewrite(source, "s.yaml", "checkout", VALUES)
    assert after == source.replace(OLD.encode(), NEW.encode()).replace(b"v2.4.0", b"v2.5.0")


def test_a_missing_tag_is_added_after_the_digest_even_on_the_last_line() -> None:
    source = f"kind: Service\nname: checkout\nrelease:\n    digest: {OLD}".encode()
    after = pinning.rewrite(source, "s.yaml", "checkout", VALUES)
    assert after == f"kind: Service\nname: checkout\nrelease:\n    digest: {NEW}\n" \
        "    tag: v2.5.0".encode()


def test_only_the_named_service_of_a_multi_document_file_changes() -> None:
    other = f"---\nkind: Service\nname: search\nrelease:\n  digest: {OLD}\n  tag: v2.4.0\n"
    source = (COMMENTS_EVERYWHERE.decode() + other + "...\n").encode()
    after = pinning.rewrite(source, "two.yaml", "checkout", VALUES)
    assert after.endswith(other.encode() + b"...\n")
    assert after.count(OLD.encode()) == 1


def test_version_changes_only_when_given_and_evidence_is_untouched() -> None:
    source = LEDGER.read_bytes()
    old_digest = source.split(b"digest: ")[1].split()[0].decode()
    after = pinning.rewrite(source, "ledger.yaml", "ledger",
                            Values(digest=NEW, tag="v1.1.0", version="1.1.0"))
    # digest, tag and version: three lines; five subjectDigest lines keep the old digest.
    diff = [(a, b) for a, b in zip(source.splitlines(), after.splitlines(), strict=True)
            if a != b]
    assert diff == [(f"  digest: {old_digest}".encode(), f"  digest: {NEW}".encode()),
                    (b"  tag: v1.0.0", b"  tag: v1.1.0"),
                    (b"  version: 1.0.0", b"  version: 1.1.0")]
    assert after.count(f"subjectDigest: {old_digest}".encode()) == 5
    # The rewritten document no longer validates: its evidence is bound to the old digest.
    model, problems = pinning.candidate("ledger.yaml", after, "ledger")
    assert model is None and problems
    assert all("release.evidence" in p.field for p in problems)
    assert problems[0].line == 20 and old_digest in problems[0].message


def test_version_is_left_alone_when_not_given() -> None:
    source = LEDGER.read_bytes()
    after = pinning.rewrite(source, "ledger.yaml", "ledger", Values(digest=NEW, tag="v1.1.0"))
    assert b"  version: 1.0.0\n" in after


def test_the_candidate_of_a_clean_rewrite_validates() -> None:
    source = (EXAMPLES / "checkout.yaml").read_bytes()
    after = pinning.rewrite(source, "checkout.yaml", "checkout", VALUES)
    model, problems = pinning.candidate("checkout.yaml", after, "checkout")
    assert problems == () and model is not None
    assert (model.release.digest, model.release.tag) == (NEW, "v2.5.0")


@pytest.mark.parametrize("digest_text", [f">-\n    {OLD}", f"|-\n    {OLD}"])
def test_a_block_scalar_digest_is_refused(digest_text: str) -> None:
    source = f"kind: Service\nname: checkout\nrelease:\n  digest: {digest_text}\n".encode()
    with pytest.raises(PinFileError, match=r"s.yaml:4: release.digest is written over "):
        pinning.rewrite(source, "s.yaml", "checkout", VALUES)


def test_verify_refuses_any_other_difference() -> None:
    source = COMMENTS_EVERYWHERE
    good = pinning.rewrite(source, "c.yaml", "checkout", VALUES)
    pinning.verify(source, good, "c.yaml", "checkout", VALUES)
    bad = good.replace(b"port: 443", b"port: 444", 1)
    with pytest.raises(PinFileError, match="would change something else"):
        pinning.verify(source, bad, "c.yaml", "checkout", VALUES)
    reordered = good.replace(b"kind: Service\nname: checkout", b"name: checkout\nkind: Service")
    with pytest.raises(PinFileError, match="would change something else"):
        pinning.verify(source, reordered, "c.yaml", "checkout", VALUES)
    wrong_value = good.replace(NEW.encode(), OLD.encode())
    with pytest.raises(PinFileError, match="does not read back as the values written"):
        pinning.verify(source, wrong_value, "c.yaml", "checkout", VALUES)


def test_a_file_naming_no_such_service_is_refused() -> None:
    with pytest.raises(PinFileError, match="holds 0 Service documents named search"):
        pinning.rewrite(FLOW, "c.yaml", "search", VALUES)


# -- the atomic write -------------------------------------------------------------------------


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_write_replaces_the_file_and_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "checkout.yaml"
    path.write_bytes(FLOW)
    path.chmod(0o640)
    file = pinning.read(tmp_path, "checkout.yaml")
    new = pinning.rewrite(file.data, "checkout.yaml", "checkout", VALUES)
    pinning.write(file, new)
    assert path.read_bytes() == new
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_write_refuses_a_file_changed_since_it_was_read(tmp_path: Path) -> None:
    path = tmp_path / "checkout.yaml"
    path.write_bytes(FLOW)
    file = pinning.read(tmp_path, "checkout.yaml")
    new = pinning.rewrite(file.data, "checkout.yaml", "checkout", VALUES)
    path.write_bytes(FLOW + b"# someone else's edit\n")
    with pytest.raises(PinFileError, match="changed while pin ran; nothing written"):
        pinning.write(file, new)
    assert path.read_bytes() == FLOW + b"# someone else's edit\n"
    assert leftovers(tmp_path) == []


def test_a_failed_rename_leaves_the_file_whole_and_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkout.yaml"
    path.write_bytes(FLOW)
    file = pinning.read(tmp_path, "checkout.yaml")
    new = pinning.rewrite(file.data, "checkout.yaml", "checkout", VALUES)

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PinFileError, match="No space left on device; the file is unchanged"):
        pinning.write(file, new)
    assert path.read_bytes() == FLOW
    assert leftovers(tmp_path) == []


def test_read_refuses_a_symbolic_link(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_bytes(FLOW)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "real.yaml")
    with pytest.raises(PinFileError, match=r"link\.yaml: cannot read"):
        pinning.read(tmp_path, "link.yaml")


def test_verify_refuses_a_version_change_that_was_not_asked_for() -> None:
    source = LEDGER.read_bytes()
    good = pinning.rewrite(source, "ledger.yaml", "ledger", Values(digest=NEW, tag="v1.1.0"))
    bad = good.replace(b"  version: 1.0.0\n", b"  version: 9.9.9\n")
    with pytest.raises(PinFileError, match="would change something else"):
        pinning.verify(source, bad, "ledger.yaml", "ledger", Values(digest=NEW, tag="v1.1.0"))
