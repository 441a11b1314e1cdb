"""ListingCheck: what every listing page must be, without sockets."""

from __future__ import annotations

import pytest

from aioflux import ProtocolError
from aioflux._core.checks import pages
from aioflux._core.checks.pages import ListingCheck, PartListingCheck, UploadListingCheck
from aioflux._core.records.types import ListPage, ObjectInfo


def _page(*names: str, prefixes: tuple[str, ...] = ()) -> ListPage:
    objects = [ObjectInfo("b", n, 1, 1, None, None, None, None, None, None, "s3")
               for n in names]
    return ListPage(objects=objects, prefixes=list(prefixes), next_page_token=None)


def test_pages_that_keep_the_promise_pass_unchanged() -> None:
    check = ListingCheck("s3", "b", "p/", "p/b", "p/y")
    first = _page("p/b", "p/c", prefixes=("p/d/",))
    assert check.page(first) is first
    assert check.page(_page("p/x")).objects[0].name == "p/x"
    assert check.page(_page()).objects == []  # an empty page is fine anywhere


@pytest.mark.parametrize(("names", "why"), [
    (("p/a", "q/b"), "'q/b', which is not under the prefix"),
    (("o/a", "p/b"), "'o/a', which is not under the prefix"),
    (("p/b", "p/a"), "'p/a' after 'p/b'"),
    (("p/a", "p/a"), "'p/a' after 'p/a'"),
])
def test_a_page_out_of_order_or_outside_the_prefix_fails(names: tuple[str, ...],
                                                         why: str) -> None:
    with pytest.raises(ProtocolError, match=why) as info:
        ListingCheck("gs", "b", "p/", None, None).page(_page(*names))
    assert str(info.value).startswith("list gs://b/p/ failed: the server listed ")
    assert (info.value.operation, info.value.bucket, info.value.name) == ("list", "b", "p/")


def test_order_holds_across_pages() -> None:
    check = ListingCheck("gs", "b", "", None, None)
    check.page(_page("a", "c"))
    with pytest.raises(ProtocolError, match="'b' after 'c'"):
        check.page(_page("b"))


def test_long_names_are_cut_short_in_the_message() -> None:
    with pytest.raises(ProtocolError) as info:
        ListingCheck("gs", "b", "p/", None, None).page(_page("x" * 10_000))
    assert len(str(info.value)) < 400


def test_an_unordered_store_is_held_to_the_prefix_and_offsets_only() -> None:
    check = ListingCheck("s3", "b--use1-az4--x-s3", "p/", "p/b", None, ordered=False)
    check.page(_page("p/z", "p/c"))
    check.page(_page("p/d"))
    with pytest.raises(ProtocolError, match="'q', which is not under the prefix"):
        check.page(_page("p/e", "q"))
    with pytest.raises(ProtocolError, match="below the start offset 'p/b'"):
        check.page(_page("p/a"))


def test_a_store_with_its_own_order_still_names_each_object_once() -> None:
    # Azure: UTF-16 code units (U+1F600 before U+E000), or paths ('A/x' before 'A-B').
    check = ListingCheck("az", "c", "p/", None, "p/y", ordered=False, once=True)
    check.page(_page("p/a\U0001F600", "p/a\ue000", "p/A", "p/A/x"))
    check.page(_page("p/A-B", "p/A-C"))
    # A page overlapping the one before (held: two pages, not the listing).
    with pytest.raises(ProtocolError, match="listed 'p/A-C' twice") as info:
        check.page(_page("p/b", "p/A-C"))
    assert "each object once" in str(info.value)
    with pytest.raises(ProtocolError, match="'p/c' twice"):
        ListingCheck("az", "c", "", None, None, ordered=False, once=True).page(
            _page("p/c", "p/c"))
    with pytest.raises(ProtocolError, match="at or past the end offset"):
        check.page(_page("p/z"))
    # The stores that list in name order keep the order check.
    with pytest.raises(ProtocolError, match="'p/a' after 'p/b'"):
        ListingCheck("gs", "b", "p/", None, None, once=True).page(_page("p/b", "p/a"))


def test_a_common_prefix_outside_the_prefix_fails() -> None:
    with pytest.raises(ProtocolError, match="the prefix 'q/'"):
        ListingCheck("gs", "b", "p/", None, None).page(_page(prefixes=("p/a/", "q/")))


