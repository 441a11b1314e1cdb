"""``ShardReads``: how the shard datasets read their shards and find their indexes.

Given as ``reads=`` to :class:`ShardDataset` and :class:`ShardMapDataset`.
Their old keywords (``samples_per_read=``, ``index_dir=``...) still work,
each use warning (:func:`resolve_reads`), until aioflux 0.3.0.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..._core.checks.arguments import check_bool, check_instance, check_int
from ..._core.deprecation import warn_deprecated
from ..._core.errors import InvalidArgument
from ._rank_listing import Listing, check_listing

__all__ = [
    "DEFAULT_READS_IN_FLIGHT",
    "DEFAULT_SHARD_PREFETCH_BYTES",
    "READS_KEYWORDS",
    "ShardReads",
    "resolve_reads",
]

# Ranged reads in flight per iterator, and the bytes they and the samples
# waiting for the consumer may hold.
DEFAULT_READS_IN_FLIGHT = 32
DEFAULT_SHARD_PREFETCH_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class ShardReads:
    """How a shard dataset reads its shards and where their indexes come
    from and go; it pickles for ``spawn`` workers.

    ``ShardReads(samples_per_read=64, listing="rank0")`` is given as
    ``reads=`` to :class:`ShardDataset` and :class:`ShardMapDataset`. It is
    not part of :class:`DatasetSettings`, which the per-object datasets
    take too: these settings are the shard datasets' alone.

    Args:
        samples_per_read: consecutive samples per ranged read, and per
            entry of the disk cache (None: about 1 MiB of them; Parquet:
            the first row group's rows).
        prefetch_bytes: (:class:`ShardDataset` only) most bytes read ahead
            of the consumer per iterator; the map dataset refuses another value.
        reads_in_flight: ranged reads in flight per iterator (the map
            dataset: per batch).
        index_dir: the local index cache (None: ``~/.cache/aioflux/shard-index``).
        cache_indexes: keep indexes built by streaming in ``index_dir``
            (else in a temporary directory removed with the dataset).
        sidecars: read ``<shard>.idx`` sidecars.
        listing: under DDP, which ranks resolve (list, stat) and index the
            shards, which every rank must hold alike (the epoch order and the
            batch counts are functions of them). ``"each"`` (default): every
            rank, with no collective; shards written while the ranks start
            can leave them with different lists. ``"rank0"``: rank 0, which
            broadcasts the shards and their indexes (or its error, which
            every rank then raises) to the others. ``"check"``: every rank,
            then one small all-gather compares them and every rank raises
            :class:`~aioflux.Conflict` on a difference. Both are collectives
            of the default process group: every rank must make the dataset.
            Without an initialized process group they are ``"each"``.
        publish_indexes: write, beside the shards, the sidecars of the
            shards this process indexes by streaming and the folder's
            manifest (a failure to write the manifest is a warning). With
            ``listing="rank0"`` under DDP, the shards rank 0 cannot count
            are then indexed by all the ranks, each its share, and the
            counts gathered: neither one rank nor every rank streams every
            shard. Default False: nothing is written to the store.
    """

    samples_per_read: int | None = None
    prefetch_bytes: int = DEFAULT_SHARD_PREFETCH_BYTES
    reads_in_flight: int = DEFAULT_READS_IN_FLIGHT
    index_dir: str | os.PathLike[str] | None = None
    cache_indexes: bool = True
    sidecars: bool = True
    listing: Listing = "each"
    publish_indexes: bool = False

    def check(self, op: str, *, prefetch: bool = True) -> None:
        """Check the fields.

        Args:
            op: the dataset, for messages.
            prefetch: the caller reads ahead (``prefetch_bytes``; else a
                value other than the default is refused).

        Raises:
            InvalidArgument: a field of the wrong type or range, or a
                ``prefetch_bytes`` the caller does not use.
        """
        check_int(op, "reads.samples_per_read", self.samples_per_read, minimum=1, optional=True)
        check_int(op, "reads.prefetch_bytes", self.prefetch_bytes, minimum=1)
        check_int(op, "reads.reads_in_flight", self.reads_in_flight, minimum=1)
        check_instance(op, "reads.index_dir", self.index_dir, (str, os.PathLike), optional=True)
        check_bool(op, "reads.cache_indexes", self.cache_indexes)
        check_bool(op, "reads.sidecars", self.sidecars)
        check_listing(op, self.listing)
        check_bool(op, "reads.publish_indexes", self.publish_indexes)
        if not prefetch and self.prefetch_bytes != DEFAULT_SHARD_PREFETCH_BYTES:
            raise InvalidArgument(
                f"{op}: reads.prefetch_bytes is ShardDataset's (what it "
                "reads ahead of the consumer); this one reads on demand"
            )


#: The old keywords, each a field of :class:`ShardReads`.
READS_KEYWORDS = frozenset(f.name for f in dataclasses.fields(ShardReads))


def resolve_reads(
    op: str,
    reads: ShardReads | None,
    keywords: dict[str, Any],
    *,
    prefetch: bool = True,
    stacklevel: int = 4,
) -> ShardReads:
    """``reads``, or one made of the old keywords in ``keywords``, checked.

    Each old keyword found is removed from ``keywords`` and warns, naming
    its place in ``reads=``; what is left is not the reads'.

    Args:
        op: the call as the user wrote it, for messages.
        reads: the ``reads=`` given, or None.
        keywords: the call's other keywords (the old ones are taken out).
        prefetch: the caller reads ahead (the map dataset never took
            ``prefetch_bytes=``: left for its refusal of unknown keywords).
        stacklevel: the frame the warnings name (the caller's caller).

    Returns:
        The reads' settings, checked (:meth:`ShardReads.check`).

    Raises:
        InvalidArgument: ``reads`` is not a ShardReads, both ``reads`` and
            an old keyword were given, or as :meth:`ShardReads.check`.
    """
    check_instance(op, "reads", reads, ShardReads, optional=True)
    known = READS_KEYWORDS if prefetch else READS_KEYWORDS - {"prefetch_bytes"}
    old = {name: keywords.pop(name) for name in [k for k in keywords if k in known]}
    for name in old:
        warn_deprecated(f"{op}({name}=...)", f"reads=ShardReads({name}=...)", stacklevel=stacklevel)
    if old and reads is not None:
        raise InvalidArgument(
            f"{op}: pass reads=ShardReads(...) or the old keywords ({', '.join(old)}), not both"
        )
    if reads is None:
        reads = ShardReads(**old)
    reads.check(op, prefetch=prefetch)
    return reads
