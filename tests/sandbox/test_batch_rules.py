"""The [ext] paging and ETag rules (``reconciler.sandbox.batch``), without a sandbox."""

from __future__ import annotations

import pytest

from reconciler.sandbox import batch


def test_a_cursor_round_trips_and_only_issued_ones_are_accepted() -> None:
    text = batch.encode_cursor("checkout", 3)
    assert batch.decode_cursor(text) == batch.Cursor(after="checkout", page=3)
    assert batch.decode_cursor(None) == batch.decode_cursor("") == batch.Cursor()
    for bad in ("not base64!", "e30", batch.encode_cursor("x", 0), 17, "A" * 3000):
        with pytest.raises(batch.PageRequestError):
            batch.decode_cursor(bad)


@pytest.mark.parametrize(("given", "size"), [
    (None, batch.DEFAULT_PAGE), ("", batch.DEFAULT_PAGE), (1, 1), ("7", 7),
    (batch.MAX_PAGE, batch.MAX_PAGE), (batch.MAX_PAGE + 1, batch.MAX_PAGE), ("99999", 1000)])
def test_page_size_defaults_and_clamps(given: object, size: int) -> None:
    assert batch.page_size(given) == size


@pytest.mark.parametrize("given", [0, -1, "0", "x", "1.5", True, 2.0, "٣"])
def test_page_size_refuses_what_is_not_a_positive_integer(given: object) -> None:
    with pytest.raises(batch.PageRequestError, match="limit"):
        batch.page_size(given)


def test_keyset_pages_cover_every_id_once_and_end_with_no_cursor() -> None:
    ids = sorted(f"app{i:03d}" for i in range(10))
    seen: list[str] = []
    cursor = batch.Cursor()
    pages = 0
    while True:
        page, following = batch.paginate(ids, cursor, 3)
        seen += page
        pages += 1
        if following is None:
            break
        cursor = batch.decode_cursor(following)
        assert cursor.page == pages
    assert seen == ids and pages == 4
    assert batch.paginate([], batch.Cursor(), 3) == ([], None)
    assert batch.paginate(ids, batch.Cursor(), 10) == (ids, None)


def test_a_page_after_a_removed_id_starts_at_the_next_one() -> None:
    cursor = batch.Cursor(after="b", page=1)
    assert batch.paginate(["a", "c", "d"], cursor, 5) == (["c", "d"], None)


@pytest.mark.parametrize(("header", "hit"), [
    (None, False), ('"abc"', True), ('W/"abc"', True), ('"x", "abc"', True), ("*", True),
    ('"abcd"', False), ("", False), ("abc", False)])
def test_if_none_match_compares_weakly_over_a_list(header: str | None, hit: bool) -> None:
    assert batch.none_match_hits(header, '"abc"') is hit
