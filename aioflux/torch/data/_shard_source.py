"""What both shard datasets share: settings, the shards and their counts, reads.

A :class:`ShardSource` is made in the process that builds the dataset:
it resolves the shard list (a brace pattern, URLs or ObjectInfo, one
store) and counts every shard's samples there: from the folder's
manifest, the local index cache's headers, the sidecars, else one
streamed pass (see :mod:`aioflux._engines.shards._counts`). It holds the
shards and their cumulative counts in columns (a :class:`~._shard_list.ShardList`:
the name's bytes and about 30 more a shard, in memory a node's processes
share), and pickles for ``spawn`` workers with those alone. A
shard's per-sample index (offset, length, crc32c) is loaded when the
shard is read, in the process reading it, and kept in a bounded LRU
(:data:`DEFAULT_INDEX_BYTES`); a cached index is memory-mapped, shared by
the machine's processes. Its store is rebuilt lazily in each process
(:class:`~aioflux.torch.data._source.DatasetSource`).

Under DDP the ranks must hold the same shards and counts (the epoch order
is a function of them): ``listing="rank0"`` resolves and counts on rank 0
and broadcasts them, so the other ranks neither list, stat nor index;
``listing="check"`` compares the ranks' (see :mod:`aioflux.torch.data._rank_listing`).
With ``publish_indexes``, the shards rank 0 could not count are indexed
by all the ranks, each its share, which publish the sidecars; the counts
are gathered, and rank 0 writes the manifest.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from ..._core.checks.arguments import (
    check_credentials,
    check_endpoint,
    check_int,
)
from ..._core.concurrency.portal import call as portal_call
from ..._core.concurrency.portal import get_portal, iterate
from ..._core.errors import AiofluxError, InvalidArgument, add_note
from ..._core.memory.object_index import ObjectIndex
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import format_url, parse_url
from ..._core.storage.protocol import ObjectStore
from ..._engines.cache import cache_from_args
from ..._engines.download import DownloadOptions
from ..._engines.hedge import Hedger
from ..._engines.shards import (
    IndexCache,
    Run,
    ShardFormat,
    ShardIndex,
    ShardsDone,
    compression_of,
    default_index_dir,
    expand_braces,
    format_of,
    format_of_shards,
    is_sidecar,
    read_runs,
)
from ..._engines.shards._counts import (
    Count,
    Counts,
    IndexLRU,
    count_shards,
    load_index,
    stream_counts,
)
from ..._engines.shards._decode import decode_line
from ..._engines.shards._manifest import (
    MANIFEST_NAME,
    Entry,
    is_manifest,
    manifest_folder,
    update_manifest,
)
from ..._engines.shards._spans_here import RangesHere, read_runs_here
from ._rank_listing import agreed, check_listing, gathered, objects_summary, shards_summary
from ._rank_listing import world as rank_world
from ._settings import SHARD_KEYWORDS, DatasetSettings, resolve_settings
from ._shard_list import ShardList, shard_record
from ._shard_parquet import ParquetRows, check_parquet_settings
from ._shard_reads import ShardReads
from ._source import DatasetSource, objects_scheme

__all__ = ["DEFAULT_INDEX_BYTES", "Decode", "Listed", "ShardSource", "count_all",
           "list_shards", "prefix_shards"]

Decode = str | Callable[[Any], Any] | Mapping[str, Callable[[bytes], Any]] | None
# Bytes one ranged read aims at when samples_per_read is not given.
_READ_BYTES = 1 << 20
# A DataLoader worker of N takes every Nth sample of a read unit (batch_size
# 1): one read of the run's span would copy the other workers' samples too,
# N times its own bytes (perf scenario workers: 112 KB read a 16 KiB sample
# at 8 workers). On files a gap this large costs more to copy (and fault in)
# than a read of its own in the same thread's turn (LocalStore.read_ranges).
_FILE_GAP = 16 * 1024
# Shards ShardSource.shard keeps (those of a read-ahead's runs: _spans_here).
_RECENT = 32
#: Most bytes of per-sample indexes a process holds (20 bytes a sample:
#: the indexes of the shards it reads, about 3 million samples of them).
DEFAULT_INDEX_BYTES = 64 * 1024 * 1024
# The compressed bytes a map-style batch of Parquet row groups reads at once
# (a row group past it is read a column at a time).
DEFAULT_PARQUET_READ_BYTES = 64 * 1024 * 1024


class ShardSource:
    """Picklable settings, shards and indexes; a store built lazily per process.

    Args:
        op: the dataset class, for messages.
        shards: a brace pattern or URL, or a list of URLs or ObjectInfo.
        format: ``"tar"`` or ``"lines"``; None: the shards' names say it
            (:func:`~aioflux._engines.shards.format_of_shards`).
        decode: see :class:`~aioflux.torch.ShardDataset`.
        transform: a callable applied to each decoded sample.
        settings: the store, hedging and disk cache (checked here).
        reads: the read size, the indexes' places and ``listing``
            (:class:`~aioflux.torch.ShardReads`, checked by the dataset).

    Raises:
        InvalidArgument, InvalidURL, NotFound, ShardFormatError, StorageError:
            as the datasets document.
    """

    def __init__(self, op: str, shards: object, *, format: str | None, decode: Decode,
                 transform: Callable[[Any], Any] | None, settings: DatasetSettings,
                 reads: ShardReads, columns: Sequence[str] | None = None, filters: object = None,
                 output: str = "rows", tensors: bool = False) -> None:
        fixed = None if format is None else format_of(op, format)
        _check_decode(op, fixed, decode)
        check_parquet_settings(op, fixed.name if fixed is not None else "parquet", columns,
                               filters, output, tensors)
        if transform is not None and not callable(transform):
            raise InvalidArgument(f"{op}: transform must be callable, got "
                                  f"{type(transform).__name__}")
        settings.check(op, shards=True)
        check_endpoint(op, settings.endpoint)
        check_credentials(op, settings.credentials)
        listing, sidecars, publish_indexes = reads.listing, reads.sidecars, reads.publish_indexes
        self.op = op
        self.transform = transform
        self.disk_cache = cache_from_args(op, settings.cache_dir, settings.cache_limit)
        self.hedge_after = settings.hedge_after
        self._hedger: tuple[int, Hedger] | None = None
        self.source = DatasetSource(config=settings.config, endpoint=settings.endpoint,
                                    credentials=settings.credentials,
                                    list_retry=None, download_retry=None,
                                    download_options=DownloadOptions())
        if isinstance(shards, Listed):
            # Before this process's store is built: it reads what was listed.
            self.source.pins.update(shards.pins)
        # Without a kept cache, the indexes streamed here still go to a
        # directory of this dataset's (removed with it): a shard's
        # per-sample index is dropped once counted and loaded again when the
        # shard is read, which must not mean streaming the shard again.
        self.index_cache = IndexCache(
            (reads.index_dir if reads.index_dir is not None else default_index_dir())
            if reads.cache_indexes else _private_index_dir(self))
        self.sidecars = sidecars
        #: Most bytes of per-sample indexes this process holds (see the module).
        self.index_bytes = DEFAULT_INDEX_BYTES
        self._lru: tuple[int, IndexLRU] | None = None
        self._recent: dict[int, tuple[ObjectInfo, ShardIndex]] = {}  # see shard()
        # The ranks share the streaming only where what each indexes reaches
        # the others (published sidecars); rank 0 alone counts otherwise.
        share = publish_indexes and listing == "rank0" and rank_world(op, listing) > 1

        target = _described(shards)
        named: list[ShardFormat] = []  # the format the names say, where they were resolved

        def resolve() -> tuple[ObjectIndex, Counts]:
            infos = self._resolve(op, shards)
            named.append(fixed or _format_of(op, infos, target))
            parquet = self._parquet_of(op, named[0], infos, columns, filters, output, tensors)
            store = self.source.downloader.client
            if parquet is not None:
                listed = shards.manifests if isinstance(shards, Listed) else None
                found = count_shards(store, infos, named[0], cache=None, sidecars=sidecars,
                                     manifests=listed)
                if sidecars:
                    parquet.take_footers(store, infos, listed)
                missing = bool(found.missing())
                found = parquet.count(store, infos, found)
                if publish_indexes and missing:
                    publish_manifest(store, infos, found, named[0])
                return infos, found
            return infos, count_all(store, infos, named[0],
                                    cache=self.index_cache, sidecars=sidecars,
                                    stream=not share, publish=publish_indexes,
                                    manifests=shards.manifests
                                    if isinstance(shards, Listed) else None)

        self.parquet: ParquetRows | None = None
        infos, found = agreed(op, listing, target, resolve, shards_summary, "shards")
        # Where rank 0 resolved them, this rank reads the format off the same names.
        self.format = named[0] if named else fixed or _format_of(op, infos, target)
        # Where rank 0 resolved them, this rank's store is picked here (before
        # it reads a footer below).
        self.source.scheme = objects_scheme(op, (info.scheme for info in infos)) \
            or self.source.scheme
        if self.format.name == "parquet" and self.parquet is None:
            # Rank 0 counted: this rank needs the schema and read unit it saw.
            self.parquet = self._parquet_of(op, self.format, infos, columns, filters, output,
                                            tensors)
            assert self.parquet is not None
            self.parquet.count(self.source.downloader.client, infos, found)
        self.decode = _decoder(op, self.format.name, decode)
        if self.parquet is not None and self.parquet.output != "rows" and decode is not None:
            raise InvalidArgument(f"{op}: decode applies to rows; with output="
                                  f"{self.parquet.output!r} a batch goes to transform")
        if share and found.missing():
            found = self._share(op, target, infos, found)
        assert not found.missing()
        self.shard_list = ShardList(infos, found.samples)
        data = int(found.data.sum())
        if self.parquet is not None:
            # A read unit is a row group: a run's rows then come from one.
            self.samples_per_read = reads.samples_per_read or self.parquet.first_group_rows
        else:
            self.samples_per_read = reads.samples_per_read or max(
                1, min(4096, _READ_BYTES // max(1, data // max(1, self.total))))

    def _parquet_of(self, op: str, fmt: ShardFormat, infos: ObjectIndex,
                    columns: Sequence[str] | None, filters: object, output: str,
                    tensors: bool) -> ParquetRows | None:
        """The Parquet reader of these shards (None for another format)."""
        check_parquet_settings(op, fmt.name, columns, filters, output, tensors)
        if fmt.name != "parquet":
            return None
        if any(compression_of(name) for name in infos.names()):
            raise InvalidArgument(f"{op}: a Parquet file is compressed inside (its pages); "
                                  "a whole-file .gz or .zst of one cannot be read by range")
        self.parquet = ParquetRows(op, columns=columns, filters=filters, output=output,
                                   tensors=tensors,
                                   footer_dir=self.index_cache.directory / "parquet-footers")
        return self.parquet

    def _share(self, op: str, target: str, infos: Sequence[ObjectInfo],
               found: Counts) -> Counts:
        """Index the shards none could count, each rank its share (publishing
        their sidecars); gather the counts; rank 0 writes the manifest."""
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
        mine = found.missing()[rank::world]

        def index_mine() -> list[tuple[int, int, int]]:
            indexes = stream_counts(self.source.downloader.client, [infos[k] for k in mine],
                                    self.format, cache=self.index_cache, publish=True)
            return [(k, len(i), i.data_size) for k, i in zip(mine, indexes, strict=True)]

        out = found
        for share in gathered(op, "index", target, index_mine):
            for k, samples, data in share:
                out[k] = samples, data
        if rank == 0:
            publish_manifest(self.source.downloader.client, infos, out, self.format)
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_hedger"] = None  # its gate belongs to this process's loop
        state["_lru"] = None  # indexes are loaded where the shards are read
        state["_recent"] = {}
        return state

    def _resolve(self, op: str, shards: object) -> ObjectIndex:
        if isinstance(shards, Listed):
            shards = shards.shards
        if isinstance(shards, ObjectIndex):
            # A listing (from_prefix): kept as it is, never a list of records.
            if not len(shards):
                raise InvalidArgument(f"{op}: no shards given")
            self.source.scheme = objects_scheme(op, shards.schemes()) or "gs"
            return shards
        if isinstance(shards, (str, os.PathLike)):
            # Patterns joined by "::", as webdataset's expand_urls takes them.
            shards = [name for pattern in os.fspath(shards).split("::")
                      for name in expand_braces(pattern)]
        if not isinstance(shards, Sequence) or isinstance(shards, (bytes, bytearray)):
            raise InvalidArgument(f"{op}: shards must be a URL, a brace pattern or a list of "
                                  f"URLs or ObjectInfo, got {type(shards).__name__}")
        items = list(shards)
        if not items:
            raise InvalidArgument(f"{op}: no shards given")
        if all(isinstance(s, ObjectInfo) for s in items):
            self.source.scheme = objects_scheme(op, (o.scheme for o in items)) or "gs"
            return ObjectIndex(map(shard_record, items))
        if not all(isinstance(s, (str, os.PathLike)) for s in items):
            raise InvalidArgument(f"{op}: shards must all be URLs or all ObjectInfo")
        urls = [os.fspath(s) for s in items]
        schemes = (parse_url(u, require_object=True).scheme for u in urls)
        self.source.scheme = objects_scheme(op, schemes) or "gs"
        return ObjectIndex(map(shard_record, self.source.stat_all(urls)))

    @property
    def infos(self) -> ObjectIndex:
        """The shards, in list order (a record built per shard asked for)."""
        return self.shard_list.infos

    @property
    def starts(self) -> npt.NDArray[np.int64]:
        """Each shard's first sample number, the total last."""
        return self.shard_list.starts

    @property
    def total(self) -> int:
        """Samples in all shards."""
        return self.shard_list.total

    @property
    def counts(self) -> list[int]:
        """Samples per shard, in list order."""
        return self.shard_list.sizes().tolist()  # type: ignore[no-any-return]

    @property
    def compressed(self) -> npt.NDArray[np.bool_]:
        """Per shard, whether it is compressed whole (read front to back)."""
        return self.shard_list.sequential

    def fingerprint(self) -> str:
        """``"<samples>:<16 hex digits>"`` over the shards' URLs and sample counts.

        A saved position only means something over the same shards in the same order.
        """
        digest = hashlib.sha256()
        for info, count in zip(self.infos, self.shard_list.sizes().tolist(), strict=True):
            digest.update(f"{info.url}\n{count}\n".encode("utf-8", "surrogatepass"))
        return f"{self.total}:{digest.hexdigest()[:16]}"

    @property
    def indexes(self) -> IndexLRU:
        """This process's indexes of the shards it reads (see the module)."""
        if self._lru is None or self._lru[0] != os.getpid():
            self._lru = (os.getpid(), IndexLRU(self._load, self.index_bytes))
        return self._lru[1]

    def _load(self, k: int) -> ShardIndex:
        return load_index(self.source.downloader.client, self.infos[k], self.format,
                          self.shard_list.count(k), cache=self.index_cache,
                          sidecars=self.sidecars)

    def index(self, k: int) -> ShardIndex:
        """Shard ``k``'s per-sample index (loaded if not held; blocks).

        Raises:
            ShardFormatError: the shard is not its format, or changed since
                it was counted.
            StorageError: a read failed.
        """
        return self.indexes.get(k)

    def shard(self, k: int) -> tuple[ObjectInfo, ShardIndex]:
        """Shard ``k``'s record and per-sample index (loaded if not held; blocks).

        The last :data:`_RECENT` shards asked for are kept: the reads plan
        runs a few ahead (see ``_spans_here``), then their samples ask for
        the same shards again, and a worker of 16 reads a run every 3-4
        samples (a record built and an index looked up in the LRU cost ~1 us
        a run). It holds as many indexes past the LRU's budget at most, as
        many as the reads ahead hold.
        """
        recent = self._recent
        found = recent.get(k)
        if found is None:
            if len(recent) >= _RECENT:
                recent.clear()
            found = recent[k] = (self.infos[k], self.index(k))
        return found

    async def _index_on_loop(self, k: int) -> ShardIndex:
        indexes = self.indexes
        found = indexes.cached(k)
        # A load reads (a file, a sidecar, a pass over the shard) through the
        # portal: off the loop, in a thread.
        return found if found is not None else await asyncio.to_thread(indexes.get, k)

    @property
    def gap(self) -> int | None:
        """Bytes between two samples of a run from which they are read apart
        (``read_runs``' ``gap``): on files, where a read costs little more
        than the bytes it copies; elsewhere one request a run."""
        return _FILE_GAP if self.source.scheme == "file" else None

    def hedger(self, permits: int) -> Hedger | None:
        """This process's hedger (its budget and latencies carry across passes)."""
        if self.hedge_after is None:
            return None
        if self._hedger is None or self._hedger[0] != os.getpid():
            self._hedger = (os.getpid(), Hedger(self.hedge_after, max_concurrency=permits))
        return self._hedger[1]

    def reads(self, runs: Iterable[Run | ShardsDone], *, limit: int,
              max_bytes: int) -> Iterator[tuple[Run, Any]]:
        """Read ``runs`` (taken as room frees) on this process's store, a window in flight
        (see ``read_runs``; Parquet: each run with a pyarrow Table of its rows);
        files in memory in this thread, a few runs ahead (``read_runs_here``)."""
        store = self.source.downloader.client
        if self.parquet is not None:
            return self.parquet.reads(store, self.infos, self.shard_list.count, runs,
                                      limit=limit, max_bytes=max_bytes,
                                      hedger=self.hedger(store.config.max_concurrency),
                                      cache=self.disk_cache)
        gap = self.gap
        if gap is not None and isinstance(store, RangesHere) and self.disk_cache is None \
                and self.hedge_after is None and not self.compressed.any():
            # Files in memory: the runs read in this thread as they are wanted,
            # a few ahead (see _spans_here), no loop, window or hand-off
            # between threads.
            # The portal (its loop's thread) is started only if a read must wait.
            return read_runs_here(store, self.shard, runs, gap=gap, max_bytes=max_bytes,
                                  call=portal_call)
        agen = read_runs(store, self.infos, self._index_on_loop, runs, limit=limit,
                         max_bytes=max_bytes,
                         unit=self.samples_per_read, cache=self.disk_cache,
                         hedger=self.hedger(store.config.max_concurrency), gap=gap)
        return iterate(agen, batch=8, nbytes=_run_bytes, max_bytes=max_bytes)

    def fetch(self, runs: Sequence[Run], *, limit: int) -> list[tuple[Run, Any]]:
        """Read ``runs`` concurrently and return them all (for map-style access)."""
        store = self.source.downloader.client
        if self.parquet is not None:
            return self.parquet.fetch(store, self.infos, self.shard_list.count, runs,
                                      limit=limit, max_bytes=DEFAULT_PARQUET_READ_BYTES,
                                      hedger=self.hedger(store.config.max_concurrency),
                                      cache=self.disk_cache)
        # The batch is returned whole: its bytes bound nothing more, and a
        # smaller budget would read its runs one at a time. Measured here:
        # an index may have to be loaded, which the loop's thread cannot do.
        everything = sum(self.span_bytes(run) for run in runs) + 1

        async def run() -> list[tuple[Run, list[bytes | memoryview]]]:
            agen = read_runs(store, self.infos, self._index_on_loop, runs, limit=limit,
                             max_bytes=everything,
                             unit=self.samples_per_read, cache=self.disk_cache,
                             hedger=self.hedger(store.config.max_concurrency), gap=self.gap)
            return [item async for item in agen]

        return get_portal().call(run())

    def span_bytes(self, run: Run) -> int:
        """Bytes one read of ``run`` covers (without the cache's unit widening)."""
        index = self.index(run.shard)
        return max(index.offsets[k] + index.lengths[k] for k in run.samples) - \
            min(index.offsets[k] for k in run.samples)

    def samples(self, run: Run, regions: Any) -> Iterator[Any]:
        """The decoded, transformed samples of a run's regions (Parquet: of its Table)."""
        decode, transform = self.decode, self.transform
        if self.parquet is not None:
            url = self.infos[run.shard].url
            for row in self.parquet.rows(regions):
                try:
                    if decode is not None:
                        row = decode(row, url, 0)
                    if transform is not None:
                        row = transform(row)
                except Exception as exc:
                    self._note(exc, "a row", url)
                    raise
                yield row
            return
        if self.format.name == "lines" and self.decode is None and self.transform is None:
            # A line is its region's bytes (LinesFormat.sample), checked
            # already: no record, offset or call a line (0.3 us of the 3 a
            # line cost an epoch in all).
            for region in regions:
                yield region if type(region) is bytes else bytes(region)
            return
        info, index = self.shard(run.shard)
        url, checked = info.url, index.checked
        for local, region in zip(run.samples, regions, strict=True):
            offset = index.offsets[local]
            sample = self.format.sample(region, url, offset, checked=checked)
            try:
                if decode is not None:
                    sample = decode(sample, url, offset)
                if transform is not None:
                    sample = transform(sample)
            except Exception as exc:
                self._note(exc, f"the sample at byte {offset}", url)
                raise
            yield sample

    def _note(self, exc: Exception, what: str, url: str) -> None:
        """Name the shard and sample the caller's decode or transform raised
        ``exc`` on, its type kept: among a million samples the one to look
        at was unknown. aioflux's own errors name them already."""
        if not isinstance(exc, AiofluxError):
            add_note(exc, f"{self.op}: the decode or transform raised this on {what} of {url}")

    def close(self) -> None:
        """Close this process's connections (reopened on next use)."""
        self.source.close()


