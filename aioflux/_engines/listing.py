"""Parallel listing: concurrent listers over ``startOffset``/``endOffset``
ranges of one prefix, inside one event loop, with work stealing.

One lister starts on the whole prefix. Whenever a page comes back or a
lister finishes and fewer than ``concurrency`` listers are busy, the range
with the most key space left is cut and its upper part goes to a new
lister. The cut is the midpoint in the alphabet of the names seen so far,
but at most a few pages (at the range's density) above its low end, so
splits follow where the names are. A range's density is the key space its
last page spanned; a range split off before it listed anything inherits its
parent's, so one page is enough to put every free lister to work (one new
range per round trip, waiting for each to list a page first, kept only 4-8
of 16 listers busy on 100k names). A range can shrink while its lister
waits for a page: names at or past the range's current end are dropped
there and listed by whoever owns them now, and the lister's next request
starts afresh from its cursor with the new end (a page token would keep the
old one). Every name is therefore listed exactly once.

Pages come back in whatever order the round trips end. ``iter_objects(...,
ordered=True)`` puts them back in name order (``listing_order.py``) within a
bounded number of pages, and its free listers cut the lowest range with
room instead, so they list just past the caller's position.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, bisect_right
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import cast

from .._core.errors import StorageError, describe
from .._core.records.types import ListPage, ObjectInfo
from .._core.storage.protocol import ObjectStore
from .compose import COMPOSED_PREFIX
from .listing_order import ListingOrder

__all__ = [
    "DEFAULT_LIST_CONCURRENCY",
    "KeyRange",
    "iter_objects",
    "iter_pages",
    "list_objects_parallel",
    "split_point",
]

# 16 listers: a page costs ~1 RTT plus JSON parsing of 1000 items, so beyond
# ~16 the one event loop (not the network) becomes the limit on 2-4 cores.
# Measured (100k names, gcs-like emulator, 2 cores): 16 listers 0.39-0.49 s,
# one lister ~2.8 s; the client spends ~0.4 s of CPU parsing 100 pages (a
# fifth of it garbage collection of the 100k ObjectInfo): that is the floor.
DEFAULT_LIST_CONCURRENCY = 16
# Room added past the longer bound so two adjacent names still have a midpoint.
_EXTRA_DIGITS = 2
_MAX_DIGITS = 256
# A split leaves the splitting lister this many pages (at its density). Every
# boundary between pieces costs about one partial page; 2, 4 and 8 listed
# 100k names equally fast, and 8 wasted the fewest requests on names in
# clusters with gaps between them.
_KEEP_PAGES = 8
# In listing order (``iter_objects(ordered=True)``) the listers work just past
# the caller's position: a range is cut only with at least twice
# _ORDERED_PIECE_PAGES pages left (so a piece holds that many or more), and
# _ORDERED_AHEAD_PAGES per lister are held before a lister waits
# (listing_order.py). Measured in simulated round trips on a fake store (16
# listers; 20k-300k names in pages of 100 and 1000; uniform, clustered,
# hashed and sparse names; with and without server end offsets), against
# the unordered listing's round trips and requests a page: pieces of 3
# pages keep the requests a page near the unordered listing's (each
# boundary between pieces costs a partial page), and 4 pages ahead keep
# the round trips within ~20% of it. Ordered listers cut the range nearest
# the front: cutting the one with most key space left, as the unordered
# listing does, sends listers to the far end of the prefix to wait there.
_ORDERED_PIECE_PAGES = 3
_ORDERED_AHEAD_PAGES = 4
# Names a listing request asks for, unless it is a range's last on a store
# without end offsets; then at least _MIN_SIZED_PAGE, and the estimate plus
# a quarter plus _SIZED_MARGIN (an estimate that falls short costs a round
# trip, one that overshoots only parsing).
FULL_PAGE = 1000
_MIN_SIZED_PAGE = 50
_SIZED_MARGIN = 20


@dataclass
class KeyRange:
    """A half-open name range owned by one lister.

    Attributes:
        start: first name that may belong to the range (inclusive).
        end: end (exclusive); ``None`` means the end of the prefix.
        cursor: the last name emitted from this range, if any.
        done: the lister finished it.
        sample: first and last name of a full page at this range's density,
            and how many names the page held: its own last page, or its
            parent's until it lists one. ``None`` until then for the first
            range (nothing to split by yet).
        sized: a request sized to what the range was estimated to hold came
            back short of its end (the names cluster): full pages from then on.
    """

    start: str
    end: str | None
    cursor: str | None = None
    done: bool = False
    sample: tuple[str, str, int] | None = None
    sized: bool = False

    @property
    def low(self) -> str:
        """Lower bound of what is left (exclusive once a name was emitted)."""
        return self.cursor if self.cursor is not None else self.start


class _Alphabet:
    """Sorted set of characters seen in names: the digits of the key space."""

    def __init__(self) -> None:
        self.chars: list[str] = []
        self._index: dict[str, int] = {}
        self.max_len = 0

    def add(self, text: str) -> None:
        self.max_len = max(self.max_len, len(text))
        new = set(text) - self._index.keys()
        if new:
            self.chars = sorted(self._index.keys() | new)
            self._index = {c: i for i, c in enumerate(self.chars)}

    @property
    def base(self) -> int:
        return len(self.chars) + 1  # digit 0 means "no character here"

    def to_int(self, text: str | None, digits: int) -> int:
        """``text`` as a ``digits``-long number; ``None`` is the top of the space."""
        if text is None:
            return int(self.base**digits - 1)
        value = 0
        for i in range(digits):
            value = value * self.base + (self._index[text[i]] + 1 if i < len(text) else 0)
        return value

    def to_str(self, value: int, digits: int) -> str:
        out: list[int] = []
        for _ in range(digits):
            value, digit = divmod(value, self.base)
            out.append(digit)
        chars: list[str] = []
        for digit in reversed(out):
            if digit == 0:
                break  # "no character" ends the string; later digits are noise
            chars.append(self.chars[digit - 1])
        return "".join(chars)


def _digits(alphabet: _Alphabet, low: str, high: str | None) -> int:
    longest = max(len(low), len(high or ""), alphabet.max_len)
    return min(longest + _EXTRA_DIGITS, _MAX_DIGITS)


def split_point(prefix: str, low: str, high: str | None, seen: list[str]) -> str | None:
    """A name strictly between ``low`` and ``high`` near the middle of the key space.

    Args:
        prefix: every name starts with this; it is not part of the arithmetic.
        low: lower bound (a name under ``prefix``, or ``prefix`` itself).
        high: upper bound, or ``None`` for the end of the prefix.
        seen: names seen so far; their characters are the digits.

    Returns:
        The split name, or ``None`` when no name fits strictly between.
    """
    alphabet = _Alphabet()
    for name in seen:
        alphabet.add(name[len(prefix):])
    return _split(alphabet, prefix, low, high)


def _split(alphabet: _Alphabet, prefix: str, low: str, high: str | None) -> str | None:
    lo = low[len(prefix):]
    hi = None if high is None else high[len(prefix):]
    alphabet.add(lo)
    if hi is not None:
        alphabet.add(hi)
    if not alphabet.chars:
        return None
    return _midpoint(alphabet, prefix, lo, hi, _digits(alphabet, lo, hi))


def _midpoint(alphabet: _Alphabet, prefix: str, lo: str, hi: str | None,
              digits: int) -> str | None:
    mid = alphabet.to_str((alphabet.to_int(lo, digits) + alphabet.to_int(hi, digits)) // 2,
                          digits)
    if lo < mid and (hi is None or mid < hi):
        return prefix + mid
    return None


def _remaining(alphabet: _Alphabet, prefix: str, r: KeyRange) -> int:
    lo = r.low[len(prefix):]
    hi = None if r.end is None else r.end[len(prefix):]
    digits = min(alphabet.max_len + _EXTRA_DIGITS, _MAX_DIGITS)
    return alphabet.to_int(hi, digits) - alphabet.to_int(lo, digits)


# Takes a range's objects, listed since its last call (the range, by its start).
Emit = Callable[[str, list[ObjectInfo]], Awaitable[None]]


def _name(obj: ObjectInfo) -> str:
    return obj.name


def _listers(client: ObjectStore, concurrency: int) -> int:
    """How many listers list one prefix at once: a store that cannot start
    a listing at an offset would page from the prefix for every split
    range, so it gets one."""
    return max(1, concurrency) if client.features.start_offset else 1


class _Lister:
    """Runs the listers of one prefix and hands each page's objects to ``emit``.

    With ``order``, each range opens and closes there, and free listers
    split the lowest range that has room in it (see ``_steal``).
    """

    def __init__(self, client: ObjectStore, bucket: str, prefix: str, concurrency: int,
                 skip_prefix: str | None, emit: Emit, order: ListingOrder | None = None) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.concurrency = _listers(client, concurrency)
        # A skip prefix that no name under ``prefix`` can start with costs
        # nothing: drop it instead of testing every name.
        overlaps = skip_prefix and (prefix.startswith(skip_prefix)
                                    or skip_prefix.startswith(prefix))
        self.skip_prefix = skip_prefix if overlaps else None
        self.emit = emit
        self.order = order
        self.alphabet = _Alphabet()
        self.ranges: list[KeyRange] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.pages = 0
        self.error: BaseException | None = None
        self.wake = asyncio.Event()
        self.closing = False
        self.end_offsets = client.features.end_offset

    async def run(self) -> None:
        self._spawn(KeyRange(self.prefix, None))
        try:
            while self.tasks and self.error is None:
                self.wake.clear()
                await self.wake.wait()
            if self.error is not None:
                raise self.error  # the finally cancels and drains the rest
        finally:
            self.closing = True  # no more splits from tasks ending below
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def _spawn(self, r: KeyRange) -> None:
        self.ranges.append(r)
        if self.order is not None:
            self.order.opened(r.start)
        task = asyncio.create_task(self._list_range(r))
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        # Every task leaves ``tasks`` as soon as it ends, so a finished lister
        # frees its place for a split at once (``asyncio.wait`` on a snapshot
        # of the set would miss tasks spawned later and keep them "busy").
        self.tasks.discard(task)
        # Every failure is retrieved (asyncio logs one never retrieved, a
        # traceback a failed lister), the first kept.
        failure = None if task.cancelled() else task.exception()
        if self.error is None:
            if not task.cancelled():
                self.error = failure
            elif not self.closing:
                # Cancelled by anyone but ``run`` (a CancelledError out of
                # the store's listing): its range was not listed to its end.
                # Going on dropped the rest of the range in silence (a split
                # even handed part of it to a new lister), and in listing
                # order the ranges above it waited for good. A typed error,
                # not a CancelledError: the caller was not cancelled.
                self.error = StorageError(
                    f"{describe('list', self.bucket, self.prefix, self.client.features.scheme)}"
                    " failed: a lister was cancelled before its range was listed",
                    operation="list", bucket=self.bucket, name=self.prefix)
        if self.error is None:
            self._steal()  # the freed capacity takes a split now
        self.wake.set()

    async def _list_range(self, r: KeyRange) -> None:
        await self._list_pages(r)
        # Only a range listed to its end closes: after an error or a cancel,
        # an ordered listing must not go on to the ranges above it.
        if self.order is not None:
            self.order.closed(r.start)

    async def _list_pages(self, r: KeyRange) -> None:
        # A page token keeps the endOffset of the request that began it. When
        # the range shrinks, the next page is a fresh request from the cursor
        # with the new end, so it stops there instead of running on past the
        # split point (continuing the token wasted ~6% of the names parsed on
        # a 100k listing). A page already in flight may still run past the
        # new end; those names are dropped here and listed by their new owner.
        while True:
            end, resume = r.end, r.cursor
            low = r.low
            size = self._page_size(r)
            pages = cast(AsyncGenerator[ListPage, None], self.client.list(
                self.bucket, self.prefix, start_offset=low if low > self.prefix else None,
                end_offset=end, page_size=size))
            async with aclosing(pages):
                async for page in pages:
                    objs = page.objects
                    if resume is not None and objs:
                        # startOffset is inclusive: the cursor comes back, on
                        # the first page that names anything (GCS may answer
                        # empty pages first, and S3Store does where it could
                        # not send start-after close below the cursor).
                        objs = objs[bisect_right(objs, resume, key=_name):]
                        resume = None
                    if await self._take(r, objs, last=page.next_page_token is None):
                        return
                    if r.end != end:
                        break  # shrank: continue from the cursor with the new end
                    if size < FULL_PAGE:
                        r.sized = True  # the estimate fell short: full pages now
                        break
                    if self._page_size(r) < size:
                        break  # near the end: ask for what is left
                else:  # the range's last page came back
                    if not r.done:
                        r.done = True
                        self.ranges.remove(r)
                    return

    async def _take(self, r: KeyRange, objs: list[ObjectInfo], last: bool) -> bool:
        """Account one page of ``r`` and emit its objects; True when ``r`` is done."""
        self.pages += 1
        # Whole-page operations (bisect, one comprehension) instead of a
        # Python loop per object, which would be a good part of a listing's
        # client CPU.
        if r.end is not None and objs and objs[-1].name >= r.end:
            # The range shrank while this page was in flight.
            objs = objs[:bisect_left(objs, r.end, key=_name)]
            r.done = True
        if objs:
            if not last:
                # Only a full page measures density (a short last page looks
                # sparser than it is). A first page spans from its first name:
                # the range's start may lie far below it (the prefix itself,
                # or a gap).
                first = objs[0].name if r.cursor is None else r.cursor
                r.sample = (first, objs[-1].name, len(objs))
            r.cursor = objs[-1].name
            # The split alphabet is sampled from every 50th name, not only the
            # cursor: from cursors alone the first page of obj-000000..
            # obj-000999 gives the digits {0, 9}, and every early midpoint
            # falls past the last name.
            n = len(self.prefix)
            for obj in objs[::50]:
                self.alphabet.add(obj.name[n:])
            self.alphabet.add(r.cursor[n:])
        kept = self._keep(objs)
        if last:
            r.done = True
        if r.done:
            self.ranges.remove(r)
        if kept:
            await self.emit(r.start, kept)
        if r.done:
            return True
        self._steal()
        return False

    def _keep(self, objs: list[ObjectInfo]) -> list[ObjectInfo]:
        skip = self.skip_prefix
        if skip:
            return [o for o in objs if not (o.name.endswith("/") or o.name.startswith(skip))]
        return [o for o in objs if not o.name.endswith("/")]

    def _page_span(self, r: KeyRange, digits: int) -> int:
        """Key space of one page at ``r``'s density (0: not known yet)."""
        if r.sample is None:
            return 0
        n = len(self.prefix)
        first, last, _ = r.sample
        return (self.alphabet.to_int(last[n:], digits)
                - self.alphabet.to_int(first[n:], digits))

    def _page_size(self, r: KeyRange) -> int:
        """Names to ask for in ``r``'s next request.

        A store without end offsets (S3) answers a full page past a range's
        end, which is parsed only to be dropped: on a 100k listing that was
        15% of the names parsed. So on such a store, a range's last request
        asks for what its density says is left, plus a margin.
        """
        if self.end_offsets or r.end is None or r.sized or not self.alphabet.chars:
            return FULL_PAGE
        digits = min(self.alphabet.max_len + _EXTRA_DIGITS, _MAX_DIGITS)
        span = self._page_span(r, digits)
        if span <= 0 or r.sample is None:
            return FULL_PAGE
        left = _remaining(self.alphabet, self.prefix, r) * r.sample[2] // span
        return max(_MIN_SIZED_PAGE, min(FULL_PAGE, left * 5 // 4 + _SIZED_MARGIN))

    def _split_at(self, r: KeyRange, hi: str | None, digits: int) -> str | None:
        # The midpoint of the key space, but the lister keeps at most
        # _KEEP_PAGES pages at its last page's density: names rarely fill the
        # alphabet's space uniformly (an open-ended range reaches "zzz..."),
        # and plain halving sent most early splits into empty space, one
        # wasted request each.
        a = self.alphabet
        lo = r.low[len(self.prefix):]
        low, high = a.to_int(lo, digits), a.to_int(hi, digits)
        point = low + min((high - low) // 2, _KEEP_PAGES * self._page_span(r, digits))
        mid = a.to_str(point, digits)
        if lo < mid and (hi is None or mid < hi):
            return self.prefix + mid
        return None

    def _steal(self) -> None:
        # Free capacity takes the upper part of the range with most key space
        # left among ranges whose density is known (listed a full page, or
        # inherited one at a split). Pieces stay at least two pages wide at
        # that density: halving ranges of unknown density (possibly empty)
        # makes a storm of tiny requests once finished listers free capacity
        # at once. Midpoints use
        # the precision of real names (+2 digits) so split points do not get
        # longer with every generation.
        if self.closing or not self.alphabet.chars:
            return
        digits = min(self.alphabet.max_len + _EXTRA_DIGITS, _MAX_DIGITS)
        n = len(self.prefix)
        least = 2 if self.order is None else 2 * _ORDERED_PIECE_PAGES
        while len(self.tasks) < self.concurrency:
            if self.order is not None and not self.order.has_room:
                return  # a new lister would only wait
            sized = [(left, r) for r in self.ranges if not r.done
                     and (span := self._page_span(r, digits)) > 0
                     and (left := _remaining(self.alphabet, self.prefix, r)) >= least * span]
            if not sized:
                return
            if self.order is None:
                sized.sort(reverse=True, key=lambda pair: pair[0])
            else:
                # In listing order, names far ahead of the caller would only
                # wait in the order's bound: the lowest range is cut instead,
                # so the free listers take the key space just past the
                # caller's position (see _ORDERED_PIECE_PAGES).
                sized.sort(key=lambda pair: pair[1].start)
            for _, victim in sized:
                hi = None if victim.end is None else victim.end[n:]
                mid = self._split_at(victim, hi, digits)
                if mid is not None:
                    new = KeyRange(mid, victim.end, sample=victim.sample)
                    victim.end = mid
                    self._spawn(new)
                    break
            else:
                return  # no range has room for a midpoint


async def list_objects_parallel(
    client: ObjectStore,
    bucket: str,
    prefix: str = "",
    *,
    concurrency: int = DEFAULT_LIST_CONCURRENCY,
    sort: bool = False,
    skip_prefix: str | None = COMPOSED_PREFIX,
) -> list[ObjectInfo]:
    """List every object under ``prefix`` with concurrent, work-stealing listers.

    Names ending in ``/`` (folder placeholders) and names under
    ``skip_prefix`` (the planner's composites) are left out.

    Args:
        client: the client (its semaphore and retry policy apply).
        bucket: bucket name.
        prefix: only names starting with this.
        concurrency: most listers at once.
        sort: return the objects sorted by name (else in arrival order).
        skip_prefix: names to leave out; ``None`` keeps everything.

    Returns:
        ObjectInfo (name, size, generation, crc32c) of every object, once each.

    Raises:
        NotFound: no such bucket.
        StorageError: a page failed after retries (other listers are cancelled).
    """
    found: list[ObjectInfo] = []

    async def emit(_: str, objs: list[ObjectInfo]) -> None:
        found.extend(objs)

    await _Lister(client, bucket, prefix, concurrency, skip_prefix, emit).run()
    if sort:
        found.sort(key=lambda o: o.name)
    return found


def iter_objects(
    client: ObjectStore,
    bucket: str,
    prefix: str = "",
    *,
    concurrency: int = DEFAULT_LIST_CONCURRENCY,
    skip_prefix: str | None = COMPOSED_PREFIX,
    ordered: bool = False,
) -> AsyncGenerator[ObjectInfo, None]:
    """Like :func:`list_objects_parallel`, yielding objects as pages arrive.

    Args:
        client: the client.
        bucket: bucket name.
        prefix: only names starting with this.
        concurrency: most listers at once.
        skip_prefix: names to leave out; ``None`` keeps everything.
        ordered: yield in listing order (the store's name order, the same
            every run); else in arrival order. Either way the listers run
            ahead of the caller by a bounded number of pages: about two a
            lister, five in listing order.

    Returns:
        An async generator of ObjectInfo: in listing order with
        ``ordered``, else in arrival order (sorted within a page, not
        across pages).

    Raises:
        StorageError: a page failed after retries (while iterating; in
            listing order, nothing past the range that failed is yielded).
    """
    if ordered:
        return _in_order(client, bucket, prefix, concurrency, skip_prefix)
    return _as_listed(client, bucket, prefix, concurrency, skip_prefix)


async def _as_listed(client: ObjectStore, bucket: str, prefix: str, concurrency: int,
                     skip_prefix: str | None) -> AsyncGenerator[ObjectInfo, None]:
    # A small queue applies backpressure: listers pause when the consumer lags.
    # Sized by the listers that really run (one on a store without start
    # offsets, whatever ``concurrency`` asks).
    queue: asyncio.Queue[list[ObjectInfo] | None] = asyncio.Queue(
        maxsize=max(2, _listers(client, concurrency)))

    async def emit(_: str, objs: list[ObjectInfo]) -> None:
        await queue.put(objs)

    lister = _Lister(client, bucket, prefix, concurrency, skip_prefix, emit)

    async def produce() -> None:
        await lister.run()
        await queue.put(None)

    task = asyncio.create_task(produce())
    getter: asyncio.Future[list[ObjectInfo] | None] | None = None
    try:
        while True:
            if task.done() and queue.empty():
                break
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            batch = getter.result()
            if batch is None:
                break
            for obj in batch:
                yield obj
        task.result()
    finally:
        # A cancellation arrives while the getter waits: left pending, it
        # would wait forever (and asyncio complain when it is collected).
        stray = () if getter is None else (getter,)
        for running in (task, *stray):
            running.cancel()
        await asyncio.gather(task, *stray, return_exceptions=True)


def iter_pages(
    client: ObjectStore,
    bucket: str,
    prefix: str = "",
    *,
    concurrency: int = DEFAULT_LIST_CONCURRENCY,
    skip_prefix: str | None = COMPOSED_PREFIX,
) -> AsyncGenerator[list[ObjectInfo], None]:
    """Like :func:`iter_objects` with ``ordered=True``, a page at a time:
    who keeps the objects in another form (an index's columns) never holds
    more than a page of records.

    Args:
        client: the client.
        bucket: bucket name.
        prefix: only names starting with this.
        concurrency: most listers at once.
        skip_prefix: names to leave out; ``None`` keeps everything.

    Returns:
        An async generator of non-empty lists of ObjectInfo, in listing order.

    Raises:
        StorageError: a page failed after retries (while iterating; nothing
            past the range that failed is yielded).
    """
    return _pages_in_order(client, bucket, prefix, concurrency, skip_prefix)


async def _in_order(client: ObjectStore, bucket: str, prefix: str, concurrency: int,
                    skip_prefix: str | None) -> AsyncGenerator[ObjectInfo, None]:
    pages = _pages_in_order(client, bucket, prefix, concurrency, skip_prefix)
    async with aclosing(pages):
        async for page in pages:
            for obj in page:
                yield obj


async def _pages_in_order(client: ObjectStore, bucket: str, prefix: str, concurrency: int,
                          skip_prefix: str | None) -> AsyncGenerator[list[ObjectInfo], None]:
    # At most 4 pages a lister held, and one more each waiting to go in: 81
    # pages for 16 listers (~40 MiB at ~500 bytes an ObjectInfo; the arrival
    # order's queue holds 16 and 16 more wait). Per lister that really runs:
    # sized by ``concurrency``, the one lister of a store without start
    # offsets (Azure, files) ran 64 pages ahead, not the five documented.
    order = ListingOrder(ahead=max(2, _ORDERED_AHEAD_PAGES * _listers(client, concurrency)))
    lister = _Lister(client, bucket, prefix, concurrency, skip_prefix, order.put, order)
    task = asyncio.create_task(lister.run())
    waiter: asyncio.Future[None] | None = None
    try:
        while True:
            page = order.take()
            if page is not None:
                if page:
                    yield page
                continue
            if task.done():
                # Every range closed and was handed over, or the error of
                # the one that did not close (nothing above it was yielded).
                task.result()
                return
            waiter = order.arrival()
            await asyncio.wait((waiter, task), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if waiter is not None:
            waiter.cancel()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
