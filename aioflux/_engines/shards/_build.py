"""Finding a dataset's shards and their indexes.

An index comes from the first of: the local index cache (this version of
the shard), the shard's sidecar ``<shard>.idx`` (when it matches the
shard: see :func:`sidecar_matches`), or one streamed pass over the shard,
checked against its crc32c as it goes, whose result goes to the cache.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import re
from collections.abc import Iterator, Sequence

from ..._core.errors import NotFound, ShardFormatError
from ..._core.options import ReaderOptions
from ..._core.portal import get_portal
from ..._core.store import ObjectStore
from ..._core.types import ObjectInfo
from ..._core.window import gather_bounded
from ..reader import ObjectReader
from ._formats import ShardFormat, compression_of, decompressed
from ._index import INDEX_SUFFIX, IndexCache, ShardIndex, decode_index

__all__ = ["INDEX_THREADS", "chain_counts", "expand_braces", "index_shards", "is_sidecar",
           "sidecar_matches", "stream_index"]

# Shards indexed at once by streaming, each with a reader holding at most
# 8 blocks of 4 MiB ahead: one shard's parsing overlaps the others' reads,
# in at most 128 MiB.
INDEX_THREADS = 4
_INDEX_READER = ReaderOptions(read_ahead=8)

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


def expand_braces(pattern: str) -> list[str]:
    """Expand ``{000..099}`` ranges (zero-padded as written) and ``{a,b}`` lists.

    Args:
        pattern: e.g. ``gs://b/train-{000000..000099}.tar``.

    Returns:
        The names, in order.
    """
    found = _BRACE.search(pattern)
    if found is None:
        return [pattern]
    body = found.group(1)
    numbers = _RANGE.match(body)
    if numbers:
        lo, hi = numbers.groups()
        width = len(lo) if lo.startswith("0") else 0
        step = 1 if int(hi) >= int(lo) else -1
        choices = [str(n).zfill(width) for n in range(int(lo), int(hi) + step, step)]
    else:
        choices = body.split(",")
    head, tail = pattern[:found.start()], pattern[found.end():]
    return [name for choice in choices for name in expand_braces(head + choice + tail)]


def is_sidecar(name: str) -> bool:
    """Whether an object name is a shard's index sidecar."""
    return name.endswith(INDEX_SUFFIX)


def _chunks(reader: ObjectReader, size: int) -> Iterator[bytes]:
    while True:
        chunk = reader.read(size)
        if not chunk:
            return
        yield chunk


def stream_index(store: ObjectStore, info: ObjectInfo, fmt: ShardFormat,
                 options: ReaderOptions | None = None) -> ShardIndex:
    """Index one shard by streaming it once (ranged reads ahead, crc32c checked).

    Args:
        store: the shard's store.
        info: the shard (from a listing or stat).
        fmt: its format.
        options: the reader's block size and read-ahead.

    Returns:
        The index.

    Raises:
        ShardFormatError: the shard is not its format (naming the byte).
        ChecksumMismatch: the bytes read are not the object's.
        StorageError: a read failed.
    """
    options = options or _INDEX_READER
    compression = compression_of(info.name)
    # A listing without checksums (S3's): a stat beside the first reads
    # gives the crc32c the stream is checked against.
    with ObjectReader(store, info.bucket, info.name, options=options, info=info,
                      stat_beside=info.crc32c is None) as reader:
        data = decompressed(_chunks(reader, options.block_size), compression, info.url)
        offsets, lengths, crcs, data_size = fmt.index(data, info.url)
        # The format may stop at its end-of-data marker: read the rest, so the
        # object's crc32c (checked on the last block) covers every byte.
        for _ in _chunks(reader, options.block_size):
            pass
        # The version read: the stat beside finds a newer one than listed
        # where the shard was replaced meanwhile, and reads that one.
        read = reader.info
    return ShardIndex(format=fmt.name, compression=compression, size=read.size,
                      crc32c=read.crc32c, version=read.generation or None,
                      data_size=data_size, offsets=offsets, lengths=lengths, crcs=crcs)


