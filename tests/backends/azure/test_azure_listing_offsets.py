"""Azure listings with a delimiter and offsets, against Azurite: a prefix is
reported only if it holds a name inside the offsets, as MemoryStore (and
GCS) report it, though List Blobs (which has no offsets) reports every
prefix holding any name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioflux import ClientConfig
from aioflux.azure import AzureStore
from tests.backends.listing_oracle import assert_lists_as_memory, listed
from tests.conftest import FAST_RETRY, unique_bucket
from tests.servers.azurite import Azurite

NAMES = ["ab/x", "ab/y", "m/1", "n/09/x", "n/10/a1", "n/10/a2", "n/10/a3", "n/10/b1",
         "n/10/x", "n/10/y", "n/11/x", "z"]

CASES = [
    {"prefix": "n/", "end_offset": "n/10/a1"},
    {"prefix": "n/", "end_offset": "n/10/y"},
    {"prefix": "n/", "start_offset": "n/10/y"},
    {"prefix": "n/", "start_offset": "n/10/z"},
    {"prefix": "n/", "start_offset": "n/10/b0", "end_offset": "n/10/b5"},
    {"prefix": "n/", "start_offset": "n/10/b2", "end_offset": "n/10/b5"},
    {"prefix": "n/", "start_offset": "n/10/y", "end_offset": "n/10/y"},
    {"prefix": "", "start_offset": "ab/zz"},
    {"prefix": "", "start_offset": "ab/y"},
    {"prefix": "", "start_offset": "ab/zz", "end_offset": "n/10/"},
    {"prefix": "", "start_offset": "ab/y", "end_offset": "n/09/y"},
]


@pytest.fixture
async def az(azurite: Azurite) -> AsyncIterator[tuple[AzureStore, str]]:
    async with AzureStore(ClientConfig(retry=FAST_RETRY),
                          connection_string=azurite.connection_string) as store:
        container = unique_bucket("az")
        await store.create_bucket(container)
        for name in NAMES:
            await store.write(container, name, b"x")
        yield store, container


@pytest.mark.parametrize("page_size", [1, 1000])
async def test_a_prefix_is_listed_only_with_a_name_inside_the_offsets(
        az: tuple[AzureStore, str], page_size: int) -> None:
    store, container = az
    await assert_lists_as_memory(store, container, NAMES, CASES, page_size)


async def _requests(store: AzureStore, container: str, page_size: int,
                    case: dict[str, Any]) -> int:
    before = store.stats.requests
    await listed(store, container, page_size, case)
    return store.stats.requests - before


async def test_a_prefix_an_offset_falls_inside_is_listed_to_its_first_name_inside(
        az: tuple[AzureStore, str]) -> None:
    store, container = az
    # List Blobs has no offsets: with them or without, the same pages.
    plain = await _requests(store, container, 1, {"prefix": "n/"})
    # The end offset's prefix: its first name, below the end, decides it.
    assert await _requests(store, container, 1, {"prefix": "n/", "end_offset": "n/10/y"}) == (
        plain + 1)
    # Both offsets in it: only the names both begin with ("n/10/b") are
    # listed, not the three "n/10/a" names before them.
    assert await _requests(store, container, 1, {"prefix": "n/", "start_offset": "n/10/b0",
                                                 "end_offset": "n/10/b5"}) == plain + 1
    # No offset inside a prefix: nothing more.
    assert await _requests(store, container, 1, {"prefix": "n/", "start_offset": "n/10/",
                                                 "end_offset": "n/11/"}) == plain
