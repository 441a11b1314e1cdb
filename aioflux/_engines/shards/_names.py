"""A shard's format by its name: the one table the CLI (``aioflux shards``)
and the shard datasets (no ``format=``) read it from.

The suffix that names the format comes after any whole-shard compression
suffix is taken off: ``train-0.jsonl.gz`` is lines, ``train-0.tar.zst`` and
``train-0.tgz`` are tar. A format added to :data:`FORMATS` is inferred by
both once its suffixes are in :data:`FORMAT_SUFFIXES` (Parquet's is
``".parquet"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..._core.errors import InvalidArgument
from ._formats import _SUFFIXES, FORMATS, ShardFormat

__all__ = ["FORMAT_SUFFIXES", "format_by_name", "format_of_shards", "plain_suffix"]

#: The format each suffix names, compressed or not (``.gz``, ``.zst``,
#: ``.bz2``, ``.xz``... as :func:`~._formats.compression_of` reads them).
FORMAT_SUFFIXES: dict[str, str] = {".tar": "tar", ".jsonl": "lines", ".json": "lines",
                                   ".ndjson": "lines", ".txt": "lines",
                                   ".parquet": "parquet"}
# One suffix for a compressed tar, as tar and webdataset read them.
_TAR_SUFFIXES = frozenset({".tgz", ".tbz", ".tbz2", ".txz"})


def _suffix(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    dot = base.rfind(".")
    return base[dot:].lower() if dot > 0 else ""


def plain_suffix(name: str) -> str:
    """The suffix of ``name`` that names its format, lowercase, past any
    compression suffix (``a.JSONL.gz``: ``.jsonl``; ``a.tgz``: ``.tar``);
    ``""`` for none.

    Args:
        name: an object name or URL.

    Returns:
        The suffix.
    """
    suffix = _suffix(name)
    if suffix in _TAR_SUFFIXES:
        return ".tar"
    if suffix in _SUFFIXES:
        return _suffix(name[:-len(suffix)])
    return suffix


def format_by_name(name: str) -> str | None:
    """The format a shard's name says (``"tar"``, ``"lines"``), or None.

    Args:
        name: an object name or URL.

    Returns:
        A name of :data:`FORMATS`, or None when no suffix of the table ends it.
    """
    return FORMAT_SUFFIXES.get(plain_suffix(name))


def _known() -> str:
    return ", ".join(FORMAT_SUFFIXES) + " (each also compressed: .gz, .zst, .bz2, .xz)"


def format_of_shards(op: str, names: Iterable[str], where: str,
                     url_of: Callable[[str], str] = str) -> ShardFormat:
    """The one format of the shards called ``names``.

    A dataset reads one format: shards of two (``a.tar`` beside ``b.jsonl``)
    are refused rather than read as the first one's, which failed midway
    with a tar's "truncated" on a line of JSON.

    Args:
        op: the dataset, for messages.
        names: the shards' names (or URLs), at least one.
        where: what named them (a folder, a pattern), for messages.
        url_of: a name's URL, for messages.

    Returns:
        The format.

    Raises:
        InvalidArgument: a name no suffix of the table ends, or shards of
            two formats.
    """
    first: dict[str, str] = {}  # format -> the first shard of it
    for name in names:
        found = format_by_name(name)
        if found is None:
            choices = " or ".join(repr(f) for f in sorted(FORMATS))
            raise InvalidArgument(f"{op}: cannot tell the format of {url_of(name)} from its "
                                  f"name ({_known()}): pass format={choices}")
        first.setdefault(found, name)
        if len(first) > 1:
            (a, at), (b, bt) = first.items()
            raise InvalidArgument(f"{op}: {where} holds shards of two formats, {a} "
                                  f"({url_of(at)}) and {b} ({url_of(bt)}); a dataset reads "
                                  "one: name the shards of one format (a folder of their own, "
                                  "a brace pattern)")
    if not first:
        raise InvalidArgument(f"{op}: no shards given")
    return FORMATS[next(iter(first))]
