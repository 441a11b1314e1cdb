"""The parallel listers' pages handed over in name order, in bounded memory.

The listers of one prefix each own a key range, and the ranges split as
they go, so their pages come back in whatever order the round trips end:
name order within a range, not across ranges. A caller that wants one
listing's order (``stream(..., ordered=True)``: the same sequence every
run, whatever the interleaving) takes the ranges front to back instead:
the pages of the lowest range not yet handed over whole go out as they
come, and those of the ranges above it wait here until it is done.

What waits is bounded: a lister that brings a page while ``ahead`` pages
or more are held waits until the caller takes some, so at most ``ahead``
pages are held plus one per lister (and one more of the lowest range).
The lowest range's lister never waits while the caller has nothing to take
from it: everything else held waits on that range, and its lister waiting
too would stop the listing for good. (Holding the later ranges' pages
without a bound kept a whole listing in memory behind a slow first range;
listing one range at a time would give up the parallel listing.) The
listers' work stealing asks ``has_room`` before it cuts a range, and cuts
the lowest, so free listers go just past the caller's position, not to
the far end where they would only wait.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import deque

from .._core.records.types import ObjectInfo

__all__ = ["ListingOrder"]


class _Held:
    """One range's pages, held until every range below it is handed over."""

    __slots__ = ("closed", "pages", "start")

    def __init__(self, start: str) -> None:
        self.start = start
        self.pages: deque[list[ObjectInfo]] = deque()
        self.closed = False


def _start(held: _Held) -> str:
    return held.start


class ListingOrder:
    """Pages of key ranges handed over range after range, each range's in order.

    The ranges are half-open, named by their start, and cover the listing
    without overlap: a range opens before its first page and closes once
    its last page is in. A range may open between two others (a split)
    but never below the lowest one still held.

    Args:
        ahead: most pages held before a lister waits (see the module).
    """

    def __init__(self, ahead: int) -> None:
        self.ahead = max(1, ahead)
        self._held: list[_Held] = []  # by start
        self._by_start: dict[str, _Held] = {}
        self._pages = 0
        self._arrival: asyncio.Future[None] | None = None
        # Replaced each time a page is taken, so every lister waiting on the
        # old one wakes and looks again.
        self._room = asyncio.Event()

    @property
    def has_room(self) -> bool:
        """Whether a lister's next page would be held without waiting."""
        return self._pages < self.ahead

    def opened(self, start: str) -> None:
        """A range starting at ``start`` is listed from now on."""
        held = _Held(start)
        self._held.insert(bisect_left(self._held, start, key=_start), held)
        self._by_start[start] = held

    def closed(self, start: str) -> None:
        """The range starting at ``start`` brought its last page."""
        self._by_start[start].closed = True
        self._arrived()

    async def put(self, start: str, objs: list[ObjectInfo]) -> None:
        """Hold a page of the range at ``start``; wait while too much is held."""
        held = self._by_start[start]
        held.pages.append(objs)
        self._pages += 1
        self._arrived()
        while self._pages >= self.ahead and not (held is self._held[0]
                                                 and len(held.pages) <= 1):
            await self._room.wait()

    def take(self) -> list[ObjectInfo] | None:
        """The next page in name order, or ``None`` when it is not in yet
        (or every range opened so far is handed over)."""
        while self._held:
            first = self._held[0]
            if first.pages:
                self._pages -= 1
                self._room.set()
                self._room = asyncio.Event()
                return first.pages.popleft()
            if not first.closed:
                return None
            del self._held[0]
            del self._by_start[first.start]
        return None

    def arrival(self) -> asyncio.Future[None]:
        """A future done once a page comes in or a range closes (``take`` may
        then have a page); the caller cancels it if it stops waiting first."""
        if self._arrival is None or self._arrival.done():
            self._arrival = asyncio.get_running_loop().create_future()
        return self._arrival

    def _arrived(self) -> None:
        if self._arrival is not None and not self._arrival.done():
            self._arrival.set_result(None)
