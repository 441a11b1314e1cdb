"""``Parquet``: how the shard datasets read Parquet shards, given as ``format=``.

The shard datasets' old keywords (``columns=``, ``filters=``...) still
work, each use warning (:func:`resolve_format`), until aioflux 0.3.0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..._core.deprecation import warn_deprecated
from ..._core.errors import InvalidArgument
from ._shard_parquet import check_parquet_settings

__all__ = ["PARQUET_KEYWORDS", "Parquet", "resolve_format"]


@dataclasses.dataclass(frozen=True)
class Parquet:
    """Parquet shards and how they are read: ``format=Parquet(columns=["text"])``
    for :class:`ShardDataset` and :class:`ShardMapDataset` (``format="parquet"``
    is ``Parquet()``). It pickles for ``spawn`` workers.

    Args:
        columns: the columns read; only their column chunks are fetched.
            None: all.
        filters: pyarrow's ``filters`` (``[("lang", "==", "en")]``, or a list
            of such lists, or-ed): row groups whose statistics rule every
            row out are left out of the dataset (its counts, order and
            resume); the rows of a row group kept are all read, the filter
            is not applied to them.
        output: ``"rows"``: a dict a row; ``"columns"``: each batch of
            ``order.batch_size`` rows as a dict of columns; ``"arrow"``: as a
            pyarrow ``RecordBatch``. Batched (:class:`ShardDataset` only),
            the DataLoader batches nothing (``batch_size=None``) and
            ``transform`` gets the batch.
        tensors: list columns as tensors (batched: numeric columns too).
    """

    columns: Sequence[str] | None = None
    filters: Sequence[Any] | None = None
    output: str = "rows"
    tensors: bool = False

    def check(self, op: str, *, batches: bool = True) -> None:
        """Check the fields.

        Args:
            op: the dataset, for messages.
            batches: the dataset yields batches (else only ``"rows"``).

        Raises:
            InvalidArgument: a field of the wrong type or value.
        """
        check_parquet_settings(op, "parquet", self.columns, self.filters, self.output,
                               self.tensors)
        if not batches and self.output != "rows":
            raise InvalidArgument(f"{op}: output={self.output!r} is ShardDataset's; this "
                                  "dataset reads a row at a time (output=\"rows\")")


#: The old keywords, each a field of :class:`Parquet`.
PARQUET_KEYWORDS = frozenset(f.name for f in dataclasses.fields(Parquet))


def resolve_format(op: str, format: str | Parquet | None, keywords: dict[str, Any], *,
                   batches: bool = True,
                   stacklevel: int = 4) -> tuple[str | None, Parquet]:
    """The format's name and the Parquet options of ``format=``, or of the
    old keywords in ``keywords``.

    Each old keyword found is removed from ``keywords`` and warns, naming
    its place in ``format=Parquet(...)``.

    Args:
        op: the call as the user wrote it, for messages.
        format: the ``format=`` given.
        keywords: the call's other keywords (the old ones are taken out).
        batches: the dataset yields batches (``output`` other than rows).
        stacklevel: the frame the warnings name (the caller's caller).

    Returns:
        ``(name or None, options)``: with the old keywords the name is the
        one given (those options are then refused on a format other than
        Parquet, as before).

    Raises:
        InvalidArgument: both ``format=Parquet(...)`` and an old keyword, a
            format of the wrong type, or an option of the wrong type.
    """
    # The map dataset never took output=: left for Python's own refusal.
    known = PARQUET_KEYWORDS if batches else PARQUET_KEYWORDS - {"output"}
    old = {key: keywords.pop(key) for key in [k for k in keywords if k in known]}
    for key in old:
        warn_deprecated(f"{op}({key}=...)", f"format=Parquet({key}=...)", stacklevel=stacklevel)
    if isinstance(format, Parquet):
        if old:
            raise InvalidArgument(f"{op}: pass format=Parquet(...) or the old keywords "
                                  f"({', '.join(old)}), not both")
        name: str | None = "parquet"
        options = format
    elif format is None or isinstance(format, str):
        name, options = format, Parquet(**old)
    else:
        raise InvalidArgument(f"{op}: format must be a str, a Parquet or None, got "
                              f"{type(format).__name__}")
    options.check(op, batches=batches)
    return name, options
