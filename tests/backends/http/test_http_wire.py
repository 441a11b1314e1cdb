"""The version an answer states (``pin_of``), read from its headers alone."""

from __future__ import annotations

import pytest

from aioflux._net.web import Pin, pin_of

DATE = "Wed, 25 Nov 2026 10:00:00 GMT"


@pytest.mark.parametrize("repeat", [1, 3])
def test_a_last_modified_that_is_no_date_is_no_validator(repeat: int) -> None:
    # Asked again and again (every ranged read of a file states the same
    # headers): the same answer each time.
    for _ in range(repeat):
        assert pin_of({"etag": '"a"', "last-modified": DATE}) == Pin('"a"', DATE)
        assert pin_of({"etag": '"a"', "last-modified": "yesterday"}) == Pin('"a"', None)
        assert pin_of({"etag": 'W/"w"', "last-modified": "32 Foo 99"}) == Pin(None, None,
                                                                               'W/"w"')
        assert pin_of({"last-modified": DATE}) == Pin(None, DATE)
        assert pin_of({}) == Pin(None, None)