class Listed(Sequence[ObjectInfo]):
    """A folder's shards as listed, and the manifests the listing held (by name):
    where the shards' folder has none, counting them does not ask for it.

    Args:
        shards: the shards.
        manifests: the manifests' names.
        where: the folder listed, for messages.
        pins: the revisions the listing read (``DatasetSource.pins``): the
            dataset reads them too.
    """

    def __init__(self, shards: ObjectIndex, manifests: frozenset[str], where: str = "",
                 pins: Mapping[tuple[str, str], str] | None = None) -> None:
        self.shards, self.manifests, self.where = shards, manifests, where
        self.pins = dict(pins or {})

    def __len__(self) -> int:
        return len(self.shards)

    @overload
    def __getitem__(self, k: int) -> ObjectInfo: ...

    @overload
    def __getitem__(self, k: slice) -> list[ObjectInfo]: ...

    def __getitem__(self, k: int | slice) -> ObjectInfo | list[ObjectInfo]:
        return self.shards[k]


def list_shards(op: str, url: str, concurrency: int, settings: DatasetSettings,
                listing: str = "each") -> Listed:
    """Every object in a folder (sorted), ``.idx`` sidecars and manifests left out
    (the manifests' names kept beside), made to agree across the DDP ranks as
    ``listing`` says (see :mod:`._rank_listing`).

    Raises:
        NotFound: the folder is empty.
        InvalidArgument: it holds only sidecars; a bad ``listing`` or
            ``concurrency``.
    """
    check_int(op, "list_concurrency", concurrency, minimum=1)
    check_listing(op, listing)

    def listed() -> Listed:
        source = DatasetSource(config=settings.config, endpoint=settings.endpoint,
                               credentials=settings.credentials, list_retry=None,
                               download_retry=None, download_options=DownloadOptions())
        manifests: list[str] = []

        def shards_of(objects: Iterable[ObjectInfo]) -> Iterator[ObjectInfo]:
            for o in objects:
                if is_manifest(o.name):
                    manifests.append(o.name)
                elif not is_sidecar(o.name):
                    yield shard_record(o)

        # Columns all the way: the listing never becomes a list of records.
        shards = ObjectIndex(shards_of(source.list_prefix(url, concurrency)))
        if not shards:
            raise InvalidArgument(f"{op}: {url} holds only index sidecars")
        return Listed(shards, frozenset(manifests), os.fspath(url), source.pins)

    return agreed(op, listing, str(url), listed, lambda found: objects_summary(found.shards))


