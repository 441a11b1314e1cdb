"""Shards' sample counts up front; their per-sample indexes on demand.

A dataset needs every shard's sample count before its first step (the
epoch order is a function of them), and a shard's per-sample offsets only
while it reads that shard. :func:`count_shards` finds the counts from the
first of: the local index cache (an entry's header, its columns left on
disk), the folder's manifest (one GET for every shard: see
:mod:`._manifest`), the shard's sidecar (read, put in the cache, its columns
dropped); :func:`stream_counts` indexes the rest by one streamed pass
each, whose indexes go to the cache (and, asked, beside the shards as
sidecars) and whose columns are dropped too.

:func:`load_index` brings one shard's per-sample index back when it is
read (the cache maps its file; else the sidecar; else one streamed pass),
and holds its count against the one counted: a shard changed since it was
counted is refused, never cut by boundaries of another version.
:class:`IndexLRU` keeps the indexes of the shards being read within a
byte budget.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable, Sequence

from ..._core.errors import ShardFormatError
from ..._core.portal import get_portal
from ..._core.store import ObjectStore
from ..._core.types import ObjectInfo
from ..._core.urls import format_url
from ..._core.window import gather_bounded
from . import _build  # its stream_index looked up per call: tests count the passes
from ._build import INDEX_THREADS, _sidecar
from ._formats import ShardFormat
from ._index import INDEX_SUFFIX, IndexCache, ShardIndex, encode_index
from ._manifest import MANIFEST_NAME, Entry, manifest_folder, read_manifest

__all__ = ["Count", "IndexLRU", "count_shards", "load_index", "stream_counts"]

#: ``(samples, data bytes)`` of a shard.
Count = tuple[int, int]
# Sidecars read at once (small objects: latency-bound).
_SIDECARS_AT_ONCE = 32


def count_shards(store: ObjectStore, shards: Sequence[ObjectInfo], fmt: ShardFormat, *,
                 cache: IndexCache | None, sidecars: bool) -> list[Count | None]:
    """Each shard's count from its manifest entry, cached index or sidecar (see
    the module); None for a shard that must be streamed to be counted.

    Args:
        store: the shards' store.
        shards: the shards.
        fmt: their format.
        cache: the local index cache (None: none).
        sidecars: read the manifest and the sidecars.

    Returns:
        Per shard, its count or None.

    Raises:
        ShardFormatError: the manifest or a sidecar is damaged.
        StorageError: a read failed.
    """
    found: list[Count | None] = [
        None if cache is None else cache.count(info.url, info.generation or None, info.size,
                                               info.crc32c, format=fmt.name)
        for info in shards]
    # The cache first: a machine that counted the shards before asks nothing.
    if sidecars and any(count is None for count in found):
        entries = _manifest(store, shards)
        for k, info in enumerate(shards):
            entry = entries.get(info.name)
            if found[k] is None and entry is not None and entry.format == fmt.name \
                    and entry.matches(info):
                found[k] = entry.samples, entry.data_size
    missing = [k for k, count in enumerate(found) if count is None]
    if sidecars and missing:
        async def side(k: int) -> Count | None:
            index = await _sidecar(store, shards[k], fmt)
            if index is None:
                return None
            if cache is not None:
                cache.put(shards[k].url, index, crc=shards[k].crc32c)
            return len(index), index.data_size  # the columns go: read again when wanted

        read = get_portal().call(gather_bounded((side(k) for k in missing), _SIDECARS_AT_ONCE))
        for k, count in zip(missing, read, strict=True):
            found[k] = count
    return found


def _manifest(store: ObjectStore, shards: Sequence[ObjectInfo]) -> dict[str, Entry]:
    """The entries of the manifest beside the shards, by the shards' full names."""
    bucket = shards[0].bucket
    if any(info.bucket != bucket for info in shards):
        return {}  # one manifest names one folder's shards
    folder = manifest_folder(info.name for info in shards)
    url = format_url(shards[0].scheme, bucket, folder + MANIFEST_NAME)
    entries = get_portal().call(read_manifest(store, bucket, folder, url))
    return {} if entries is None else {folder + name: e for name, e in entries.items()}


