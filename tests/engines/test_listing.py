"""Parallel listing against an in-memory fake: exactly-once coverage."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import random
import selectors
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioflux._core.errors import StorageError
from aioflux._core.records.types import ListPage, ObjectInfo
from aioflux._core.storage.protocol import StoreFeatures
from aioflux._engines.listing import (
    _ORDERED_AHEAD_PAGES,
    COMPOSED_PREFIX,
    iter_objects,
    list_objects_parallel,
    split_point,
)


class FakeLister:
    """Serves ``list`` like GCS: sorted, prefix, half-open offsets, pages.

    With ``server_end=False`` it serves like S3 (the store's listing, as
    ``aioflux.s3`` does it): the server ignores the end, and names at or
    past it are served (counted) but dropped, ending the listing.
    """

    def __init__(self, names: list[str], page_size: int, seed: int, *,
                 server_end: bool = True, empty_first: bool = False) -> None:
        self.names = sorted(set(names))
        self.page_size = page_size
        self.rng = random.Random(seed)
        self.requests = 0
        self.served = 0  # names sent back, counting repeats
        self.features = StoreFeatures("gs" if server_end else "s3", end_offset=server_end)
        # A listing from an offset begins with an empty page and a token: GCS
        # may (a page ends on a time limit), and S3Store does where it could
        # not send start-after close below the offset (it drops the keys between).
        self.empty_first = empty_first

    async def list(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                   end_offset: str | None = None, page_size: int = 1000,
                   **_: Any) -> AsyncIterator[ListPage]:
        lo = bisect.bisect_left(self.names, max(prefix, start_offset or ""))
        size = min(self.page_size, page_size)
        server_end = None if not self.features.end_offset else end_offset
        if self.empty_first and start_offset is not None:
            self.requests += 1
            yield ListPage([], [], "e")
        while True:
            self.requests += 1
            for _ in range(self.rng.randrange(3)):
                await asyncio.sleep(0)  # interleave listers differently per run
            out: list[ObjectInfo] = []
            i = lo
            while i < len(self.names) and len(out) < size:
                name = self.names[i]
                if not name.startswith(prefix):
                    if name > prefix:
                        break
                elif server_end is not None and name >= server_end:
                    break
                else:
                    out.append(ObjectInfo(bucket, name, len(name), generation=i + 1))
                i += 1
            self.served += len(out)
            if end_offset is not None and out and out[-1].name >= end_offset:
                # The S3 store's own stop: the names past the end are dropped.
                yield ListPage([o for o in out if o.name < end_offset], [], None)
                return
            more = i < len(self.names) and self.names[i].startswith(prefix) and (
                end_offset is None or self.names[i] < end_offset)
            yield ListPage(out, [], "t" if more else None)
            if not more:
                return
            lo = i


names_strategy = st.lists(
    st.text(alphabet=st.sampled_from("ab/-09zZé\u4e2d"), min_size=1, max_size=12),
    max_size=300)


@settings(max_examples=150, deadline=None)
@given(names=names_strategy, page_size=st.integers(1, 7), concurrency=st.integers(1, 9),
       seed=st.integers(0, 1000), prefix=st.sampled_from(["", "a", "ab/", "z"]),
       server_end=st.booleans(), empty_first=st.booleans())
def test_parallel_listing_covers_every_name_exactly_once(
        names: list[str], page_size: int, concurrency: int, seed: int, prefix: str,
        server_end: bool, empty_first: bool) -> None:
    fake = FakeLister(names, page_size, seed, server_end=server_end, empty_first=empty_first)
    got = asyncio.run(list_objects_parallel(fake, "bkt", prefix,  # type: ignore[arg-type]
                                            concurrency=concurrency, skip_prefix=None))
    listed = [o.name for o in got]
    expected = sorted(n for n in set(names) if n.startswith(prefix) and not n.endswith("/"))
    assert sorted(listed) == expected
    assert len(listed) == len(set(listed))


@pytest.mark.parametrize("seed", range(6))
async def test_a_cursor_after_an_empty_first_page_is_listed_once(seed: int) -> None:
    # A lister going on from its cursor asks from that name (inclusive) and
    # dropped it from the first page only: after an empty first page it
    # listed the cursor again (S3 keys holding a control character, 12,000
    # of them on 16 listers: 3-6 keys twice).
    names = [f"k/{i:05d}" for i in range(3000)]
    fake = FakeLister(names, 100, seed, empty_first=True)
    got = await list_objects_parallel(fake, "bkt", "k/", concurrency=8)  # type: ignore[arg-type]
    assert sorted(o.name for o in got) == names


@settings(max_examples=100, deadline=None)
@given(low=st.text(alphabet="abc\u00e9", max_size=6),
       high=st.text(alphabet="abc\u00e9", max_size=6),
       seen=st.lists(st.text(alphabet="abcd\u00e9", max_size=6), max_size=5))
def test_split_point_is_strictly_inside(low: str, high: str, seen: list[str]) -> None:
    mid = split_point("", low, high or None, seen)
    if mid is not None:
        assert low < mid
        assert not high or mid < high


async def test_work_stealing_spreads_listing_and_sorts() -> None:
    names = [f"data/{i:06d}" for i in range(5000)] + [f"{COMPOSED_PREFIX}1-x", "data/dir/"]
    fake = FakeLister(names, 100, 1)
    got = await list_objects_parallel(fake, "bkt", "", concurrency=8, sort=True)  # type: ignore[arg-type]
    assert [o.name for o in got] == [f"data/{i:06d}" for i in range(5000)]


@pytest.mark.parametrize("seed", range(5))
async def test_splits_add_only_a_few_requests(seed: int) -> None:
    # 5000 names in pages of 100 need 50 pages. (Names from a second alphabet,
    # like the composed prefix above, leave most of the key space empty and
    # the count then swings between ~65 and ~270 with the interleaving.)
    fake = FakeLister([f"data/{i:06d}" for i in range(5000)], 100, seed)
    got = await list_objects_parallel(fake, "bkt", "", concurrency=8)  # type: ignore[arg-type]
    assert len(got) == 5000
    assert fake.requests < 50 + 8 * 4
    # After a split the lister's next page stops at the new end: only pages
    # already in flight and the repeated cursor are served twice (following
    # the old page token served 5300-5580 names here).
    assert fake.served < 5000 * 1.02


@pytest.mark.parametrize("seed", range(8))
async def test_without_end_offsets_a_ranges_last_request_asks_for_what_is_left(
        seed: int) -> None:
    # S3 answers a full page past a range's end; every name past it is parsed
    # and dropped. Sized last requests keep that to a few percent here (full
    # pages served 15-31% more names than listed), at no extra requests.
    names = [f"data/{i:06d}" for i in range(20_000)]
    fake = FakeLister(names, 1000, seed, server_end=False)
    got = await list_objects_parallel(fake, "bkt", "data/",  # type: ignore[arg-type]
                                      concurrency=16)
    assert sorted(o.name for o in got) == names
    assert fake.served < len(names) * 1.10, fake.served
    assert fake.requests < 60


async def test_a_store_without_server_start_offsets_is_listed_by_one_lister() -> None:
    # Azure's List Blobs cannot start at a name: each split range would page
    # from the prefix again, so a parallel listing costs n pages per lister.
    names = [f"data/{i:05d}" for i in range(5000)]
    fake = FakeLister(names, 1000, 0, server_end=False)
    fake.features = StoreFeatures("az", end_offset=False, start_offset=False)
    starts: list[str | None] = []
    served = fake.list

    def counted(bucket: str, prefix: str = "", **kw: Any) -> AsyncIterator[ListPage]:
        starts.append(kw.get("start_offset"))
        return served(bucket, prefix, **kw)

    fake.list = counted  # type: ignore[method-assign]
    got = await list_objects_parallel(fake, "bkt", "data/",  # type: ignore[arg-type]
                                      concurrency=16)
    assert sorted(o.name for o in got) == names
    assert starts == [None] and fake.requests == 5  # one lister, page after page


class SlowLister(FakeLister):
    """A FakeLister whose every page takes one simulated round trip."""

    def __init__(self, names: list[str], page_size: int, rtt: float) -> None:
        super().__init__(names, page_size, 0)
        self.rtt = rtt
        self.in_flight = 0
        self.pages_done = 0
        self.pages_before: dict[int, int] = {}  # requests in flight -> pages back before

    async def list(self, bucket: str, prefix: str = "", **kwargs: Any) -> AsyncIterator[ListPage]:
        async for page in super().list(bucket, prefix, **kwargs):
            self.in_flight += 1
            self.pages_before.setdefault(self.in_flight, self.pages_done)
            await asyncio.sleep(self.rtt)
            self.in_flight -= 1
            self.pages_done += 1
            yield page


async def test_one_page_puts_every_lister_to_work() -> None:
    # Ranges split off a fresh range inherit its density, so after the first
    # page every free lister gets a piece at once instead of one new lister
    # per round trip (which kept 4-8 of 16 busy on 100k names).
    names = [f"obj-{i:06d}" for i in range(20_000)]
    fake = SlowLister(names, 100, 0.01)
    got = await list_objects_parallel(fake, "bkt", concurrency=16)  # type: ignore[arg-type]
    assert len(got) == len(names)
    assert fake.pages_before[16] == 1  # all 16 at work as soon as one page is back
    # Split pieces end in partial pages: some extra requests, never a storm.
    # (How many depends on when each lister frees up: 240-265 here, 305 once on a
    # loaded 2-core machine.)
    assert fake.requests < 2 * 200


@pytest.mark.parametrize("names", [
    [f"a/{i:04d}" for i in range(2500)] + [f"zz/{i:04d}" for i in range(2500)],
    [f"a/{i:04d}" for i in range(4000)] + [f"q{i}" for i in range(0, 10**6, 1000)],
    [f"{random.Random(i).getrandbits(64):016x}/f" for i in range(5000)],
], ids=["two-clusters", "sparse-tail", "hashed"])
async def test_uneven_names_cost_a_bounded_number_of_extra_requests(names: list[str]) -> None:
    # Inherited densities can be wrong (a gap between clusters): pieces that
    # turn out empty cost one request each, never a storm.
    fake = FakeLister(names, 100, 5)
    got = await list_objects_parallel(fake, "bkt", concurrency=16)  # type: ignore[arg-type]
    assert sorted(o.name for o in got) == sorted(names)
    assert fake.requests <= 3 * 50  # 50 pages' worth of names


async def test_iter_objects_streams_everything_once() -> None:
    names = [f"p/{i}" for i in range(777)]
    fake = FakeLister(names, 50, 2)
    seen = [o.name async for o in iter_objects(fake, "bkt", "p/", concurrency=4)]  # type: ignore[arg-type]
    assert sorted(seen) == sorted(names)


async def test_listing_error_cancels_other_listers() -> None:
    fake = FakeLister([f"k{i:04d}" for i in range(2000)], 10, 3)
    original = fake.list
    calls = 0

    async def failing(*args: Any, **kwargs: Any) -> AsyncIterator[ListPage]:
        nonlocal calls
        async for page in original(*args, **kwargs):
            calls += 1
            if calls == 20:
                raise ConnectionError("boom")
            yield page

    fake.list = failing  # type: ignore[method-assign]
    try:
        await list_objects_parallel(fake, "bkt", concurrency=6)  # type: ignore[arg-type]
    except ConnectionError:
        pass
    else:
        raise AssertionError("expected the lister's error")
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert pending == []


async def test_cancelled_listing_leaves_no_lister_running() -> None:
    names = [f"c/{i:05d}" for i in range(3000)]
    fake = FakeLister(names, 10, 4)
    task = asyncio.ensure_future(list_objects_parallel(fake, "bkt", "c/",  # type: ignore[arg-type]
                                                       concurrency=8))
    for _ in range(30):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    requests = fake.requests
    for _ in range(50):
        await asyncio.sleep(0)
    assert fake.requests == requests  # nothing spawned after the cancel
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} == set()


# -- listing order (iter_objects(ordered=True), behind stream(ordered=True)) ---


@settings(max_examples=150, deadline=None)
@given(names=names_strategy, page_size=st.integers(1, 7), concurrency=st.integers(1, 9),
       seed=st.integers(0, 1000), prefix=st.sampled_from(["", "a", "ab/", "z"]),
       server_end=st.booleans(), empty_first=st.booleans())
def test_ordered_iteration_is_the_listing_order(
        names: list[str], page_size: int, concurrency: int, seed: int, prefix: str,
        server_end: bool, empty_first: bool) -> None:
    fake = FakeLister(names, page_size, seed, server_end=server_end, empty_first=empty_first)

    async def run() -> list[str]:
        return [o.name async for o in iter_objects(fake, "bkt", prefix,  # type: ignore[arg-type]
                                                   concurrency=concurrency, skip_prefix=None,
                                                   ordered=True)]

    expected = sorted(n for n in set(names) if n.startswith(prefix) and not n.endswith("/"))
    assert asyncio.run(run()) == expected


class FrontLast(FakeLister):
    """Pages naming anything in ``[low, high)`` wait until a page past
    ``high`` has gone out: with ``low`` a page past the first name, a range
    above the lowest brings pages first, however the listers split. (If no
    lister lists past ``high``, they go out after some 10,000 loop turns,
    and ``above`` stays unset.)"""

    def __init__(self, names: list[str], page_size: int, low: str, high: str) -> None:
        super().__init__(names, page_size, 0)
        self.low, self.high = low, high
        self.above = asyncio.Event()

    async def list(self, bucket: str, prefix: str = "", **kwargs: Any) -> AsyncIterator[ListPage]:
        async for page in super().list(bucket, prefix, **kwargs):
            names = [o.name for o in page.objects]
            if any(self.low <= n < self.high for n in names):
                for _ in range(10_000):
                    if self.above.is_set():
                        break
                    await asyncio.sleep(0)
            elif names and names[0] >= self.high:
                self.above.set()
            yield page


@pytest.mark.parametrize("concurrency", [2, 4, 16])
async def test_ordered_iteration_holds_later_ranges_until_the_lowest_is_done(
        concurrency: int) -> None:
    # Pages came out as they arrived across listers: a range above the
    # first's went out before the first's second page, though
    # stream(ordered=True) promised listing order.
    # Pages of 1000: the split alphabet, sampled from every 50th name, then
    # holds every digit (from pages of 100, only 0, 5 and 9: every split
    # fell past the last name, and one lister listed everything).
    names = [f"k/{i:05d}" for i in range(12_000)]
    fake = FrontLast(names, 1000, names[1000], names[2000])
    seen = [o.name async for o in iter_objects(fake, "bkt", "k/",  # type: ignore[arg-type]
                                               concurrency=concurrency, ordered=True)]
    assert fake.above.is_set()  # ranges above the first did list first
    assert seen == names
    fake = FrontLast(names, 1000, names[1000], names[2000])
    arrived = [o.name async for o in iter_objects(fake, "bkt", "k/",  # type: ignore[arg-type]
                                                  concurrency=concurrency)]
    assert fake.above.is_set()
    assert arrived != names and sorted(arrived) == names  # arrival order, as documented


async def test_an_ordered_listing_yields_nothing_past_a_range_that_failed() -> None:
    # A range that fails never closes: the ranges above it, listed already,
    # are not handed over, so what was yielded is the listing's beginning.
    names = [f"k/{i:05d}" for i in range(12_000)]
    fake = FakeLister(names, 1000, 3)
    served = fake.list

    async def failing(bucket: str, prefix: str = "", **kw: Any) -> AsyncIterator[ListPage]:
        async for page in served(bucket, prefix, **kw):
            if any(o.name == names[1500] for o in page.objects):
                raise ConnectionError("boom")
            yield page

    fake.list = failing  # type: ignore[method-assign]
    seen: list[str] = []
    with pytest.raises(ConnectionError):
        async for obj in iter_objects(fake, "bkt", "k/", concurrency=8,  # type: ignore[arg-type]
                                      ordered=True):
            seen.append(obj.name)
    assert seen == names[:len(seen)] and len(seen) < 1500
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} == set()


async def test_an_ordered_listing_left_early_leaves_no_lister_running() -> None:
    names = [f"k/{i:05d}" for i in range(12_000)]
    fake = FakeLister(names, 1000, 4)
    objs = iter_objects(fake, "bkt", "k/", concurrency=8, ordered=True)  # type: ignore[arg-type]
    assert [(await anext(objs)).name for _ in range(1500)] == names[:1500]
    await objs.aclose()
    requests = fake.requests
    for _ in range(50):
        await asyncio.sleep(0)
    assert fake.requests == requests
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} == set()


async def settle(fake: FakeLister) -> None:
    """Let the listers run until they stop asking for pages (all waiting
    for the consumer): 200 loop turns in a row without a request."""
    quiet = 0
    while quiet < 200:
        before = fake.requests
        await asyncio.sleep(0)
        quiet = quiet + 1 if fake.requests == before else 0


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("concurrency", [1, 4, 16])
async def test_listers_run_a_bounded_number_of_pages_ahead(ordered: bool,
                                                           concurrency: int) -> None:
    # A consumer that stops taking: the listing holds a bounded number of
    # pages for it (and one more per lister waiting to hand one over, one
    # more of the lowest range, and the page the consumer is in), in listing
    # order too: there, holding the later ranges' pages without a bound
    # would keep a whole listing in memory behind a slow first range.
    names = [f"k/{i:06d}" for i in range(50_000)]
    fake = FakeLister(names, 100, 7)
    objs = iter_objects(fake, "bkt", "k/", concurrency=concurrency,  # type: ignore[arg-type]
                        ordered=ordered)
    try:
        first = await anext(objs)
        await settle(fake)
        held = max(2, (_ORDERED_AHEAD_PAGES if ordered else 1) * concurrency)
        pages = held + concurrency + 2
        # Names, not requests: a split piece ends in a partial page, and a
        # page in flight when its range shrank is served past the new end.
        assert fake.served <= (pages + concurrency) * 100
        if ordered:
            assert [first.name, *[o.name async for o in objs]] == names
    finally:
        await objs.aclose()


@pytest.mark.parametrize("ordered", [False, True])
async def test_one_lister_runs_ahead_by_its_own_pages(ordered: bool) -> None:
    # A store that cannot start a listing at an offset (Azure, files) gets
    # one lister whatever ``concurrency`` asks, but the pages held for the
    # consumer were sized by ``concurrency``: 16 asked, 65 pages ahead in
    # listing order and 18 in arrival order, not some five and two.
    names = [f"k/{i:06d}" for i in range(50_000)]
    fake = FakeLister(names, 100, 7)
    fake.features = StoreFeatures("az", start_offset=False)
    objs = iter_objects(fake, "bkt", "k/", concurrency=16,  # type: ignore[arg-type]
                        ordered=ordered)
    try:
        first = await anext(objs)
        await settle(fake)
        held = max(2, _ORDERED_AHEAD_PAGES if ordered else 1)
        # Held, one waiting to go in, one more of the lowest range, the
        # consumer's.
        assert fake.served <= (held + 3) * 100
        assert [first.name, *[o.name async for o in objs]] == names
    finally:
        await objs.aclose()


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("concurrency", [1, 8])
async def test_a_lister_cancelled_midway_fails_the_listing(ordered: bool,
                                                           concurrency: int) -> None:
    # A CancelledError out of the store's listing (not the caller's cancel)
    # ended that lister quietly: the listing went on without the rest of its
    # range (a new lister even took part of it over), ended "complete" with
    # names missing, and in listing order hung (ranges above it waiting on
    # it) or stopped at it. It ends the listing now, as gather would.
    names = [f"k/{i:05d}" for i in range(12_000)]
    fake = FakeLister(names, 1000, 3)
    served = fake.list

    async def cancelled(bucket: str, prefix: str = "", **kw: Any) -> AsyncIterator[ListPage]:
        async for page in served(bucket, prefix, **kw):
            if any(o.name == names[1500] for o in page.objects):
                raise asyncio.CancelledError
            yield page

    fake.list = cancelled  # type: ignore[method-assign]
    seen: list[str] = []

    async def drain() -> None:
        async for obj in iter_objects(fake, "bkt", "k/",  # type: ignore[arg-type]
                                      concurrency=concurrency, ordered=ordered):
            seen.append(obj.name)

    # 30 s: a guard against the hang, not a pace.
    with pytest.raises(StorageError, match="list gs://bkt/k/ failed: a lister was cancelled"):
        await asyncio.wait_for(drain(), 30)
    assert len(seen) < len(names)
    if ordered:
        assert seen == names[:len(seen)]
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} == set()


class _JumpingSelector(selectors.DefaultSelector):
    """Never waits: a wait for the next timer moves the clock there instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> Any:
        if timeout:
            self.now += timeout
        return super().select(0)


