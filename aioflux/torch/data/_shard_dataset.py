"""``ShardDataset``: samples packed in shards (WebDataset tar, JSONL/text), read as they are.

The dataset indexes its shards when it is made (see
:mod:`aioflux.torch.data._shard_source`), so the sample count is known before
the first step; the epoch order (:mod:`aioflux.torch.data._shard_order`) is then
a permutation of the samples, and everything the per-object datasets
promise holds here: equal batches on every rank, resume at any world size
and worker count with each sample once, checked bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch.utils.data

from ..._core.checks.arguments import as_int
from ..._core.errors import InvalidArgument
from ..._core.records.types import ObjectInfo
from ..._engines.listing import DEFAULT_LIST_CONCURRENCY
from ..._engines.shards import ShardsDone
from ._order import SHARDS, DataProgress, RankBatches, track
from ._order_options import DEFAULT_SHUFFLE_WINDOW, Order, resolve_order
from ._parquet_options import Parquet, resolve_format
from ._settings import SHARD_KEYWORDS, DatasetSettings, refuse_unknown, resolve_settings
from ._shard_order import ShardOrder, iter_runs
from ._shard_reads import ShardReads, resolve_reads
from ._shard_source import Decode, ShardSource, prefix_shards
from ._source import share_in_worker

__all__ = ["DEFAULT_SHUFFLE_WINDOW", "ShardDataset"]

T = TypeVar("T")

# Samples of a worker's batches cut into runs at once (their list, and
# numpy's arrays over it, are what the cutting holds).
_CHUNK_SAMPLES = 4096


class ShardDataset(torch.utils.data.IterableDataset[Any]):
    """Samples of shards on any store, every sample once per epoch across ranks and workers.

    The format is the shards' names' unless ``format=`` says it (see
    ``format`` below). Tar: WebDataset tar shards; members are grouped by
    key (the name up to the first dot of its basename), so ``000123.jpg`` and
    ``000123.cls`` make ``{"__key__": "000123", "__url__": shard URL,
    "jpg": bytes, "cls": bytes}``. Parquet: a sample is a row, a dict of
    its columns, read a row group at a time (only the asked-for columns'
    chunks, by ranged GETs; see the guide "Parquet"). Lines: one sample per line
    (JSONL, text; empty lines skipped), ``bytes`` unless decoded; a shard
    named ``*.gz``, ``*.zst``, ``*.bz2`` or ``*.xz`` is decompressed whole
    (and read front to back). Shards come from a prefix (:meth:`from_prefix`),
    a brace pattern (``"gs://b/train-{000000..000099}.tar"``, expanded as
    webdataset expands it), or a list of URLs or :class:`~aioflux.ObjectInfo`.

    Each shard's sample count is known when the dataset is made: from the
    folder's manifest (``_aioflux_manifest.jsonl``, written by
    :class:`ShardWriter` and ``aioflux shards index``; one GET for every
    shard), the local index cache (keyed by the object's version), its
    ``<shard>.idx`` sidecar (taken when it is of the shard as it is: the
    same crc32c, or where the store keeps none the same version), or one
    streamed pass checked against the shard's crc32c. A shard's index
    (each sample's offset, length and crc32c) is loaded from the same
    places when the shard is read, in the process reading it: samples are
    fetched by ranged reads of ``reads.samples_per_read`` consecutive samples,
    pinned to the indexed version of the shard, and each sample's bytes are checked
    against its crc32c. A shard changed since it was indexed, or bytes that
    do not match, raise a typed error naming the shard and the byte offset;
    never fewer samples.

    Order, splitting and resume are those of :class:`ObjectIterableDataset`
    (``order=``, an :class:`Order`): an
    epoch's global order is a pure function of ``(seed, epoch)`` and the
    shard list (shards permuted, reads permuted within ``shuffle_window``
    samples, samples permuted within a read), cut into global batches of
    ``batch_size * world_size``; every rank gets the same number of samples
    and batches (padded, or ``drop_last``; given the same shards on every
    rank: see :class:`ShardReads`' ``listing``), ``state_dict()`` is a few
    integers and resumes at any world size and worker count with every
    sample once. Use ``ds.track(loader)`` or torchdata's
    ``StatefulDataLoader`` with workers, as for :class:`ObjectIterableDataset`.

    Memory: at most ``reads.prefetch_bytes`` of reads in flight or waiting per
    iterator; the shards and their counts (a few dozen bytes a shard); the
    indexes of the shards being read (20 bytes a sample, at most 64 MiB a
    process; cached ones are memory-mapped, shared by the machine's
    processes); and the epoch order. A ``spawn`` worker gets the shards and
    counts, never per-sample data. See the guide "What each process holds".

    Args:
        shards: a brace pattern or URL (several joined by ``::``, as
            webdataset takes them), or a list of URLs or ObjectInfo.
        format: ``"tar"``, ``"lines"``, ``"parquet"`` or a :class:`Parquet`
            (which columns, filters, batches; ``"parquet"`` is ``Parquet()``);
            None (default): the
            shards' names say it, as ``aioflux shards`` reads them: ``.tar`` is tar,
            ``.parquet`` Parquet,
            ``.jsonl``, ``.json``, ``.ndjson`` and ``.txt`` are lines, each
            also compressed (``.gz``, ``.zst``, ``.bz2``, ``.xz``; ``.tgz``).
            Shards of two formats, or a name of neither, are refused
            (``InvalidArgument``): a dataset reads one format.
        decode: ``lines``: ``"utf-8"``, ``"json"`` or a callable on the
            line's bytes; ``tar``: a mapping of field to callable (``{"cls":
            int}``) or a callable on the sample dict; ``parquet``: likewise,
            on a row's columns (rows only, not batches). None: raw bytes.
        transform: a callable applied to each (decoded) sample.
        order: shuffle, seed, ``shuffle_window``, batch size, ``drop_last``
            and rank (:class:`Order`; default: all defaults).
        reads: the read size, read-ahead, where the shards' indexes come
            from and go, and which DDP ranks list them
            (:class:`ShardReads`; default: all defaults).
        settings: the store, hedging and disk cache
            (:class:`~aioflux.torch.DatasetSettings`; its ``list_retry``,
            ``download_retry`` and ``download_options`` are refused). Here
            ``cache_dir`` caches the shards' read units (each
            ``reads.samples_per_read`` samples, keyed by the shard's version and the
            unit's range); a compressed shard whose data takes at most a
            quarter of ``cache_limit`` is decompressed once per machine into
            it (by the first process that wants it; the others wait for its
            units), not once per worker and rank. ``hedge_after`` hedges
            ranged GETs.
        **deprecated: ``settings``' fields as keywords (``endpoint=``,
            ``cache_dir=``...), ``order``'s (``shuffle=``, ``seed=``...),
            ``reads``' (``samples_per_read=``, ``listing=``...) and
            :class:`Parquet`'s (``columns=``...): each warns and goes in
            aioflux 0.3.0.

    Raises:
        TypeError: an unknown keyword.
        InvalidArgument: a setting of the wrong type or value.
        InvalidURL: a malformed URL.
        NotFound: a shard does not exist, or a prefix holds none.
        ShardFormatError: a shard is not its format.
        StorageError: listing, stat or indexing failed.
        Conflict: (``reads.listing="check"``) the ranks' shards differ.
    """

    def __init__(self, shards: str | Sequence[str] | Sequence[ObjectInfo], *,
                 format: str | Parquet | None = None, decode: Decode = None,
                 transform: Callable[[Any], Any] | None = None, order: Order | None = None,
                 reads: ShardReads | None = None, settings: DatasetSettings | None = None,
                 **deprecated: Any) -> None:
        op = "ShardDataset"
        settings = resolve_settings(op, settings, deprecated, SHARD_KEYWORDS)
        order = resolve_order(op, order, deprecated, window=True)
        reads = resolve_reads(op, reads, deprecated)
        name, parquet = resolve_format(op, format, deprecated)
        refuse_unknown(op, deprecated)
        self.order, self.reads = order, reads
        self.shuffle, self.seed, self.shuffle_window = order.shuffle, order.seed, \
            order.shuffle_window
        self.batch_size, self.drop_last = order.batch_size, order.drop_last
        self.rank, self.world_size = order.placed()
        self.prefetch_bytes, self.reads_in_flight = reads.prefetch_bytes, reads.reads_in_flight
        self._shards = ShardSource(
            op, shards, format=name, decode=decode, transform=transform, settings=settings,
            reads=reads, columns=parquet.columns, filters=parquet.filters,
            output=parquet.output, tensors=parquet.tensors)
        self.samples_per_read = self._shards.samples_per_read
        self._progress = DataProgress(op, self._shards.total, self._shards.fingerprint(),
                                      self.seed, self.batch_size, self.world_size,
                                      self.drop_last, shuffle=self.shuffle, kind=SHARDS)

    @classmethod
    def from_prefix(cls, url: str, *, format: str | Parquet | None = None,
                    list_concurrency: int = DEFAULT_LIST_CONCURRENCY,
                    reads: ShardReads | None = None, settings: DatasetSettings | None = None,
                    order: Order | None = None, **options: Any) -> ShardDataset:
        """Every object in a folder (sorted by name), ``.idx`` sidecars left out.

        The format is the objects' names' unless ``format=`` says it: a
        folder of ``.jsonl`` files is read as lines, of ``.tar`` (or
        ``.tar.gz``...) files as tar; a folder holding both, or an object
        whose name says neither (a ``README.md``), is refused
        (``InvalidArgument``) before any shard is read.

        With ``reads.listing="rank0"`` rank 0 lists the folder and indexes
        the shards, and the other ranks get both from it (two broadcasts);
        ``"check"`` compares the ranks' listings, then their indexes (see
        :class:`ShardReads`).

        Args:
            url: ``gs://bucket/folder``, ``s3://...``, ``file:///dir`` or a path.
            format: ``"tar"``, ``"lines"``, ``"parquet"`` or a
                :class:`Parquet`; None (default): by the names.
            list_concurrency: parallel listers.
            reads: the reads and which ranks list (the constructor's).
            settings: the store, hedging and disk cache (the constructor's).
            order: the epoch order (the constructor's).
            **options: the constructor's other keywords.

        Returns:
            The dataset.

        Raises:
            NotFound: the folder holds no objects.
            InvalidArgument: shards of two formats, or a name of neither,
                without ``format=``; as for the constructor.
            InvalidURL, ShardFormatError, StorageError: as for the constructor.
        """
        op = "ShardDataset.from_prefix"
        order = resolve_order(op, order, options, window=True)
        reads = resolve_reads(op, reads, options)
        name, parquet = resolve_format(op, format, options)
        shards, settings = prefix_shards(op, url, list_concurrency, reads.listing, settings,
                                         options)
        # Old Parquet keywords without a format: Parquet's, as they only apply to it.
        parquet_given = name == "parquet" or parquet != Parquet()
        return cls(shards, format=parquet if parquet_given else name, reads=reads,
                   settings=settings, order=order, **options)

    @property
    def shards(self) -> list[ObjectInfo]:
        """The shards, in list order: each record with what the reads use (bucket,
        name, size, version, crc32c, and the MD5 only without a crc32c; no
        ``updated`` time, content type or metadata)."""
        return list(self._shards.infos)

    @property
    def counts(self) -> list[int]:
        """Samples per shard, in list order."""
        return self._shards.counts

    @property
    def total_samples(self) -> int:
        """Samples in all shards (one epoch before padding)."""
        return self._shards.total

    @property
    def transform(self) -> Callable[[Any], Any] | None:
        """The callable applied to each decoded sample."""
        return self._shards.transform

    def __len__(self) -> int:
        """This rank's samples in the pass under way, else the next (equal on every rank)."""
        return self._progress.rank_samples()

    @property
    def epoch(self) -> int:
        """Epoch of the next ``iter()`` in this process."""
        return self._progress.peek().epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next ``iter()`` (a restored position of it is kept).

        Args:
            epoch: epoch number.
        """
        self._progress.set_epoch(epoch)

    def close(self) -> None:
        """Close this process's connections (reopened on next use)."""
        self._shards.close()

    def epoch_order(self, epoch: int) -> list[int]:
        """The global order of ``epoch``: sample numbers (shard-list order numbering).

        Args:
            epoch: epoch number.

        Returns:
            Every sample's number once.
        """
        return list(self._order(epoch))

    def _order(self, epoch: int) -> ShardOrder:
        return ShardOrder(
            self._shards.shard_list.sizes(), seed=self.seed, epoch=epoch, shuffle=self.shuffle,
            samples_per_read=self.samples_per_read, shuffle_window=self.shuffle_window,
            sequential=self._shards.compressed)

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        share_in_worker()  # before this worker's first pool (its portal's, its store's)
        current = self._progress.begin(worker, workers)
        order = self._order(current.epoch)
        batches = RankBatches(order, current.start, self._progress.global_batch, self.rank,
                              self.world_size, self.drop_last)
        mine = batches.of_worker(worker, workers, current.skip)
        # The runs are cut as the reads get to them (on the portal's loop),
        # a chunk of batches at a time: the worker's samples of the epoch are
        # never held whole (90 to 190 bytes a sample).
        runs = iter_runs(_chunks(batches, mine, self._compressed_ends(order), current.start,
                                 self._progress.global_batch),
                         self._shards.starts, self.samples_per_read)
        parquet = self._shards.parquet
        if parquet is not None and parquet.output != "rows":
            yield from self._batches(current, batches, mine, runs)
            return
        ends = iter(mine)
        j, left = -1, 0  # the batch the next sample belongs to, and its samples to come
        # Every batch but the rank's last holds the same share.
        full, last = (batches.share(mine[0]), mine[-1]) if mine else (0, -1)
        for run, regions in self._shards.reads(runs, limit=self.reads_in_flight,
                                               max_bytes=self.prefetch_bytes):
            for sample in self._shards.samples(run, regions):
                if not left:
                    j = next(ends)
                    left = full if j != last else batches.share(j)
                left -= 1
                if not left:
                    current.handed = j + 1  # before the yield: a state taken now has it
                yield sample
        self._progress.finish(current)

    def _batches(self, current: Any, batches: RankBatches, mine: Iterable[int],
                 runs: Iterable[Any]) -> Iterator[Any]:
        """Parquet rows a batch at a time (``output="columns"`` or ``"arrow"``):
        each of this worker's batches as one item, its rows in the epoch's order."""
        parquet = self._shards.parquet
        assert parquet is not None
        ends = iter(mine)
        pieces: list[Any] = []
        j, left = -1, 0
        for _, table in self._shards.reads(runs, limit=self.reads_in_flight,
                                           max_bytes=self.prefetch_bytes):
            at = 0
            while at < table.num_rows:
                if not left:
                    j = next(ends)
                    left = batches.share(j)
                take = min(left, table.num_rows - at)
                pieces.append(table.slice(at, take))
                at += take
                left -= take
                if not left:
                    batch = parquet.batch(pieces)
                    pieces = []
                    current.handed = j + 1  # before the yield: a state taken now has it
                    yield batch if self.transform is None else self.transform(batch)
        self._progress.finish(current)

    def _compressed_ends(self, order: ShardOrder) -> list[tuple[int, int]]:
        """``(position of its last sample in order, shard)`` of each compressed
        shard, by position: where the reads may let its cursor go."""
        compressed = np.flatnonzero(self._shards.compressed).tolist()
        if not compressed:
            return []
        last = order.ends(compressed)  # per shard: the order is never made whole
        return sorted((at, k) for at, k in zip(last, compressed, strict=True) if at >= 0)

    def track(self, loader: Iterable[T]) -> Iterator[T]:
        """Iterate ``loader`` (a DataLoader over this dataset), counting what the loop takes.

        Args:
            loader: the DataLoader (``batch_size`` = this dataset's).

        Returns:
            The loader's batches.
        """
        return track(self._progress, loader)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, seed, samples consumed (global), global batch size, fingerprint,
        and the order and the settings that shape it (``"order"``: ``"kind":
        "shards"``, ``"shuffle"``, ``"samples_per_read"``, ``"shuffle_window"``).

        Returns:
            A plain dict (``torch.save``-able, JSON-able).
        """
        state = self._progress.state_dict()
        state["order"].update(self._order_settings())
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the saved epoch from the saved position on the next ``iter()``.

        Args:
            state: a :meth:`state_dict` over the same shards and order
                settings, from any world size and worker count.

        Raises:
            InvalidArgument: not such a state (a number that is not an
                int...), another seed, another shard list, another
                ``shuffle``, ``samples_per_read`` or ``shuffle_window``, or
                (shuffled) a place inside an epoch of a sampler's or
                :class:`ObjectIterableDataset`'s order (a permutation of the
                samples, not this one's of shards, reads and samples).
        """
        if isinstance(state, Mapping) and "order" in state and \
                state.get("fingerprint") == self._progress.fingerprint:
            # A state over another shard list is refused as such by the
            # fingerprint check, not for the automatic read size it changes.
            self._check_order(state["order"])
        self._progress.load_state_dict(state)

    def _order_settings(self) -> dict[str, Any]:
        return {"shuffle": self.shuffle, "samples_per_read": self.samples_per_read,
                "shuffle_window": self.shuffle_window}

    def _check_order(self, saved: object) -> None:
        # A position is a count of samples of the epoch order, and these
        # settings reshape that order: under another, the same count covers
        # other samples, so the rest of the epoch repeats some and drops
        # others in silence. Unshuffled, the order is the shard-list order
        # whatever the read size and window. A state without them (a
        # sampler's) is left to DataProgress, which knows its kind of order.
        op = "ShardDataset.load_state_dict"
        if not isinstance(saved, Mapping):
            raise InvalidArgument(f"{op}: the state's \"order\" must be a dict of the "
                                  f"order's settings, got {saved!r:.200}")
        for name in ("samples_per_read", "shuffle_window"):
            if name in saved:
                as_int(op, f"the state's order[\"{name}\"]", saved[name], minimum=1)
        mine = self._order_settings()
        for name in ("shuffle", "samples_per_read", "shuffle_window") if self.shuffle \
                else ("shuffle",):
            value = mine[name]
            if name in saved and saved[name] != value:
                raise InvalidArgument(
                    f"{op}: the state was saved with {name}={saved[name]!r}, this dataset "
                    f"has {name}={value!r}; the epoch order depends on it, so {name} must "
                    "stay fixed across a resume (a position under another order would "
                    "repeat some samples and skip others)")


def _chunks(batches: RankBatches, mine: range, ends: Sequence[tuple[int, int]],
            start: int, global_batch: int) -> Iterator[list[int] | ShardsDone]:
    """The samples of batches ``mine``, about :data:`_CHUNK_SAMPLES` at a time,
    and before each batch, the shards of ``ends`` (``(last position, shard)``,
    by position) that no sample from there on is of.

    A chunk is a slice of ``mine`` (every batch but the rank's last holds
    the same share), cut where a shard of ``ends`` is done: nothing is
    done a batch at a time, and a worker's batches of one sample are its
    samples."""
    if not mine:
        return
    step = max(1, _CHUNK_SAMPLES // max(1, batches.share(mine[0])))
    i = k = 0
    while i < len(mine):
        reached = start + mine[i] * global_batch  # where batch mine[i] starts in the order
        done = k
        while done < len(ends) and ends[done][0] < reached:
            done += 1
        if done > k:
            yield ShardsDone(tuple(shard for _, shard in ends[k:done]))
            k = done
        stop = min(len(mine), i + step)
        if k < len(ends):
            # Up to the first batch that starts past the next shard's end.
            first = (ends[k][0] - start) // global_batch + 1
            stop = min(stop, max(i + 1, -(-(first - mine.start) // mine.step)))
        yield batches.flat(mine[i:stop])
        i = stop