def stream_counts(store: ObjectStore, shards: Sequence[ObjectInfo], fmt: ShardFormat, *,
                  cache: IndexCache | None, publish: bool = False) -> list[ShardIndex]:
    """Index ``shards`` by one streamed pass each (a few at once); each index
    goes to the cache and, with ``publish``, beside its shard as a sidecar.

    Returns:
        The indexes, in order (the caller keeps their counts, not their columns).

    Raises:
        ShardFormatError: a shard is not its format.
        StorageError: a read or a sidecar's write failed.
    """
    def one(info: ObjectInfo) -> ShardIndex:
        index = _build.stream_index(store, info, fmt)
        if cache is not None:
            cache.put(info.url, index, crc=info.crc32c)
        if publish:
            get_portal().call(store.write(info.bucket, info.name + INDEX_SUFFIX,
                                          encode_index(index)))
        return index

    if not shards:
        return []
    with concurrent.futures.ThreadPoolExecutor(min(INDEX_THREADS, len(shards))) as pool:
        # map() raises the first failure in shard order; the rest still finish.
        return list(pool.map(one, shards))


def load_index(store: ObjectStore, info: ObjectInfo, fmt: ShardFormat, count: int, *,
               cache: IndexCache | None, sidecars: bool) -> ShardIndex:
    """One shard's per-sample index (cache, sidecar, else one streamed pass),
    held against the count the dataset was made with.

    Raises:
        ShardFormatError: the shard is not its format, or its index counts
            other than the dataset does (it changed since it was counted).
        StorageError: a read failed.
    """
    index = None if cache is None else cache.get(
        info.url, info.generation or None, info.size, info.crc32c, format=fmt.name)
    if index is None and sidecars:
        index = get_portal().call(_sidecar(store, info, fmt))
        if index is not None and cache is not None:
            cache.put(info.url, index, crc=info.crc32c)
    if index is None:
        index = _build.stream_index(store, info, fmt)
        if cache is not None:
            cache.put(info.url, index, crc=info.crc32c)
    if len(index) != count:
        raise ShardFormatError(
            f"index {info.url}: {len(index)} samples, but the dataset was made with "
            f"{count} (its manifest or a cached count is of another version of the "
            "shard); make the dataset again")
    return index


class IndexLRU:
    """The per-sample indexes of the shards being read, least recently used
    dropped past ``max_bytes`` (the one just loaded always stays).

    Thread-safe: the reads' loop and the consumer's thread both look up.

    Args:
        load: loads shard ``k``'s index.
        max_bytes: most bytes of columns held.
    """

    def __init__(self, load: Callable[[int], ShardIndex], max_bytes: int) -> None:
        self._load = load
        self.max_bytes = max_bytes
        self._held: collections.OrderedDict[int, ShardIndex] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.loads = 0

    def __len__(self) -> int:
        return len(self._held)

    def cached(self, k: int) -> ShardIndex | None:
        """Shard ``k``'s index if held (now the most recently used)."""
        with self._lock:
            index = self._held.get(k)
            if index is not None:
                self._held.move_to_end(k)
            return index

    def get(self, k: int) -> ShardIndex:
        """Shard ``k``'s index, loaded if not held (blocks: not on the loop)."""
        index = self.cached(k)
        if index is not None:
            return index
        index = self._load(k)
        with self._lock:
            self.loads += 1
            if k not in self._held:
                self._held[k] = index
                self.nbytes += index.nbytes
            self._held.move_to_end(k)
            while self.nbytes > self.max_bytes and len(self._held) > 1:
                _, dropped = self._held.popitem(last=False)
                self.nbytes -= dropped.nbytes
            return self._held[k]

    def clear(self) -> None:
        """Hold none."""
        with self._lock:
            self._held.clear()
            self.nbytes = 0