async def sidecar_matches(store: ObjectStore, info: ObjectInfo, index: ShardIndex) -> bool:
    """Whether a sidecar's ``index`` is of the shard ``info`` names, as it is now.

    Same size, and the same crc32c where the shard's and the index's are
    both known (a copy of the pair keeps it, and changes the version), else
    the version indexed. A listing that leaves the crc32c out (S3's) is
    completed by the shard's metadata where the versions differ: a copy
    that changed the ETag keeps its sidecar.

    Args:
        store: the shard's store.
        info: the shard (from a listing or stat).
        index: its sidecar's index.

    Returns:
        True if the index's boundaries are the shard's.

    Raises:
        StorageError: the stat failed (other than NotFound).
    """
    version = info.generation or None
    if index.matches(info.size, info.crc32c, version):
        return True
    if info.crc32c is not None or index.crc32c is None or index.size != info.size:
        return False
    try:
        now = await store.stat(info.bucket, info.name)
    except NotFound:
        return False
    # Another version than listed is not the one reads would be pinned to.
    return (now.generation or None) == version and now.crc32c is not None and \
        index.matches(now.size, now.crc32c, version)


async def _sidecar(store: ObjectStore, info: ObjectInfo, fmt: ShardFormat) -> ShardIndex | None:
    name = info.name + INDEX_SUFFIX
    try:
        data = await store.read(info.bucket, name)
    except NotFound:
        return None
    index = decode_index(data, f"{info.url}{INDEX_SUFFIX}")
    if index.format != fmt.name or not await sidecar_matches(store, info, index):
        return None  # a stale sidecar: the shard was rewritten without it
    index.version = info.generation or None
    return index


def index_shards(store: ObjectStore, shards: Sequence[ObjectInfo], fmt: ShardFormat, *,
                 cache: IndexCache | None, sidecars: bool = True) -> list[ShardIndex]:
    """Every shard's index (cache, sidecar, else one streamed pass; see the module).

    Args:
        store: the shards' store.
        shards: the shards.
        fmt: their format.
        cache: the local index cache (None: none).
        sidecars: look for ``<shard>.idx`` sidecars.

    Returns:
        One index per shard, in order.

    Raises:
        ShardFormatError: a shard (or its sidecar) is not its format.
        StorageError: a read failed.
    """
    found: list[ShardIndex | None] = [
        None if cache is None
        else cache.get(s.url, s.generation or None, s.size, s.crc32c, format=fmt.name)
        for s in shards]
    missing = [i for i, index in enumerate(found) if index is None]
    if sidecars and missing:
        read = get_portal().call(gather_bounded(
            (_sidecar(store, shards[i], fmt) for i in missing), 32))
        for i, index in zip(missing, read, strict=True):
            found[i] = index
            if index is not None and cache is not None:
                cache.put(shards[i].url, index, crc=shards[i].crc32c)
    todo = [i for i, index in enumerate(found) if index is None]
    if todo:
        with concurrent.futures.ThreadPoolExecutor(min(INDEX_THREADS, len(todo))) as pool:
            # map() raises the first failure in shard order; the rest still finish.
            for i, index in zip(todo, pool.map(lambda i: stream_index(store, shards[i], fmt),
                                               todo), strict=True):
                found[i] = index
                if cache is not None:
                    cache.put(shards[i].url, index, crc=shards[i].crc32c)
    out = []
    for info, index in zip(shards, found, strict=True):
        assert index is not None
        if index.format != fmt.name:
            raise ShardFormatError(f"index {info.url}: indexed as {index.format!r}, "
                                   f"read as {fmt.name!r}")
        out.append(index)
    return out


def chain_counts(indexes: Sequence[ShardIndex]) -> list[int]:
    """Each shard's first sample in the dataset's numbering (plus the total last)."""
    return list(itertools.accumulate((len(i) for i in indexes), initial=0))
