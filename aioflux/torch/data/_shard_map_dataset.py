"""``ShardMapDataset``: any sample of indexed shards by one ranged read."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch.utils.data

from ..._core.errors import InvalidArgument
from ..._core.records.types import ObjectInfo
from ..._engines.listing import DEFAULT_LIST_CONCURRENCY
from ._parquet_options import Parquet, resolve_format
from ._settings import SHARD_KEYWORDS, DatasetSettings, refuse_unknown, resolve_settings
from ._shard_order import runs_of
from ._shard_reads import ShardReads, resolve_reads
from ._shard_source import Decode, ShardSource, prefix_shards

__all__ = ["ShardMapDataset"]


class ShardMapDataset(torch.utils.data.Dataset[Any]):
    """Map-style access to the samples of shards (``ds[i]``), through their indexes.

    Samples are numbered across the shards in list order. ``ds[i]`` is one
    ranged read of sample ``i``, checked against the crc32c its index
    recorded; a DataLoader batch (``__getitems__``) reads its samples
    concurrently, consecutive samples of a shard in one read. Pair it with
    :class:`ResumableBatchSampler` for a resumable, rank-split order. The
    shards, formats, indexes, decoding, disk cache and hedging are those of
    :class:`ShardDataset`, which documents the settings. A compressed shard
    has no ranges to read: give ``cache_dir`` (it is then decompressed into
    the cache once per machine), or each access decompresses its shard up
    to the sample. Parquet: ``ds[i]`` is row ``i`` as a dict, read with its
    row group (the asked-for columns' chunks of it).

    Args:
        shards: a brace pattern or URL (several joined by ``::``, as
            webdataset takes them), or a list of URLs or ObjectInfo.
        format: ``"tar"``, ``"lines"``, ``"parquet"`` or a :class:`Parquet`
            (its ``output`` rows only); None (default): the shards' names
            say it (as for :class:`ShardDataset`).
        decode: see :class:`ShardDataset`.
        transform: a callable applied to each decoded sample.
        reads: samples per cache entry, reads in flight for one batch, the
            indexes' places and which DDP ranks list (:class:`ShardReads`;
            its ``prefetch_bytes`` is refused: this dataset reads on demand).
        settings: the store, hedging and disk cache (as for
            :class:`ShardDataset`; a compressed shard is decompressed into
            ``cache_dir`` once per machine).
        **deprecated: ``settings``' fields as keywords, ``reads``'
            (``samples_per_read=``, ``listing=``...) and :class:`Parquet`'s
            (``columns=``, ``filters=``, ``tensors=``): each warns and goes
            in aioflux 0.3.0.

    Raises:
        TypeError: an unknown keyword.
        InvalidArgument, InvalidURL, NotFound, ShardFormatError, Conflict: as for
            :class:`ShardDataset`.
        StorageError: likewise.
    """

    def __init__(self, shards: str | Sequence[str] | Sequence[ObjectInfo], *,
                 format: str | Parquet | None = None, decode: Decode = None,
                 transform: Callable[[Any], Any] | None = None,
                 reads: ShardReads | None = None, settings: DatasetSettings | None = None,
                 **deprecated: Any) -> None:
        op = "ShardMapDataset"
        settings = resolve_settings(op, settings, deprecated, SHARD_KEYWORDS)
        reads = resolve_reads(op, reads, deprecated, prefetch=False)
        name, parquet = resolve_format(op, format, deprecated, batches=False)
        refuse_unknown(op, deprecated)
        self.reads = reads
        self.reads_in_flight = reads.reads_in_flight
        self._shards = ShardSource(
            op, shards, format=name, decode=decode, transform=transform, settings=settings,
            reads=reads, columns=parquet.columns, filters=parquet.filters,
            tensors=parquet.tensors)

    @classmethod
    def from_prefix(cls, url: str, *, format: str | Parquet | None = None,
                    list_concurrency: int = DEFAULT_LIST_CONCURRENCY,
                    reads: ShardReads | None = None, settings: DatasetSettings | None = None,
                    **options: Any) -> ShardMapDataset:
        """Every object in a folder, as :meth:`ShardDataset.from_prefix` lists,
        names the format of and indexes them, in one map-style dataset.

        Args:
            url: the folder (``gs://bucket/folder``, ``s3://...``,
                ``file:///dir`` or a path).
            format: the shards' format; None (default): by their names.
            list_concurrency: parallel listers.
            reads: the reads and which ranks list and index (the constructor's).
            settings: the constructor's.
            **options: the constructor's other keywords.

        Returns:
            The dataset.

        Raises:
            NotFound, InvalidArgument, InvalidURL, ShardFormatError, StorageError:
                as for :meth:`ShardDataset.from_prefix`.
        """
        op = "ShardMapDataset.from_prefix"
        reads = resolve_reads(op, reads, options, prefetch=False)
        name, parquet = resolve_format(op, format, options, batches=False)
        shards, settings = prefix_shards(op, url, list_concurrency, reads.listing, settings,
                                         options)
        # Old Parquet keywords without a format: Parquet's, as they only apply to it.
        parquet_given = name == "parquet" or parquet != Parquet()
        return cls(shards, format=parquet if parquet_given else name, reads=reads,
                   settings=settings, **options)

    @property
    def counts(self) -> list[int]:
        """Samples per shard, in list order."""
        return self._shards.counts

    def __len__(self) -> int:
        """Samples in all shards."""
        return self._shards.total

    def _position_fingerprint(self) -> str:
        """What a sampler's saved position is over: the shards' URLs and
        counts in order, as ``ShardDataset``'s (not the length alone, which
        other shards of the same total share)."""
        return self._shards.fingerprint()

    def _number(self, index: object) -> int:
        try:
            i = operator.index(index)  # type: ignore[arg-type]
        except TypeError:
            raise InvalidArgument(f"ShardMapDataset: an index must be an int, got "
                                  f"{type(index).__name__} {index!r:.60}") from None
        total = self._shards.total
        if isinstance(index, bool) or not -total <= i < total:
            raise IndexError(f"ShardMapDataset: index {index!r} out of range for "
                             f"{total} samples")
        return i % total if total else i

    def __getitem__(self, index: int) -> Any:
        """Sample ``index`` (shard-list order numbering; negative counts from the end).

        Raises:
            IndexError: out of range.
            InvalidArgument: not an int.
        """
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Samples ``indices``, read concurrently (what a DataLoader batch calls).

        Raises:
            IndexError: an index out of range.
            InvalidArgument: an index that is not an int.
        """
        numbers = [self._number(i) for i in indices]
        runs = runs_of(numbers, self._shards.starts, self._shards.samples_per_read)
        out: list[Any] = []
        for run, regions in self._shards.fetch(runs, limit=self.reads_in_flight):
            out.extend(self._shards.samples(run, regions))
        return out

    def close(self) -> None:
        """Close this process's connections (reopened on next use)."""
        self._shards.close()