def prefix_shards(op: str, url: str, concurrency: int, listing: str,
                  settings: DatasetSettings | None,
                  options: dict[str, Any]) -> tuple[Listed, DatasetSettings]:
    """A shard dataset's ``from_prefix`` before the dataset: its settings
    (the old keywords in ``options`` taken out, each warning) and its
    folder's shards (:func:`list_shards`).

    Raises:
        InvalidArgument: a setting the shard datasets do not take, or as
            :func:`list_shards`.
        NotFound: the folder is empty.
    """
    # The warnings name the frame calling from_prefix.
    settings = resolve_settings(op, settings, options, SHARD_KEYWORDS, stacklevel=5)
    settings.check(op, shards=True)
    return list_shards(op, url, concurrency, settings, listing), settings


def _private_index_dir(owner: object) -> str:
    """A temporary index directory of ``owner``'s, removed when it is collected
    or the process exits (by the process that made it: not by a forked
    child, nor by a worker that got ``owner`` pickled)."""
    path = tempfile.mkdtemp(prefix="aioflux-shard-index-")
    weakref.finalize(owner, _remove_dir, path, os.getpid())
    return path


def _remove_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def count_all(store: ObjectStore, infos: Sequence[ObjectInfo], fmt: ShardFormat, *,
              cache: IndexCache | None, sidecars: bool, stream: bool,
              publish: bool, manifests: Collection[str] | None = None) -> Counts:
    """Every shard's ``(samples, data bytes)``: from the manifest, the cache or
    the sidecars, and (``stream``) the rest by one pass each; with ``publish``,
    the streamed ones' sidecars and, when any was not in the manifest, the
    manifest are written. ``manifests``: as :func:`count_shards` takes it.

    Raises:
        ShardFormatError: a shard, sidecar or manifest is not its format.
        StorageError: a read or write failed.
    """
    found = count_shards(store, infos, fmt, cache=cache, sidecars=sidecars,
                         manifests=manifests)
    missing = found.missing()
    if stream and missing:
        indexes = stream_counts(store, [infos[k] for k in missing], fmt, cache=cache,
                                publish=publish)
        for k, index in zip(missing, indexes, strict=True):
            found[k] = len(index), index.data_size
        if publish:
            publish_manifest(store, infos, found, fmt)
    return found


