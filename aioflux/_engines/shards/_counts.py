"""Shards' sample counts up front; their per-sample indexes on demand.

A dataset needs every shard's sample count before its first step (the
epoch order is a function of them), and a shard's per-sample offsets only
while it reads that shard. :func:`count_shards` finds the counts from the
first of: the folder's manifest (one GET for every shard: see
:mod:`._manifest`), the local index cache (an entry's header, its columns
left on disk), the shard's sidecar (read, put in the cache, its columns
dropped); :func:`stream_counts` indexes the rest by one streamed pass
each, whose indexes go to the cache (and, asked, beside the shards as
sidecars) and whose columns are dropped too. The manifest comes first: the
cache costs a file opened a shard, the manifest one read for all; the cache is asked only of the
shards the manifest does not count (it has none of them, or they changed
since). Counting from the manifest compares columns with columns: its
lines read as numbers and spans at once (:mod:`._manifest_parse`), the
listing's sizes, crc32cs and versions straight from its
:class:`~aioflux._core.memory.object_index.ObjectIndex`, the names compared as bytes
where the manifest has them in the listing's order: no record, no str and
no parsed line a shard (1-1.7 us a shard at load 2-3 on 2 cores, was
10-12.5: ``python -m perf.manifest_counts``).

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
import itertools
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

from ..._core.concurrency.portal import get_portal
from ..._core.concurrency.window import gather_bounded
from ..._core.errors import ShardFormatError
from ..._core.memory.object_index import ObjectIndex
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import format_url
from ..._core.storage.protocol import ObjectStore
from . import _build  # its stream_index looked up per call: tests count the passes
from ._build import INDEX_THREADS, _sidecar
from ._formats import ShardFormat
from ._index import INDEX_SUFFIX, IndexCache, ShardIndex, encode_index
from ._manifest import MANIFEST_NAME, manifest_folder, read_manifest

__all__ = ["Count", "Counts", "IndexLRU", "count_shards", "load_index", "stream_counts"]

#: ``(samples, data bytes)`` of a shard.
Count = tuple[int, int]
# Sidecars read at once (small objects: latency-bound).
_SIDECARS_AT_ONCE = 32


class Counts(Sequence["Count | None"]):
    """Each shard's ``(samples, data bytes)``, or None where not counted yet,
    in two int64 columns (-1: not counted), not a tuple a shard.

    Args:
        n: the number of shards.
    """

    def __init__(self, n: int) -> None:
        self.samples: npt.NDArray[np.int64] = np.full(n, -1, dtype=np.int64)
        self.data: npt.NDArray[np.int64] = np.full(n, -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.samples)

    @overload
    def __getitem__(self, k: int) -> Count | None: ...

    @overload
    def __getitem__(self, k: slice) -> list[Count | None]: ...

    def __getitem__(self, k: int | slice) -> Count | list[Count | None] | None:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        samples = int(self.samples[k])
        return None if samples < 0 else (samples, int(self.data[k]))

    def __iter__(self) -> Iterator[Count | None]:
        return map(self.__getitem__, range(len(self)))

    def __setitem__(self, k: int, count: Count) -> None:
        self.samples[k], self.data[k] = count

    def missing(self) -> list[int]:
        """The shards not counted, in order."""
        return np.flatnonzero(self.samples < 0).tolist()  # type: ignore[no-any-return]


def count_shards(store: ObjectStore, shards: Sequence[ObjectInfo], fmt: ShardFormat, *,
                 cache: IndexCache | None, sidecars: bool,
                 manifests: Collection[str] | None = None) -> Counts:
    """Each shard's count from the manifest, else its cached index or its sidecar
    (see the module); not counted: a shard that must be streamed to be counted.

    Args:
        store: the shards' store.
        shards: the shards.
        fmt: their format.
        cache: the local index cache (None: none).
        sidecars: read the manifest and the sidecars.
        manifests: the manifests a listing of the shards' folder held, by
            name (None: not listed; the manifest is asked for). One not
            there is not asked for.

    Returns:
        The counts.

    Raises:
        ShardFormatError: the manifest or a sidecar is damaged.
        StorageError: a read failed.
    """
    found = Counts(len(shards))
    if sidecars and shards:
        _from_manifest(store, shards, fmt, found, manifests)
    missing = found.missing()
    if cache is not None and missing:
        for k in missing:
            info = shards[k]
            count = cache.count(info.url, info.generation or None, info.size, info.crc32c,
                                format=fmt.name)
            if count is not None:
                found[k] = count
        missing = found.missing()
    # A Parquet file has no sidecar (its footer is its index): none asked for.
    if sidecars and missing and fmt.name != "parquet":
        async def side(k: int) -> Count | None:
            index = await _sidecar(store, shards[k], fmt)
            if index is None:
                return None
            if cache is not None:
                cache.put(shards[k].url, index, crc=shards[k].crc32c)
            return len(index), index.data_size  # the columns go: read again when wanted

        read = get_portal().call(gather_bounded((side(k) for k in missing), _SIDECARS_AT_ONCE))
        for k, count in zip(missing, read, strict=True):
            if count is not None:
                found[k] = count
    return found


def _shared_folder(names: memoryview, ends: npt.NDArray[np.int64]) -> str:
    """The deepest folder every name is in (as :func:`manifest_folder`), of
    names end to end in ``names`` (``ends``: where each ends, from 0): the
    bytes every name shares with the first, compared a position at a time."""
    codes = np.frombuffer(names, dtype=np.uint8)
    first = bytes(names[:ends[1]])
    start, length = ends[:-1], np.diff(ends)
    shared = len(first)
    for k in range(len(first)):
        if ((length <= k) | (codes[np.minimum(start + k, len(codes) - 1)] != first[k])).any():
            shared = k
            break
    return first[:first.rfind(b"/", 0, shared) + 1].decode("utf-8", "surrogatepass")


def _from_manifest(store: ObjectStore, shards: Sequence[ObjectInfo], fmt: ShardFormat,
                   found: Counts, manifests: Collection[str] | None) -> None:
    """Count the shards the manifest beside them has as they are now."""
    columns = isinstance(shards, ObjectIndex) and len(shards.buckets()) == 1
    names: list[str] | None
    if columns:
        assert isinstance(shards, ObjectIndex)
        # The names past the folder the index keeps once, as bytes: no str
        # a name (nor a record) where the manifest names them all in order.
        shared, raw, ends_view = shards.name_bytes()
        ends = np.asarray(ends_view).astype(np.int64)
        below, names = _shared_folder(raw, ends), None
        bucket, scheme = shards.buckets()[0], shards.schemes()[0]
    else:
        shared, names = "", [info.name for info in shards]
        below = manifest_folder(names)
        bucket, scheme = shards[0].bucket, shards[0].scheme
    folder = shared + below
    if manifests is not None and folder + MANIFEST_NAME not in manifests:
        return  # listed: there is none
    url = format_url(scheme, bucket, folder + MANIFEST_NAME)
    table = get_portal().call(read_manifest(store, bucket, folder, url))
    if table is None:
        return
    code = table.format_code(fmt.name)
    if code < 0:
        return
    cut = len(below)
    # A Parquet file's entry counts by its size alone: its footer, read pinned
    # to the listed version before any of its rows, is held to the count, so
    # a stale entry fails that read rather than cutting rows wrong. A manifest
    # shipped with the files (built on another store, whose versions and
    # crc32cs a web server does not give) then counts them.
    by_size = fmt.name == "parquet"
    if names is None and not cut and table.same_names(raw, ends):
        rows = np.arange(len(shards))  # entry k is shard k's
    else:
        if names is None:
            assert isinstance(shards, ObjectIndex)
            names = list(shards.folder_names()[1])
        # Each shard's entry (-1: none) by its name relative to the manifest's folder.
        rows = np.fromiter(map(table.rows.get, [name[cut:] for name in names] if cut else names,
                               itertools.repeat(-1)), dtype=np.int64, count=len(names))
        del names
    if not columns:
        # One record a shard, built and dropped: one manifest names one
        # bucket's shards, and an entry counts only for the object it describes.
        for k in np.flatnonzero(rows >= 0).tolist():
            info, entry = shards[k], int(rows[k])
            if info.bucket == bucket and table.format[entry] == code \
                    and (table.matches(entry, info)
                         or (by_size and int(table.size[entry]) == info.size)):
                found.samples[k] = table.samples[entry]
                found.data[k] = table.data_size[entry]
        return
    assert isinstance(shards, ObjectIndex)
    named = np.flatnonzero(rows >= 0)
    row = rows[named]
    ok = (table.format[row] == code) & (table.size[row] == shards.integers("size")[named])
    # As Entry.matches: the crc32cs where both are known, else the versions
    # (a version of 0 is none).
    crc, known = table.crc32c[row], shards.integers("crc32c")[named]
    version, generation = table.version[row], shards.integers("generation")[named]
    if not by_size:
        ok &= np.where((crc >= 0) & (known >= 0), crc == known,
                       (version >= 0) & (generation != 0) & (version == generation))
    named, row = named[ok], row[ok]
    found.samples[named] = table.samples[row]
    found.data[named] = table.data_size[row]


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