class _SimulatedLoop(asyncio.SelectorEventLoop):
    """An event loop on simulated time: a listing whose every page takes
    ``asyncio.sleep(1)`` takes as many seconds as it has round trips one
    after another, however fast the machine."""

    def __init__(self) -> None:
        self.selector = _JumpingSelector()
        super().__init__(self.selector)

    def time(self) -> float:
        return float(self.selector.now)


def _round_trips(names: list[str], page_size: int, *, ordered: bool) -> tuple[float, int]:
    fake = SlowLister(names, page_size, 1.0)
    loop = _SimulatedLoop()

    async def run() -> float:
        start = loop.time()
        seen = [o.name async for o in iter_objects(fake, "bkt", concurrency=16,  # type: ignore[arg-type]
                                                   ordered=ordered)]
        assert seen == names if ordered else sorted(seen) == names
        return loop.time() - start

    try:
        return loop.run_until_complete(run()), fake.requests
    finally:
        loop.close()


@pytest.mark.parametrize("names", [
    [f"obj-{i:06d}" for i in range(20_000)],
    [f"a/{i:04d}" for i in range(5000)] + [f"zz/{i:04d}" for i in range(5000)],
    sorted(f"{random.Random(i).getrandbits(64):016x}/f" for i in range(10_000)),
], ids=["uniform", "two-clusters", "hashed"])
def test_ordered_listing_stays_parallel(names: list[str]) -> None:
    # Listing order must not give up the parallel listing: round trips one
    # after another (one lister: one per page) stay near the unordered
    # listing's, and so do the requests (each piece ends in a partial page).
    pages = len(names) // 100
    unordered, _ = _round_trips(names, 100, ordered=False)
    ordered, requests = _round_trips(names, 100, ordered=True)
    assert ordered <= 1.5 * unordered + 2, (ordered, unordered)
    assert ordered <= pages / 5
    assert requests < 1.4 * pages