def publish_manifest(store: ObjectStore, infos: Sequence[ObjectInfo],
                     counts: Sequence[Count | None], fmt: ShardFormat) -> None:
    """Add the shards' entries to the manifest of their folder; a failure to
    write it is a warning (the dataset is made: the manifest is for later)."""
    if not infos or any(info.bucket != infos[0].bucket for info in infos):
        return  # one manifest names one folder's shards
    folder = manifest_folder(info.name for info in infos)
    entries = [Entry(name=info.name[len(folder):], size=info.size, crc32c=info.crc32c,
                     version=info.generation or None, format=fmt.name,
                     compression=compression_of(info.name), samples=c[0], data_size=c[1])
               for info, c in zip(infos, counts, strict=True) if c is not None]
    url = format_url(infos[0].scheme, infos[0].bucket, folder + MANIFEST_NAME)
    try:
        get_portal().call(update_manifest(store, infos[0].bucket, folder, url, entries))
    except AiofluxError as exc:
        warnings.warn(f"could not write the manifest {url}: {exc}", RuntimeWarning,
                      stacklevel=2)


def _described(shards: object) -> str:
    """The shards given, for messages: the URL or pattern, or the first of a list."""
    if isinstance(shards, (str, os.PathLike)):
        return os.fspath(shards)
    if isinstance(shards, Listed) and shards.where:
        return shards.where
    if isinstance(shards, Sequence) and shards:
        first = shards[0]
        url = first.url if isinstance(first, ObjectInfo) else str(first)
        return url if len(shards) == 1 else f"{url} and {len(shards) - 1} more shards"
    return "the shards"


