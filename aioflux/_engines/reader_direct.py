"""The reads that skip the blocks: a long read fetched straight into the
caller's buffer (``_across``), and a small read away from the last one
fetched alone (``_exact``).

Both serve the access pattern of columnar files (Parquet through fsspec
or pyarrow): a footer at the end, then column chunks here and there, some
of them many blocks long. Read by blocks, the footer cost a block and its
read-ahead, and a long chunk was fetched into blocks and copied out.
"""

from __future__ import annotations

import asyncio

from .._core.errors import ChecksumMismatch, NotFound, PreconditionFailed, ProtocolError
from .reader_versions import VersionedReads

__all__ = ["DirectReads"]

# What the first read of a recent info may end with when the cache was
# stale (see VersionedReads._recover).
_STALE = (NotFound, PreconditionFailed, ProtocolError, ChecksumMismatch)


class DirectReads(VersionedReads):
    """The reader's reads that bypass the block window."""

    async def _fill(self, out: memoryview, base: int,
                    ranges: list[tuple[int, int]]) -> list[int | None]:
        """``ranges`` fetched into ``out`` (which starts at ``base``), at most
        ``read_ahead`` GETs at once: a read of a long rest at once ran a
        GET a block (256 for 1 GiB), and that many connections' small
        interleaved receives cost the CPU the direct fetch saved. Returns
        each range's crc32c, only once no GET is left writing into ``out``:
        on an error, the others are cancelled and waited for (``out`` is the
        caller's)."""
        crcs: list[int | None] = [None] * len(ranges)
        queue = iter(enumerate(ranges))

        async def drain() -> None:
            for k, (s, e) in queue:  # one iterator, shared by the GETs' loops
                crcs[k] = await self._window.fetch_into(out[s - base:e - base], s, e)

        tasks = [asyncio.ensure_future(drain()) for _ in range(min(self.read_ahead, len(ranges)))]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
        return crcs

    def _exact(self, count: int) -> bytearray | None:
        """A small read away from where the last one ended, of bytes no
        block holds: just those bytes, in one ranged GET with no read-ahead
        (a Parquet reader's 64 KiB footer cost a 4 MiB block, then its
        column chunks start back at the front). None: read by blocks."""
        start = self._pos
        # A read going on from the last one (the common case) is decided first.
        if start == self._last_end or count > self.block_size // 4 \
                or self.size <= self.block_size:
            # (One block is the whole object, which its reader wants anyway:
            # a Parquet file of 2 MiB is one GET, not a footer's and then the
            # file's.)
            return None
        end = min(self.size, start + count)
        first, last = start // self.block_size, (end - 1) // self.block_size
        if start >= end or any(i in self._window.blocks for i in range(first, last + 1)):
            return None
        if first == self._check.next and start == first * self.block_size:
            # The block the front-to-back crc32c needs next, from its start
            # (torch.load seeks back to 0 for a zip's first header): read by
            # blocks, so the whole read is still checked.
            return None
        self._check_open()  # as _fetch: a read that waited out a close()
        try:
            buf, _ = self._window.portal.call(self._window.fetch_block(start, end))
        except _STALE as exc:
            if not self._recover(exc):
                raise
            return None  # read by blocks, at the current version
        if not self._settle():
            return None  # read by blocks, at the version the stat found
        self._recent = False
        return buf

    def _across(self, out: memoryview, ahead_too: bool = True) -> int | None:
        """A read spanning whole blocks that no read-ahead holds: those go
        straight into ``out``; an unheld block it ends inside is fetched as
        a block (the next read goes on in it). A Parquet reader's 32 MiB row
        group was fetched into blocks, then copied: twice the memory
        touched, every page of it a fault. ``ahead_too`` False: no read-ahead
        past it (a piece of a longer read, whose next piece goes straight
        into memory too). None: read by blocks."""
        if self._check.corrupt is not None:
            raise self._check.corrupt
        self._confirm_end(len(out))
        bs, start = self.block_size, self._pos
        end = min(self.size, start + len(out))
        if end - start < bs:
            return None
        first, last = start // bs, (end - 1) // bs
        spans = [(i, i * bs, min(i * bs + bs, self.size)) for i in range(first, last + 1)]
        if not any(s >= start and e <= end and i not in self._window.blocks for i, s, e in spans):
            return None
        self._check_open()  # as _fetch: a read that waited out a close()
        # The read-ahead past the read (from the block it ends inside) starts
        # with it, not once it is done, so a Parquet reader's next range, the
        # rest of a row group, waits no round trip. Within the read-ahead's
        # bound, blocks this read holds count; blocks it neither reads nor
        # keeps (behind it, from before a seek) go first, or they would take
        # that room and the block the read ends inside come on top of the bound.
        ahead = end // bs if end < self.size else last + 1
        for old in [i for i in self._window.blocks if i < first or i >= ahead + self.read_ahead]:
            self._window.blocks.pop(old).cancel()
        room = self.read_ahead - len(self._window.blocks)
        direct: dict[int, tuple[int, int]] = {}  # block -> range fetched into out
        for i, s, e in spans:
            # The block the read ends inside goes into ``out`` too when the
            # bound has no room to keep it (the next read fetches it whole).
            if i not in self._window.blocks and (e <= end or room <= 0):
                direct[i] = (max(s, start), min(e, end))
        if ahead_too:
            for i in range(ahead, min(ahead + room, (self.size - 1) // bs + 1)):
                self._window.fetch(i)
        try:
            crcs = dict(zip(direct, self._window.portal.call(
                self._fill(out, start, list(direct.values())), settled=True), strict=True))
            held: dict[int, tuple[bytearray, int | None]] = {}
            for i, _, _ in spans:
                if i not in direct:
                    outcome = self._window.fetch(i).result()
                    if isinstance(outcome, Exception):
                        raise outcome
                    held[i] = outcome
        except Exception as exc:
            self._window.drop()  # as _block does: reading again fetches anew
            if self._recover(exc):
                return None  # nothing handed out: read the current version by blocks
            raise
        if not self._settle():
            return None  # nothing handed out: read the stat's version by blocks
        self._recent = False
        for i, s, e in spans:
            if i in held:
                lo, hi = max(s, start), min(e, end)
                out[lo - start:hi - start] = memoryview(held[i][0])[lo - s:hi - s]
            if i in held or (s >= start and e <= end):  # the whole block: its crc32c counts
                whole = held[i] if i in held else (out[s - start:e - start], crcs[i])
                self._check.account(i, *whole)
        self._pos = self._last_end = end
        if ahead_too:
            self._window.schedule(ahead)
        return end - start
