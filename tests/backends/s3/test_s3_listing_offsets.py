"""S3 listings with a delimiter and offsets: a prefix is reported only if it
holds a key inside the offsets, as MemoryStore (and GCS) report it, though
S3 rolls every key under a prefix into it. On moto, which leaves out a
common prefix not above start-after as AWS documents, and on the emulator's
S3 face, which lists it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from aioflux import ClientConfig, S3Store
from aioflux.testing import Emulator
from tests.backends.listing_oracle import assert_lists_as_memory, listed
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket

# "ab/\ue000" as a start offset lowers into the surrogates: start-after is
# then "ab/", which lets "ab/\u4e2d" (below the offset) through.
NAMES = ["ab/x", "ab/y", "ab/\u4e2d", "m/1", "n/09/x", "n/10/x", "n/10/y", "n/11/x", "z"]

CASES = [
    {"prefix": "n/", "end_offset": "n/10/x"},
    {"prefix": "n/", "end_offset": "n/10/y"},
    {"prefix": "n/", "start_offset": "n/10/y"},
    {"prefix": "n/", "start_offset": "n/10/z"},
    {"prefix": "n/", "start_offset": "n/10/x", "end_offset": "n/10/y"},
    {"prefix": "n/", "start_offset": "n/10/y", "end_offset": "n/10/y"},
    {"prefix": "", "start_offset": "ab/zz"},
    {"prefix": "", "start_offset": "ab/\ue000"},
    {"prefix": "", "start_offset": "ab/zz", "end_offset": "n/10/"},
    {"prefix": "", "start_offset": "ab/y", "end_offset": "n/09/y"},
]


@pytest.fixture(params=["moto", "emulator"])
async def s3(request: pytest.FixtureRequest) -> AsyncIterator[tuple[S3Store, str]]:
    server: MotoS3 | Emulator = request.getfixturevalue(
        "moto_s3" if request.param == "moto" else "emulator")
    endpoint = server.endpoint if isinstance(server, MotoS3) else server.s3_endpoint
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint,
                       region="us-east-1") as store:
        bucket = unique_bucket("s3")
        await store.create_bucket(bucket)
        for name in NAMES:
            await store.write(bucket, name, b"x")
        yield store, bucket


@pytest.mark.parametrize("page_size", [1, 1000])
async def test_a_prefix_is_listed_only_with_a_key_inside_the_offsets(
        s3: tuple[S3Store, str], page_size: int) -> None:
    store, bucket = s3
    await assert_lists_as_memory(store, bucket, NAMES, CASES, page_size)


async def test_only_a_prefix_an_offset_falls_inside_costs_a_request(
        s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    before = store.stats.requests
    assert await listed(store, bucket, 1000, {"prefix": "n/", "end_offset": "n/10/x"}) == (
        [], ["n/09/"])
    assert store.stats.requests - before == 2
    before = store.stats.requests
    # Both offsets in one prefix: one request decides it.
    assert await listed(store, bucket, 1000, {"prefix": "n/", "start_offset": "n/10/x",
                                              "end_offset": "n/10/y"}) == ([], ["n/10/"])
    assert store.stats.requests - before == 2
    before = store.stats.requests
    # An offset in each of two prefixes: two requests, however many prefixes.
    assert await listed(store, bucket, 1000, {"prefix": "", "start_offset": "ab/zz",
                                              "end_offset": "n/10/y"}) == (
        [], ["ab/", "m/", "n/"])
    assert store.stats.requests - before == 3
    before = store.stats.requests
    # Neither offset inside a prefix: the listing alone.
    assert await listed(store, bucket, 1000, {"prefix": "n/", "start_offset": "n/10/",
                                              "end_offset": "n/11/"}) == ([], ["n/10/"])
    assert store.stats.requests - before == 1
