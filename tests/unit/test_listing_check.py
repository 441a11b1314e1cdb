"""ListingCheck: what every listing page must be, without sockets."""

from __future__ import annotations

import pytest

from aioflux import ProtocolError
from aioflux._core.pages import ListingCheck
from aioflux._core.types import ListPage, ObjectInfo


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


def test_a_common_prefix_outside_the_prefix_fails() -> None:
    with pytest.raises(ProtocolError, match="the prefix 'q/'"):
        ListingCheck("gs", "b", "p/", None, None).page(_page(prefixes=("p/a/", "q/")))
