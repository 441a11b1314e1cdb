"""``ShardMapDataset``: any sample of indexed shards by one ranged read."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch.utils.data

from ..._core.config import ClientConfig
from ..._core.errors import InvalidArgument
from ..._core.types import ObjectInfo
from ..._core.validate import Credentials, check_int
from ..._engines.hedge import HedgeAfter
from ..._engines.listing import DEFAULT_LIST_CONCURRENCY
from ._rank_listing import Listing
from ._shard_dataset import DEFAULT_READS_IN_FLIGHT
from ._shard_order import runs_of
from ._shard_source import Decode, ShardSource, list_shards

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
        format: ``"tar"`` or ``"lines"``; None (default): the shards'
            names say it (as for :class:`ShardDataset`).
        decode: see :class:`ShardDataset`.
        transform: a callable applied to each decoded sample.
        samples_per_read: samples per cache entry (None: ~1 MiB of them).
        reads_in_flight: ranged reads in flight for one batch.
        config: ClientConfig of the per-process store.
        endpoint: API root.
        credentials: as for :class:`~aioflux.AsyncClient`.
        index_dir: the local index cache (default ``~/.cache/aioflux/shard-index``).
        cache_indexes: keep streamed indexes in ``index_dir``.
        sidecars: read ``<shard>.idx`` sidecars.
        cache_dir: a disk cache of read units, compressed shards decompressed
            into it once per machine (as for :class:`ShardDataset`; None: none).
        cache_limit: most bytes in ``cache_dir``.
        hedge_after: hedged ranged reads (None: none).
        listing: ``"each"``, ``"rank0"`` or ``"check"``: which DDP ranks
            resolve and index the shards (as for :class:`ShardDataset`).
        publish_indexes: write the sidecars of the shards indexed here and
            the manifest; under DDP with ``listing="rank0"``, the ranks share
            the indexing (as for :class:`ShardDataset`).
        columns: (Parquet) the columns read (None: all).
        filters: (Parquet) row groups left out by their statistics (as for
            :class:`ShardDataset`).
        tensors: (Parquet) list columns as tensors.

    Raises:
        InvalidArgument, InvalidURL, NotFound, ShardFormatError, Conflict: as for
            :class:`ShardDataset`.
        StorageError: likewise.
    """

    def __init__(self, shards: str | Sequence[str] | Sequence[ObjectInfo], *,
                 format: str | None = None, decode: Decode = None,
                 transform: Callable[[Any], Any] | None = None,
                 samples_per_read: int | None = None,
                 reads_in_flight: int = DEFAULT_READS_IN_FLIGHT,
                 config: ClientConfig | None = None, endpoint: str | None = None,
                 credentials: Credentials = None,
                 index_dir: str | os.PathLike[str] | None = None, cache_indexes: bool = True,
                 sidecars: bool = True, cache_dir: str | os.PathLike[str] | None = None,
                 cache_limit: int | None = None, hedge_after: HedgeAfter = None,
                 listing: Listing = "each", publish_indexes: bool = False,
                 columns: Sequence[str] | None = None, filters: Sequence[Any] | None = None,
                 tensors: bool = False) -> None:
        op = "ShardMapDataset"
        check_int(op, "reads_in_flight", reads_in_flight, minimum=1)
        self.reads_in_flight = reads_in_flight
        self._shards = ShardSource(
            op, shards, format=format, decode=decode, transform=transform,
            samples_per_read=samples_per_read, config=config, endpoint=endpoint,
            credentials=credentials, index_dir=index_dir, cache_indexes=cache_indexes,
            sidecars=sidecars, cache_dir=cache_dir, cache_limit=cache_limit,
            hedge_after=hedge_after, listing=listing, publish_indexes=publish_indexes,
            columns=columns, filters=filters, tensors=tensors)

    @classmethod
    def from_prefix(cls, url: str, *, format: str | None = None,
                    list_concurrency: int = DEFAULT_LIST_CONCURRENCY,
                    listing: Listing = "each", **settings: Any) -> ShardMapDataset:
        """Every object in a folder (sorted by name), ``.idx`` sidecars left out.

        The format is the objects' names' unless ``format=`` says it (as
        for :meth:`ShardDataset.from_prefix`: a folder of two formats is
        refused).

        With ``listing="rank0"`` rank 0 lists the folder and indexes the
        shards, and the other ranks get both from it (two broadcasts);
        ``"check"`` compares the ranks' listings, then their indexes (see
        the constructor's ``listing``).

        Args:
            url: ``gs://bucket/folder``, ``s3://...``, ``file:///dir`` or a path.
            format: ``"tar"`` or ``"lines"``; None (default): by the names.
            list_concurrency: parallel listers.
            listing: ``"each"``, ``"rank0"`` or ``"check"`` (the constructor's).
            **settings: the constructor's other settings.

        Returns:
            The dataset.

        Raises:
            NotFound: the folder holds no objects.
            InvalidArgument: shards of two formats, or a name of neither,
                without ``format=``.
        """
        shards = list_shards("ShardMapDataset.from_prefix", url, list_concurrency, settings,
                             listing)
        return cls(shards, format=format, listing=listing, **settings)

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
