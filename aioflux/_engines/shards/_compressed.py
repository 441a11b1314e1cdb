"""A compressed shard's data: decompressed front to back, once per machine with a disk cache.

A gzip or zstd shard cannot be read from the middle. Without a disk cache,
each iterator decompresses the shards it reads with a :class:`Cursor` of
its own, so every DataLoader worker and rank that gets samples of a shard
(nearly all of them: the epoch order spreads a shard over global batches)
downloads and decompresses the whole of it.

With a disk cache, the first process to want a unit of a shard *claims*
the shard (a lock in the cache) and decompresses all of it, storing each
read unit (``samples_per_read`` samples, the entries uncompressed shards
use) as it passes; the unit it wanted is handed back as soon as it is
decompressed, the rest is stored by a task of its own. Every other process
waits for its unit to appear (polling, as for any entry another process
fills) instead of decompressing the shard itself: a shard is downloaded
and decompressed once per machine, and later epochs read it from disk.
Only shards whose data takes at most a quarter of the cache limit are
treated so: the order reads a few shards at once. A unit evicted before it
was read (more shards in use than the cache holds) is read by the
process's own cursor, as without a cache: a process fills a shard at most
once, so a cache too small costs at most one pass a shard more than none.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterator

from ..._core.errors import ShardFormatError
from ..._core.records.types import ObjectInfo
from ..cache import FIRST_POLL, MAX_POLL, DiskCache, Unclaimable
from ._formats import Decompressor, new_decompressor
from ._index import ShardIndex

__all__ = ["Cursor", "fits", "unit_from_cache", "unit_spans"]

# Compressed bytes fetched per ranged read of a cursor.
_CURSOR_BLOCK = 4 * 1024 * 1024
# A shard's data may take at most this share of a cache limit: the epoch
# order reads a few shards at once (those of the shuffle window, and the
# next ones read ahead), and a unit evicted before it is read costs a
# cursor pass over its shard.
_SHARDS_IN_USE = 4

RawRead = Callable[[int, int], Awaitable[bytes]]

# Fills running in this process: held so that none is collected mid-shard
# (a forked child's loop runs none of its parent's).
_filling: set[asyncio.Task[None]] = set()
# Shards (their claims' keys) a fill of this process could not store every
# unit of (a full or failing cache disk): read by cursors from then on, or
# every unit wanted would cost a pass over the whole shard.
_unstored: set[tuple[str, str, int | None]] = set()
# Shards a fill of this process decompressed whole. A unit of one missing
# later was evicted (more shards in use than the cache holds): this
# process's cursor reads it, as without a cache, instead of filling the
# shard again, which could evict the next unit wanted, and so on.
_filled: set[tuple[str, str, int | None]] = set()


def _forget_in_child() -> None:
    _filling.clear()
    _unstored.clear()
    _filled.clear()


os.register_at_fork(after_in_child=_forget_in_child)


class Cursor:
    """Front-to-back decompression of one shard, keeping only what is asked for.

    Args:
        read: reads the compressed bytes ``[start, end)`` (pinned to the
            indexed version).
        size: the shard's compressed size.
        compression: ``"gzip"`` or ``"zstd"``.
        url: the shard, for messages.
    """

    def __init__(self, read: RawRead, size: int, compression: str, url: str) -> None:
        self.read = read
        self.size = size
        self.url = url
        self.data_pos = 0  # decompressed bytes passed
        self.raw_pos = 0  # compressed bytes read
        self.pending = bytearray()  # decompressed, not yet passed
        self.decompressor: Decompressor = new_decompressor(compression, url)
        # The last block's pieces not made yet: pending never holds more than
        # the run asked for and one piece.
        self.pieces: Iterator[bytes] = iter(())

    async def take(self, start: int, end: int) -> bytes:
        """The data ``[start, end)``; ``start`` at or past where the cursor is."""
        while True:
            skip = min(start - self.data_pos, len(self.pending))
            if skip > 0:  # what lies before the run is dropped as it arrives
                del self.pending[:skip]
                self.data_pos += skip
            if self.data_pos == start and len(self.pending) >= end - start:
                break
            piece = next(self.pieces, None)
            if piece is not None:
                self.pending += piece
                continue
            if self.raw_pos >= self.size:
                self.decompressor.end()
                raise ShardFormatError(f"read {self.url}: the data ends at byte "
                                       f"{self.data_pos + len(self.pending)}, before the "
                                       f"indexed sample ending at {end}")
            block_end = min(self.size, self.raw_pos + _CURSOR_BLOCK)
            raw = await self.read(self.raw_pos, block_end)
            self.raw_pos = block_end
            self.pieces = self.decompressor.feed(raw)
        out = bytes(self.pending[:end - start])
        del self.pending[:end - start]
        self.data_pos = end
        return out


def fits(cache: DiskCache, index: ShardIndex) -> bool:
    """Whether the shard's decompressed units go into ``cache`` (see the module)."""
    return index.compression is not None and (
        cache.limit is None or _SHARDS_IN_USE * index.data_size <= cache.limit)


