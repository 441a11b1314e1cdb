"""``stream(..., ordered=True)`` yields in listing order: name order, the
same every run, whatever the parallel listers' interleaving.

It yielded in page-arrival order across the listers (name order within a
page only), so a loop that resumed by skipping the objects it had already
seen skipped and repeated objects from one run to the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioflux._core.records.types import ListPage
from aioflux._engines.iterables import stream
from aioflux.testing import MemoryStore

# Ten pages and more: the first lister keeps at most eight when it splits.
NAMES = [f"p/{i:05d}" for i in range(12_000)]


class AboveFirst(MemoryStore):
    """A store whose pages naming anything in the second page's worth of
    names wait until a page past them has gone out: a range above the
    lowest always brings pages before the lowest's second page, however
    the listers split."""

    def __init__(self) -> None:
        super().__init__(buckets=["bkt"])
        self.low, self.high = NAMES[1000], NAMES[2000]
        self.above = asyncio.Event()

    def list(self, bucket: str, prefix: str = "", **kwargs: Any) -> AsyncIterator[ListPage]:
        return self._held(super().list(bucket, prefix, **kwargs))

    async def _held(self, pages: AsyncIterator[ListPage]) -> AsyncIterator[ListPage]:
        async for page in pages:
            names = [o.name for o in page.objects]
            if any(self.low <= n < self.high for n in names):
                # At most some 10,000 loop turns: if no lister lists past
                # ``high``, the test fails on ``above`` instead of hanging.
                for _ in range(10_000):
                    if self.above.is_set():
                        break
                    await asyncio.sleep(0)
            elif names and names[0] >= self.high:
                self.above.set()
            yield page


async def seeded() -> AboveFirst:
    store = AboveFirst()
    for name in NAMES:
        await store.write("bkt", name, name.encode())
    return store


@pytest.mark.parametrize("list_concurrency", [2, 16])
async def test_ordered_stream_yields_in_name_order_across_listers(
        list_concurrency: int) -> None:
    store = await seeded()
    got = [(item.name, bytes(item.data)) async for item in stream(
        store, "bkt", "p/", ordered=True, list_concurrency=list_concurrency, concurrency=32)]
    assert store.above.is_set()  # ranges above the first did bring pages first
    assert [name for name, _ in got] == NAMES
    assert all(data == name.encode() for name, data in got)


async def test_unordered_stream_yields_every_object_once() -> None:
    store = await seeded()
    got = [item.name async for item in stream(store, "bkt", "p/", list_concurrency=16,
                                              concurrency=32)]
    assert store.above.is_set()
    assert sorted(got) == NAMES
