"""The reader's blocks: ranged GETs of ``block_size`` bytes on the portal
loop, a window of at most ``read_ahead`` of them held from the position
on, and what a forked child does with a parent's.

A block is a future of its bytes and crc32c (or of the error its GET ended
with); the window is the only memory the reader holds ahead of its
caller, so every path that fetches a block either stays inside it or drops
blocks first.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._core.concurrency.portal import get_portal
from .._core.errors import InvalidArgument, ProtocolError
from .._core.records.types import ObjectInfo
from .reader_check import FrontToBackCheck

if TYPE_CHECKING:
    from .._core.storage.protocol import ObjectStore

__all__ = ["Block", "BlockWindow", "Outcome"]

# Held while a forked child's thread adopts a reader copied from its parent.
_adopting = threading.Lock()


def _after_fork_in_child() -> None:
    global _adopting
    _adopting = threading.Lock()  # a parent's thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)

# A block's bytes and crc32c, or the error that fetching it ended with.
Outcome = tuple[bytearray, int | None] | Exception
Block = concurrent.futures.Future[Outcome]


class BlockWindow:
    """The blocks of one object version, fetched and held around the position.

    A part of the reader (``ObjectReader._window``): it fetches what the
    reader asks for, within the memory bound.

    Args:
        client: the store.
        bucket: bucket name.
        name: object name.
        url: the object's URL, for errors.
        block_size: bytes a block.
        read_ahead: most blocks held.
        check: the reader's front-to-back check (whether a GET works out
            its crc32c; which block it accounts next, kept longest).
        on_fork: the reader's method called, under the adoption, when a
            forked child's thread first uses this window (the reader asks
            again what its parent asked on the parent's loop). Weak: a
            reader dropped unclosed is closed at once, not by a GC pass.

    Attributes:
        info: the version read (set by :meth:`adopt`, before any fetch).
        size: its size.
        closed: the reader is closed: no block is fetched any more.
    """

    info: ObjectInfo
    size: int

    def __init__(self, client: ObjectStore, bucket: str, name: str, url: str, *,
                 block_size: int, read_ahead: int, check: FrontToBackCheck,
                 on_fork: weakref.WeakMethod[Callable[[], None]]) -> None:
        self.client, self.bucket, self.name, self.url = client, bucket, name, url
        self.block_size, self.read_ahead, self.check = block_size, read_ahead, check
        self._on_fork = on_fork
        self.portal = get_portal()
        self.pid = os.getpid()
        self.blocks: dict[int, Block] = {}
        # Reads, seeks and close from several threads go one at a time, as
        # on io.BufferedReader: unlocked, two reads could take the same
        # position and drop each other's blocks (a false "no bytes at offset"
        # ProtocolError), or account a block's crc32c twice (a false
        # ChecksumMismatch).
        self.lock = threading.RLock()
        self.closed = False

    def adopt(self, info: ObjectInfo) -> None:
        """Fetch the version ``info`` names from now on."""
        self.info = info
        self.size = info.size

    def check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"read from closed reader {self.url}")

    def fetch(self, index: int) -> Block:
        """Block ``index``, held or asked for now."""
        block = self.blocks.get(index)
        if block is None:
            # A read that waited for the lock while close() ran on another
            # thread would fetch blocks nothing drops (close() has run): it
            # fails as a read after close. Checked per GET, not per read.
            self.check_open()
            start = index * self.block_size
            end = min(start + self.block_size, self.size)
            block = self.portal.submit(self._read_block(start, end))
            self.blocks[index] = block
        return block

    async def _read_block(self, start: int, end: int) -> Outcome:
        # The error is returned, not raised: a block dropped by a seek or by
        # close() may already have failed, and an error nobody reads would be
        # logged by asyncio as "Task exception was never retrieved".
        try:
            return await self.fetch_block(start, end)
        except Exception as exc:
            return exc

    async def fetch_block(self, start: int, end: int) -> tuple[bytearray, int | None]:
        """Bytes ``[start, end)`` in a buffer of their own, and their crc32c
        if checking."""
        buf = bytearray(end - start)
        return buf, await self.fetch_into(memoryview(buf), start, end)

    async def fetch_into(self, view: memoryview, start: int, end: int) -> int | None:
        """Bytes ``[start, end)`` into ``view``; their crc32c if checking."""
        # ``size``: a server reporting another length (or metadata larger
        # than the object) fails at once instead of looping on short blocks.
        fetched = await self.client.fetch(
            self.bucket, self.name, start=start, end=end, into=view,
            generation=self.info.generation or None, size=self.size,
            want_crc=self.check.want_crc)
        if fetched.count != end - start:
            raise ProtocolError(f"read {self.url} failed: bytes [{start}, "
                                f"{end}) came back as {fetched.count} bytes",
                                operation="read", bucket=self.bucket, name=self.name)
        return fetched.crc

    def schedule(self, index: int) -> None:
        """The window moved to block ``index``: the blocks inside it asked
        for, blocks outside it kept only in the room it leaves."""
        self.adopt_after_fork()
        last = (self.size - 1) // self.block_size if self.size else -1
        stop = min(index + self.read_ahead, last + 1)
        self._make_room(range(index, stop))
        for i in range(index, stop):
            self.fetch(i)

    def _make_room(self, window: range) -> None:
        """Drop blocks outside ``window`` until they and it fit in
        ``read_ahead`` blocks: the memory bound. Near the end the window is
        short, and blocks from before a seek stay: ``torch.load`` reads the
        first bytes (its whole read-ahead asked for), then the zip's central
        directory in the last block, then the records from the front;
        dropping the blocks behind that last one fetched a small checkpoint
        twice. Dropped first: blocks the front-to-back check has passed,
        then those farthest from where it goes on (the next read from the
        front starts there)."""
        outside = [i for i in self.blocks if i not in window]
        excess = len(outside) + len(window) - self.read_ahead
        if excess <= 0:
            return
        after = self.check.next
        outside.sort(key=lambda i: (i < after, abs(i - after)), reverse=True)
        for old in outside[:excess]:
            self.blocks.pop(old).cancel()

    def drop(self) -> None:
        """Every block dropped (their GETs cancelled)."""
        with self.locked():
            for block in self.blocks.values():
                block.cancel()
            self.blocks.clear()

    def adopt_after_fork(self) -> None:
        if self.pid == os.getpid():
            return
        # Once, whichever of the child's threads reads first: two adopting
        # at once would each put in a lock of their own and read side by
        # side. The reader's own lock cannot guard this: a parent's
        # thread may have held it at the fork.
        with _adopting:
            if self.pid == os.getpid():
                return
            # A forked child's copy (a DataLoader worker reading a file its
            # parent opened): the parent's read-ahead never completes here,
            # and its futures' locks may be frozen mid-use. Forget it and
            # fetch on this process's loop.
            self.portal, self.blocks = get_portal(), {}
            on_fork = self._on_fork()
            if on_fork is not None:
                on_fork()
            self.lock = threading.RLock()
            self.pid = os.getpid()  # last: the other threads wait until all is set

    def locked(self) -> threading.RLock:
        """The lock, after the adoption a forked child's copy needs first."""
        self.adopt_after_fork()
        return self.lock
