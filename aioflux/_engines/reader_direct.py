"""The reads that skip the blocks: a long read fetched straight into the
caller's buffer (:func:`across`), and a small read away from the last one
fetched alone (:func:`exact`): functions of the reader's parts and its
position, which the reader moves by what they return.

Both serve the access pattern of columnar files (Parquet through fsspec
or pyarrow): a footer at the end, then column chunks here and there, some
of them many blocks long. Read by blocks, the footer cost a block and its
read-ahead, and a long chunk was fetched into blocks and copied out.
"""

from __future__ import annotations

import asyncio

from .._core.errors import ChecksumMismatch, NotFound, PreconditionFailed, ProtocolError
from .reader_blocks import BlockWindow
from .reader_check import FrontToBackCheck
from .reader_versions import PinnedVersion

__all__ = ["across", "exact"]

# What the first read of a recent info may end with when the cache was
# stale (see PinnedVersion.recover).
_STALE = (NotFound, PreconditionFailed, ProtocolError, ChecksumMismatch)



async def _fill(window: BlockWindow, out: memoryview, base: int,
                ranges: list[tuple[int, int]]) -> list[int | None]:
    """``ranges`` fetched into ``out`` (which starts at ``base``), at most
    ``read_ahead`` GETs at once: a read of a long rest at once ran a GET a
    block (256 for 1 GiB), and that many connections' small interleaved
    receives cost the CPU the direct fetch saved. Returns each range's
    crc32c, only once no GET is left writing into ``out``: on an error,
    the others are cancelled and waited for (``out`` is the caller's)."""
    crcs: list[int | None] = [None] * len(ranges)
    queue = iter(enumerate(ranges))

    async def drain() -> None:
        for k, (s, e) in queue:  # one iterator, shared by the GETs' loops
            crcs[k] = await window.fetch_into(out[s - base:e - base], s, e)

    tasks = [asyncio.ensure_future(drain()) for _ in range(min(window.read_ahead, len(ranges)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
    return crcs


def exact(window: BlockWindow, check: FrontToBackCheck, version: PinnedVersion,
          pos: int, last_end: int, count: int) -> bytearray | None:
    """A small read at ``pos``, away from where the last one ended
    (``last_end``), of bytes no block holds: just those bytes, in one
    ranged GET with no read-ahead (a Parquet reader's 64 KiB footer cost a
    4 MiB block, then its column chunks start back at the front). None:
    read by blocks."""
    bs, size = window.block_size, version.size
    # A read going on from the last one (the common case) is decided first.
    if pos == last_end or count > bs // 4 or size <= bs:
        # (One block is the whole object, which its reader wants anyway:
        # a Parquet file of 2 MiB is one GET, not a footer's and then the
        # file's.)
        return None
    end = min(size, pos + count)
    first, last = pos // bs, (end - 1) // bs
    if pos >= end or any(i in window.blocks for i in range(first, last + 1)):
        return None
    if first == check.next and pos == first * bs:
        # The block the front-to-back crc32c needs next, from its start
        # (torch.load seeks back to 0 for a zip's first header): read by
        # blocks, so the whole read is still checked.
        return None
    window.check_open()  # as a block's fetch: a read that waited out a close()
    try:
        buf, _ = window.portal.call(window.fetch_block(pos, end))
    except _STALE as exc:
        if not version.recover(exc):
            raise
        return None  # read by blocks, at the current version
    if not version.settle():
        return None  # read by blocks, at the version the stat found
    return buf


def across(window: BlockWindow, check: FrontToBackCheck, version: PinnedVersion,
           pos: int, out: memoryview, ahead_too: bool = True) -> int | None:
    """A read at ``pos`` spanning whole blocks that no read-ahead holds:
    those go straight into ``out``; an unheld block it ends inside is
    fetched as a block (the next read goes on in it). A Parquet reader's
    32 MiB row group was fetched into blocks, then copied: twice the memory
    touched, every page of it a fault. ``ahead_too`` False: no read-ahead
    past it (a piece of a longer read, whose next piece goes straight into
    memory too). Returns the bytes read, by which the reader moves on;
    None: read by blocks."""
    if check.corrupt is not None:
        raise check.corrupt
    version.confirm_end(len(out), pos)
    bs, start, size = window.block_size, pos, version.size
    end = min(size, start + len(out))
    if end - start < bs:
        return None
    first, last = start // bs, (end - 1) // bs
    spans = [(i, i * bs, min(i * bs + bs, size)) for i in range(first, last + 1)]
    if not any(s >= start and e <= end and i not in window.blocks for i, s, e in spans):
        return None
    window.check_open()  # as a block's fetch: a read that waited out a close()
    # The read-ahead past the read (from the block it ends inside) starts
    # with it, not once it is done, so a Parquet reader's next range, the
    # rest of a row group, waits no round trip. Within the read-ahead's
    # bound, blocks this read holds count; blocks it neither reads nor
    # keeps (behind it, from before a seek) go first, or they would take
    # that room and the block the read ends inside come on top of the bound.
    read_ahead = window.read_ahead
    ahead = end // bs if end < size else last + 1
    for old in [i for i in window.blocks if i < first or i >= ahead + read_ahead]:
        window.blocks.pop(old).cancel()
    room = read_ahead - len(window.blocks)
    direct: dict[int, tuple[int, int]] = {}  # block -> range fetched into out
    for i, s, e in spans:
        # The block the read ends inside goes into ``out`` too when the
        # bound has no room to keep it (the next read fetches it whole).
        if i not in window.blocks and (e <= end or room <= 0):
            direct[i] = (max(s, start), min(e, end))
    if ahead_too:
        for i in range(ahead, min(ahead + room, (size - 1) // bs + 1)):
            window.fetch(i)
    try:
        crcs = dict(zip(direct, window.portal.call(
            _fill(window, out, start, list(direct.values())), settled=True), strict=True))
        held: dict[int, tuple[bytearray, int | None]] = {}
        for i, _, _ in spans:
            if i not in direct:
                outcome = window.fetch(i).result()
                if isinstance(outcome, Exception):
                    raise outcome
                held[i] = outcome
    except Exception as exc:
        window.drop()  # as a block's wait does: reading again fetches anew
        if version.recover(exc):
            return None  # nothing handed out: read the current version by blocks
        raise
    if not version.settle():
        return None  # nothing handed out: read the stat's version by blocks
    for i, s, e in spans:
        if i in held:
            lo, hi = max(s, start), min(e, end)
            out[lo - start:hi - start] = memoryview(held[i][0])[lo - s:hi - s]
        if i in held or (s >= start and e <= end):  # the whole block: its crc32c counts
            whole = held[i] if i in held else (out[s - start:e - start], crcs[i])
            check.account(i, *whole)
    if ahead_too:
        window.schedule(ahead)
    return end - start