def _run_bytes(item: tuple[Any, list[bytes | memoryview]]) -> int:
    return sum(len(region) for region in item[1])


class _Text:
    """Decodes a line as UTF-8 or JSON, naming the shard and byte of a bad one.

    The decoders are classes, not closures: a dataset goes to DataLoader
    workers by pickle under ``spawn`` and ``forkserver`` (macOS's default,
    and Linux's from Python 3.14), and a closure does not pickle.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, sample: Any, url: str, offset: int) -> Any:
        # The call ``aioflux shards verify`` makes: what it passes decodes here.
        return decode_line(self.kind, sample, "read", url, offset)


class _PerField:
    """Applies a callable per tar field (the fields a sample has)."""

    def __init__(self, fields: dict[str, Callable[[Any], Any]]) -> None:
        self.fields = fields

    def __call__(self, sample: Any, url: str, offset: int) -> Any:
        for field, fn in self.fields.items():
            if field in sample:
                sample[field] = fn(sample[field])
        return sample


class _Whole:
    """Applies the user's callable to the whole sample."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, sample: Any, url: str, offset: int) -> Any:
        return self.fn(sample)


def _format_of(op: str, infos: ObjectIndex, where: str) -> ShardFormat:
    """The format the shards' names say (by names alone: no record is built)."""
    buckets, schemes = infos.buckets(), infos.schemes()
    if len(buckets) == len(schemes) == 1:
        return format_of_shards(op, infos.names(), where,
                                lambda name: format_url(schemes[0], buckets[0], name))
    return format_of_shards(op, infos.names(), where)


