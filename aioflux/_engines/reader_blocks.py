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
import io
import os
import threading
from typing import TYPE_CHECKING

from .._core.errors import InvalidArgument, ProtocolError
from .._core.portal import Portal, get_portal
from .._core.types import ObjectInfo

if TYPE_CHECKING:
    from .._core.store import ObjectStore
    from .reader_check import FrontToBackCheck

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


class BlockWindow(io.RawIOBase):
    """The blocks of one object version, fetched and held around the position.

    The reader's lowest layer: it holds the reader's state (set by
    ``ObjectReader.__init__``) and fetches what the layers above ask for.
    """

    _client: ObjectStore
    _portal: Portal
    _pid: int
    bucket: str
    name: str
    url: str
    block_size: int
    read_ahead: int
    size: int
    info: ObjectInfo
    _blocks: dict[int, Block]
    _lock: threading.RLock
    _stat: concurrent.futures.Future[ObjectInfo] | None
    # The position, and where the last read ended (a read starting
    # elsewhere follows a seek).
    _pos: int
    _last_end: int
    # Whether a GET works out its bytes' crc32c, and the next block the
    # check accounts.
    _check: FrontToBackCheck

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"read from closed reader {self.url}")

    def _fetch(self, index: int) -> Block:
        """Block ``index``, held or asked for now."""
        block = self._blocks.get(index)
        if block is None:
            # A read that waited for the lock while close() ran on another
            # thread would fetch blocks nothing drops (close() has run): it
            # fails as a read after close. Checked per GET, not per read.
            self._check_open()
            start = index * self.block_size
            end = min(start + self.block_size, self.size)
            block = self._portal.submit(self._read_block(start, end))
            self._blocks[index] = block
        return block

    async def _read_block(self, start: int, end: int) -> Outcome:
        # The error is returned, not raised: a block dropped by a seek or by
        # close() may already have failed, and an error nobody reads would be
        # logged by asyncio as "Task exception was never retrieved".
        try:
            return await self._fetch_block(start, end)
        except Exception as exc:
            return exc

    async def _fetch_block(self, start: int, end: int) -> tuple[bytearray, int | None]:
        buf = bytearray(end - start)
        return buf, await self._fetch_into(memoryview(buf), start, end)

    async def _fetch_into(self, view: memoryview, start: int, end: int) -> int | None:
        """Bytes ``[start, end)`` into ``view``; their crc32c if checking."""
        # ``size``: a server reporting another length (or metadata larger
        # than the object) fails at once instead of looping on short blocks.
        fetched = await self._client.fetch(
            self.bucket, self.name, start=start, end=end, into=view,
            generation=self.info.generation or None, size=self.size, want_crc=self._check.want_crc)
        if fetched.count != end - start:
            raise ProtocolError(f"read {self.url} failed: bytes [{start}, "
                                f"{end}) came back as {fetched.count} bytes",
                                operation="read", bucket=self.bucket, name=self.name)
        return fetched.crc

    def _schedule(self, index: int) -> None:
        """The window moved to block ``index``: the blocks inside it asked
        for, blocks outside it kept only in the room it leaves."""
        self._adopt_after_fork()
        last = (self.size - 1) // self.block_size if self.size else -1
        stop = min(index + self.read_ahead, last + 1)
        self._make_room(range(index, stop))
        for i in range(index, stop):
            self._fetch(i)

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
        outside = [i for i in self._blocks if i not in window]
        excess = len(outside) + len(window) - self.read_ahead
        if excess <= 0:
            return
        after = self._check.next
        outside.sort(key=lambda i: (i < after, abs(i - after)), reverse=True)
        for old in outside[:excess]:
            self._blocks.pop(old).cancel()

    def _drop_blocks(self) -> None:
        with self._locked():
            for block in self._blocks.values():
                block.cancel()
            self._blocks.clear()

    def _adopt_after_fork(self) -> None:
        if self._pid == os.getpid():
            return
        # Once, whichever of the child's threads reads first: two adopting
        # at once would each put in a lock of their own and read side by
        # side. The reader's own lock cannot guard this: a parent's
        # thread may have held it at the fork.
        with _adopting:
            if self._pid == os.getpid():
                return
            # A forked child's copy (a DataLoader worker reading a file its
            # parent opened): the parent's read-ahead never completes here,
            # and its futures' locks may be frozen mid-use. Forget it and
            # fetch on this process's loop.
            self._portal, self._blocks = get_portal(), {}
            if self._stat is not None:  # the parent's never completes here
                self._stat = self._portal.submit(self._client.stat(self.bucket, self.name))
            self._lock = threading.RLock()
            self._pid = os.getpid()  # last: the other threads wait until all is set

    def _locked(self) -> threading.RLock:
        """The lock, after the adoption a forked child's copy needs first."""
        self._adopt_after_fork()
        return self._lock
