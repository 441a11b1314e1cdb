"""``ShardMapDataset``: any sample of indexed shards by one ranged read."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch.utils.data

from ..._core.errors import InvalidArgument
from ..._core.types import ObjectInfo
from ..._core.validate import check_int
from ..._engines.listing import DEFAULT_LIST_CONCURRENCY
from ._parquet_options import Parquet, resolve_format
from ._rank_listing import Listing
from ._settings import SHARD_KEYWORDS, DatasetSettings, refuse_unknown, resolve_settings
from ._shard_dataset import DEFAULT_READS_IN_FLIGHT
from ._shard_order import runs_of
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
        samples_per_read: samples per cache entry (None: ~1 MiB of them).
        reads_in_flight: ranged reads in flight for one batch.
        settings: the store, hedging and disk cache (as for
            :class:`ShardDataset`; a compressed shard is decompressed into
            ``cache_dir`` once per machine).
        index_dir: the local index cache (default ``~/.cache/aioflux/shard-index``).
        cache_indexes: keep streamed indexes in ``index_dir``.
        sidecars: read ``<shard>.idx`` sidecars.
        listing: ``"each"``, ``"rank0"`` or ``"check"``: which DDP ranks
            resolve and index the shards (as for :class:`ShardDataset`).
        publish_indexes: write the sidecars of the shards indexed here and
            the manifest; under DDP with ``listing="rank0"``, the ranks share
            the indexing (as for :class:`ShardDataset`).
        **deprecated: ``settings``' fields as keywords, and
            :class:`Parquet`'s (``columns=``, ``filters=``, ``tensors=``):
            each warns and goes in aioflux 0.3.0.

    Raises:
        TypeError: an unknown keyword.
        InvalidArgument, InvalidURL, NotFound, ShardFormatError, Conflict: as for
            :class:`ShardDataset`.
        StorageError: likewise.
    """

    def __init__(self, shards: str | Sequence[str] | Sequence[ObjectInfo], *,
                 format: str | Parquet | None = None, decode: Decode = None,
                 transform: Callable[[Any], Any] | None = None,
                 samples_per_read: int | None = None,
                 reads_in_flight: int = DEFAULT_READS_IN_FLIGHT,
                 settings: DatasetSettings | None = None,
                 index_dir: str | os.PathLike[str] | None = None, cache_indexes: bool = True,
                 sidecars: bool = True, listing: Listing = "each", publish_indexes: bool = False,
                 **deprecated: Any) -> None:
        op = "ShardMapDataset"
        settings = resolve_settings(op, settings, deprecated, SHARD_KEYWORDS)
        name, parquet = resolve_format(op, format, deprecated, batches=False)
        refuse_unknown(op, deprecated)
        check_int(op, "reads_in_flight", reads_in_flight, minimum=1)
        self.reads_in_flight = reads_in_flight
        self._shards = ShardSource(
            op, shards, format=name, decode=decode, transform=transform,
            samples_per_read=samples_per_read, settings=settings, index_dir=index_dir,
            cache_indexes=cache_indexes, sidecars=sidecars, listing=listing,
            publish_indexes=publish_indexes, columns=parquet.columns, filters=parquet.filters,
            tensors=parquet.tensors)

    @classmethod
    def from_prefix(cls, url: str, *, format: str | Parquet | None = None,
                    list_concurrency: int = DEFAULT_LIST_CONCURRENCY,
                    listing: Listing = "each", settings: DatasetSettings | None = None,
                    **options: Any) -> ShardMapDataset:
        """Every object in a folder, as :meth:`ShardDataset.from_prefix` lists,
        names the format of and indexes them, in one map-style dataset.

        Args:
            url: the folder (``gs://bucket/folder``, ``s3://...``,
                ``file:///dir`` or a path).
            format: the shards' format; None (default): by their names.
            list_concurrency: parallel listers.
            listing: which ranks list and index (the constructor's).
            settings: the constructor's.
            **options: the constructor's other keywords.

        Returns:
            The dataset.

        Raises:
            NotFound, InvalidArgument, InvalidURL, ShardFormatError, StorageError:
                as for :meth:`ShardDataset.from_prefix`.
        """
        op = "ShardMapDataset.from_prefix"
        name, parquet = resolve_format(op, format, options, batches=False)
        shards, settings = prefix_shards(op, url, list_concurrency, listing, settings, options)
        # Old Parquet keywords without a format: Parquet's, as they only apply to it.
        parquet_given = name == "parquet" or parquet != Parquet()
        return cls(shards, format=parquet if parquet_given else name, listing=listing,
                   settings=settings, **options)

    @property
    def counts(self) -> list[int]:
        """Samples per shard, in list order."""
        return self._shards.counts

    def __len__(self) -> int:
        """Samples in all shards."""
        return self._shards.total

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