def _check_decode(op: str, fmt: ShardFormat | None, decode: Decode) -> None:
    """Refuse, before any request, a ``decode`` no format takes (or, with
    the format given, not this one's)."""
    if fmt is not None:
        _decoder(op, fmt.name, decode)
    elif not (decode is None or decode in ("utf-8", "json") or callable(decode)
              or isinstance(decode, Mapping)):
        raise InvalidArgument(f"{op}: decode must be \"utf-8\" or \"json\" (lines), a "
                              f"mapping of field to callable (tar) or a callable, got "
                              f"{decode!r}")


def _decoder(op: str, fmt: str, decode: Decode) -> Callable[[Any, str, int], Any] | None:
    if decode is None:
        return None
    if fmt == "lines" and decode in ("utf-8", "json"):
        return _Text(str(decode))
    if fmt in ("tar", "parquet") and isinstance(decode, Mapping):
        fields = dict(decode)
        for field, fn in fields.items():
            if not callable(fn):
                raise InvalidArgument(f"{op}: decode[{field!r}] must be callable")
        return _PerField(fields)
    if callable(decode):
        return _Whole(decode)
    choices = ('"utf-8", "json" or a callable' if fmt == "lines"
               else "a mapping of field to callable, or a callable")
    raise InvalidArgument(f"{op}: decode for format {fmt!r} must be {choices}, got {decode!r}")