def _next(token: str | None, *names: str) -> ListPage:
    page = _page(*names)
    return ListPage(objects=page.objects, prefixes=page.prefixes, next_page_token=token)


def test_a_page_token_given_twice_fails_without_showing_it() -> None:
    check = ListingCheck("s3", "b", "p/", None, None)
    check.page(_next("tok-1", "p/a"))
    check.page(_next("tok-2"))  # an empty page with a fresh token is legal
    with pytest.raises(ProtocolError, match="a page token it had already given") as info:
        check.page(_next("tok-1"))
    assert "tok-1" not in str(info.value)
    assert str(info.value).startswith("list s3://b/p/ failed: the server answered ")


def test_empty_pages_without_end_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "MOST_EMPTY_PAGES", 3)
    check = ListingCheck("gs", "b", "p/", None, None)
    for token in ("t1", "t2", "t3"):
        check.page(_next(token))
    check.page(_next("t4", "p/a"))  # a name: the count starts again
    for token in ("t5", "t6", "t7"):
        check.page(_next(token))
    with pytest.raises(ProtocolError, match="answered 4 empty pages in a row") as info:
        check.page(_next("t8"))
    assert str(info.value).startswith("list gs://b/p/ failed: the server answered 4 empty")


def test_each_listing_has_its_own_tokens() -> None:
    ListingCheck("gs", "b", "", None, None).page(_next("t"))
    assert ListingCheck("gs", "b", "", None, None).page(_next("t")).next_page_token == "t"


def test_part_numbers_and_markers_must_rise() -> None:
    check = PartListingCheck("s3", "b", "obj")
    assert [check.part("1"), check.part("3")] == [1, 3]
    assert check.next_marker("3") == "3"
    assert check.next_marker("5") == "5"  # an empty page may skip ahead
    with pytest.raises(ProtocolError, match="listed part 5 after part 5"):
        check.part("5")
    check = PartListingCheck("gs", "b", "obj")
    check.next_marker("2")
    with pytest.raises(ProtocolError, match="next part number marker 2 after the marker 2"
                       ) as info:
        check.next_marker("2")
    assert str(info.value).startswith("list parts gs://b/obj failed: the server answered ")
    assert (info.value.operation, info.value.name) == ("list parts", "obj")


@pytest.mark.parametrize("value", ["", "x", "0", "-1", "+2", "1_0", "²", "10001"])
def test_a_part_number_must_be_one_to_10000(value: str) -> None:
    with pytest.raises(ProtocolError, match="part numbers are 1 to 10000"):
        PartListingCheck("s3", "b", "obj").part(value)
    with pytest.raises(ProtocolError, match="part numbers are 1 to 10000"):
        PartListingCheck("s3", "b", "obj").next_marker(value)


def test_uploads_stay_under_the_prefix_each_once() -> None:
    check = UploadListingCheck("s3", "b", "tmp/")
    for key, upload in (("tmp/b", "y"), ("tmp/a", "z"), ("tmp/b", "x"), ("tmp/a", "y")):
        check.upload(key, upload)  # listed by start time: keys and ids in any order
    with pytest.raises(ProtocolError, match="'prod/x', which is not under the prefix") as info:
        check.upload("prod/x", "u")
    assert str(info.value).startswith("list multipart uploads s3://b/tmp/ failed: the server ")
    with pytest.raises(ProtocolError, match="an upload of 'tmp/b' twice") as info:
        check.upload("tmp/b", "x")
    assert "'x'" not in str(info.value)


def test_upload_markers_must_move_forward() -> None:
    check = UploadListingCheck("gs", "b", "")
    check.upload("k", "u1")
    check.next_markers("k", "u1")
    check.upload("k", "u2")  # the same key, a later upload of it
    check.next_markers("k", "u2")
    check.next_markers("m", "")  # an empty page may move on
    with pytest.raises(ProtocolError, match="next key marker 'k' after 'm'"):
        check.next_markers("k", "u3")
    with pytest.raises(ProtocolError, match=r"the next markers \(key 'm'\) twice") as info:
        check.next_markers("m", "")
    assert "u1" not in str(info.value)
    with pytest.raises(ProtocolError, match="'l' after the key marker 'm'"):
        check.upload("l", "u")  # nothing below the key marker
