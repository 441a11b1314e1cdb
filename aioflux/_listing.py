"""Parallel listing: concurrent listers over ``startOffset``/``endOffset``
ranges of one prefix, inside one event loop, with work stealing.

One lister starts on the whole prefix. Whenever a page comes back and fewer
than ``concurrency`` listers are busy, the range with the most key space left
is cut at a midpoint computed in the alphabet of the names seen so far, and
its upper half goes to a new lister. Each page is a fresh request from the
range's cursor (no page tokens), so a range can shrink while its lister is
between pages; names at or past a range's current end are dropped there and
listed by whoever owns them now. Every name is therefore listed exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import cast

from ._client import AsyncClient
from ._types import ListPage, ObjectInfo

__all__ = [
    "COMPOSED_PREFIX",
    "DEFAULT_LIST_CONCURRENCY",
    "KeyRange",
    "iter_objects",
    "list_objects_parallel",
    "split_point",
]

# Composites made by the download planner live here (bucket root); listings
# skip them so a dataset never contains another reader's temporary objects.
COMPOSED_PREFIX = "aioflux-composed/"
# 16 listers: a page costs ~1 RTT plus JSON parsing of 1000 items, so beyond
# ~16 the one event loop (not the network) becomes the limit on 2-4 cores.
DEFAULT_LIST_CONCURRENCY = 16
# Room added past the longer bound so two adjacent names still have a midpoint.
_EXTRA_DIGITS = 2
_MAX_DIGITS = 256


@dataclass
class KeyRange:
    """A half-open name range owned by one lister.

    Attributes:
        start: first name that may belong to the range (inclusive).
        end: end (exclusive); ``None`` means the end of the prefix.
        cursor: the last name emitted from this range, if any.
        done: the lister finished it.
    """

    start: str
    end: str | None
    cursor: str | None = None
    done: bool = False

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
    digits = _digits(alphabet, lo, hi)
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


Emit = Callable[[list[ObjectInfo]], Awaitable[None]]


class _Lister:
    """Runs the listers of one prefix and hands each page's objects to ``emit``."""

    def __init__(self, client: AsyncClient, bucket: str, prefix: str, concurrency: int,
                 skip_prefix: str | None, emit: Emit) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.concurrency = max(1, concurrency)
        self.skip_prefix = skip_prefix
        self.emit = emit
        self.alphabet = _Alphabet()
        self.ranges: list[KeyRange] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.pages = 0

    async def run(self) -> None:
        self._spawn(KeyRange(self.prefix, None))
        try:
            while self.tasks:
                done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self.tasks.discard(task)
                    task.result()  # first error: raise, and the finally drains the rest
        finally:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def _spawn(self, r: KeyRange) -> None:
        self.ranges.append(r)
        self.tasks.add(asyncio.create_task(self._list_range(r)))

    async def _list_range(self, r: KeyRange) -> None:
        # Page tokens of the original request stay valid after a split: names
        # at or past the (new) end just stop this lister.
        start = r.start if r.start > self.prefix else None
        pages = cast(AsyncGenerator[ListPage, None], self.client.list(
            self.bucket, self.prefix, start_offset=start, end_offset=r.end))
        async with aclosing(pages):
            async for page in pages:
                self.pages += 1
                kept: list[ObjectInfo] = []
                for obj in page.objects:
                    if r.end is not None and obj.name >= r.end:
                        r.done = True  # the range shrank meanwhile; the new owner lists it
                        break
                    r.cursor = obj.name
                    if not self._skip(obj.name):
                        kept.append(obj)
                if r.cursor is not None:
                    self.alphabet.add(r.cursor[len(self.prefix):])
                if page.next_page_token is None:
                    r.done = True
                if r.done:
                    self.ranges.remove(r)
                if kept:
                    await self.emit(kept)
                if r.done:
                    return
                self._steal()
        if not r.done:
            r.done = True
            self.ranges.remove(r)

    def _skip(self, name: str) -> bool:
        return name.endswith("/") or bool(self.skip_prefix and name.startswith(self.skip_prefix))

    def _steal(self) -> None:
        # Free capacity takes the upper half of the range with most space left.
        while len(self.tasks) < self.concurrency and self.ranges:
            by_size = sorted(self.ranges, reverse=True,
                             key=lambda r: _remaining(self.alphabet, self.prefix, r))
            for victim in by_size:
                mid = _split(self.alphabet, self.prefix, victim.low, victim.end)
                if mid is not None:
                    new = KeyRange(mid, victim.end)
                    victim.end = mid
                    self._spawn(new)
                    break
            else:
                return  # no range has room for a midpoint


async def list_objects_parallel(
    client: AsyncClient,
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

    async def emit(objs: list[ObjectInfo]) -> None:
        found.extend(objs)

    await _Lister(client, bucket, prefix, concurrency, skip_prefix, emit).run()
    if sort:
        found.sort(key=lambda o: o.name)
    return found


async def iter_objects(
    client: AsyncClient,
    bucket: str,
    prefix: str = "",
    *,
    concurrency: int = DEFAULT_LIST_CONCURRENCY,
    skip_prefix: str | None = COMPOSED_PREFIX,
) -> AsyncGenerator[ObjectInfo, None]:
    """Like :func:`list_objects_parallel`, yielding objects as pages arrive.

    Args:
        client: the client.
        bucket: bucket name.
        prefix: only names starting with this.
        concurrency: most listers at once.
        skip_prefix: names to leave out; ``None`` keeps everything.

    Yields:
        ObjectInfo in arrival order (sorted within a page, not across pages).

    Raises:
        StorageError: a page failed after retries.
    """
    # A small queue applies backpressure: listers pause when the consumer lags.
    queue: asyncio.Queue[list[ObjectInfo] | None] = asyncio.Queue(maxsize=max(2, concurrency))

    async def emit(objs: list[ObjectInfo]) -> None:
        await queue.put(objs)

    lister = _Lister(client, bucket, prefix, concurrency, skip_prefix, emit)

    async def produce() -> None:
        await lister.run()
        await queue.put(None)

    task = asyncio.create_task(produce())
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
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