def unit_spans(index: ShardIndex, unit: int) -> Iterator[tuple[int, int]]:
    """The data ranges of the shard's read units, in order."""
    for first in range(0, len(index), unit):
        yield index.span(first, min(len(index), first + unit) - 1)


def _unit_entry(info: ObjectInfo, start: int, end: int) -> ObjectInfo:
    # Decompressed bytes: named apart from a raw range ("#bytes=") of the shard.
    return info._replace(name=f"{info.name}#data={start}-{end}", size=end - start,
                         crc32c=None, md5=None)


def _shard_key(claim: ObjectInfo) -> tuple[str, str, int | None]:
    return claim.bucket, claim.name, claim.generation


def _claim_of(info: ObjectInfo, index: ShardIndex) -> ObjectInfo:
    return info._replace(name=f"{info.name}#decompress", size=index.data_size,
                         crc32c=None, md5=None)


async def unit_from_cache(cache: DiskCache, info: ObjectInfo, index: ShardIndex, unit: int,
                          start: int, end: int, new_cursor: Callable[[], Cursor]
                          ) -> bytes | None:
    """The read unit ``[start, end)`` of a compressed shard, from ``cache``.

    On a miss the shard is claimed and decompressed whole into the cache
    (this unit returned on its way), or, when another process holds the
    claim, the unit is waited for.

    Args:
        cache: the disk cache (:func:`fits` the shard).
        info: the shard (its version is the entries' key).
        index: its index.
        unit: samples per read unit.
        start: the unit's first data byte.
        end: its end.
        new_cursor: a cursor over the shard, from its start.

    Returns:
        The unit's bytes (the caller checks each sample's crc32c), or None
        after ``cache.wait_limit`` seconds of waiting for another process
        (a hung one): the caller reads the unit without the cache.

    Raises:
        ShardFormatError: the shard's data is damaged.
        NotFound, PreconditionFailed, StorageError: as for the shard's reads.
    """
    entry = _unit_entry(info, start, end)
    claim = _claim_of(info, index)
    poll, started = FIRST_POLL, time.monotonic()
    while True:
        data = await cache.lookup(entry)
        if data is not None:
            return data
        if _shard_key(claim) in _unstored or _shard_key(claim) in _filled:
            return None
        try:
            fd = await cache.claim(claim)
        except Unclaimable:  # a read-only or full cache disk: the cursor reads
            _unstored.add(_shard_key(claim))
            return None
        if fd is not None:
            try:
                data = await cache.lookup(entry)  # stored just before the claim was free
                cursor = new_cursor() if data is None else None
            except BaseException:  # cancelled (the reader went away), or a cache error
                cache.release(claim, fd)
                raise
            if cursor is None:
                cache.release(claim, fd)
                return data
            wanted: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            # Retrieved even when nobody awaits it any more (the reader went away).
            wanted.add_done_callback(lambda f: f.cancelled() or f.exception())
            task = asyncio.ensure_future(
                _fill(cache, info, index, unit, cursor, claim, fd, start, wanted))
            _filling.add(task)
            task.add_done_callback(_filling.discard)
            # Shielded: a caller that goes away leaves the fill to finish
            # the shard (and release its claim).
            return await asyncio.shield(wanted)
        if time.monotonic() - started > cache.wait_limit:
            return None  # a hung filler: the caller reads around it
        await asyncio.sleep(poll)
        poll = min(poll * 2, MAX_POLL)


async def _fill(cache: DiskCache, info: ObjectInfo, index: ShardIndex, unit: int,
                cursor: Cursor, claim: ObjectInfo, fd: int, start: int,
                wanted: asyncio.Future[bytes]) -> None:
    """Decompress the shard, storing every unit; hand ``wanted`` the one at ``start``."""
    try:
        for s, e in unit_spans(index, unit):
            data = await cursor.take(s, e)
            if await cache.put(_unit_entry(info, s, e), data) == "failed":
                _unstored.add(_shard_key(claim))
            if s == start and not wanted.done():
                wanted.set_result(data)
        _filled.add(_shard_key(claim))
    except asyncio.CancelledError:
        if not wanted.done():
            wanted.cancel()
        raise
    except Exception as exc:
        # Past the wanted unit, a unit left unstored is decompressed by
        # whoever wants it next (claiming the shard again).
        if not wanted.done():
            wanted.set_exception(exc)
    finally:
        cache.release(claim, fd)
    if not wanted.done():
        wanted.set_exception(ShardFormatError(
            f"read {info.url}: no read unit of the shard starts at byte {start}"))
