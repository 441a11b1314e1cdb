"""A dataset's manifest: every shard's sample count in one small object.

``_aioflux_manifest.jsonl`` sits in the folder that holds a dataset's
shards (the deepest folder holding all of them). Its first line says what
it is; each further line is one shard (its name relative to the folder,
size, crc32c, version, format, compression, samples and data bytes). A
dataset of 100,000 shards then learns its sample counts from one listing
and one GET instead of 100,000 sidecar reads; the per-sample offsets come
later, per shard, as it is read (sidecar, local cache or one pass).

An entry counts only for the object it describes: same size, and the same
crc32c where the entry and the store both know one, else the same
version (the store's version token), as an index is matched to its shard
(:meth:`~._index.ShardIndex.matches`). A shard rewritten since the
manifest was written is counted again from its index, never from the
manifest; an index whose count is not the manifest's is refused where it
is loaded. The format is in docs/guides/shards.md, "Manifest format".
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._core.errors import NotFound, PreconditionFailed
from ..._core.records.types import ObjectInfo
from ..._core.storage.protocol import ObjectStore
from ._index import ShardIndex
from ._manifest_parse import KIND, VERSION, parse_columns, parse_rows
from ._parquet_footers import FOOTERS_NAME

__all__ = ["MANIFEST_NAME", "Entry", "Table", "decode_manifest", "encode_manifest", "entry_of",
           "is_manifest", "manifest_folder", "read_manifest", "update_manifest"]

MANIFEST_NAME = "_aioflux_manifest.jsonl"
# Names Table.same_names compares at once.
_NAMES_AT_ONCE = 8192
# Writers racing on one manifest (ranks, several ShardWriters) each retry
# their read-merge-write this often before giving up.
_ATTEMPTS = 8


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One shard of a manifest.

    Attributes:
        name: the shard's name relative to the manifest's folder.
        size: its size in bytes.
        crc32c: its crc32c (None: unknown).
        version: the store's version token of it (None: unknown).
        format: ``"tar"`` or ``"lines"``.
        compression: ``None``, ``"gzip"``, ``"zstd"``... (the whole shard).
        samples: its sample count.
        data_size: bytes of its data (decompressed; ``size`` if unknown).
    """

    name: str
    size: int
    crc32c: int | None
    version: int | None
    format: str
    compression: str | None
    samples: int
    data_size: int

    def matches(self, info: ObjectInfo) -> bool:
        """Whether this entry is of ``info`` as it is now (see the module)."""
        if self.size != info.size:
            return False
        if self.crc32c is not None and info.crc32c is not None:
            return self.crc32c == info.crc32c
        version = info.generation or None
        return self.version is not None and self.version == version


def is_manifest(name: str) -> bool:
    """Whether an object name is a manifest, or the Parquet footers beside
    one (:mod:`._parquet_footers`): not a shard."""
    return name.rsplit("/", 1)[-1] in (MANIFEST_NAME, FOOTERS_NAME)


def manifest_folder(names: Iterable[str]) -> str:
    """The deepest folder holding every name (``""`` or ending in ``/``)."""
    names = names if isinstance(names, (list, tuple)) else list(names)
    if not names:
        return ""
    first, last = min(names), max(names)  # the rest lie between them
    shared = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b),
                  min(len(first), len(last)))
    return first[:first.rfind("/", 0, shared) + 1]


def entry_of(info: ObjectInfo, folder: str, index: ShardIndex) -> Entry:
    """The entry of a shard indexed as ``index``."""
    return Entry(name=info.name[len(folder):], size=index.size, crc32c=index.crc32c,
                 version=index.version, format=index.format, compression=index.compression,
                 samples=len(index), data_size=index.data_size)


def encode_manifest(entries: Iterable[Entry]) -> bytes:
    """The manifest's bytes: a header line, then one line per entry, by name."""
    rows = sorted(entries, key=lambda e: e.name)
    lines = [json.dumps({"kind": KIND, "version": VERSION, "shards": len(rows)},
                        sort_keys=True)]
    # The fields named, not dataclasses.asdict: its deep copy costs ~90 us
    # an entry, a minute and a half for a million shards.
    dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
    lines += [dumps({"name": e.name, "size": e.size, "crc32c": e.crc32c, "version": e.version,
                     "format": e.format, "compression": e.compression, "samples": e.samples,
                     "data_size": e.data_size}) for e in rows]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def decode_manifest(data: bytes, where: str) -> dict[str, Entry]:
    """Parse a manifest into its entries by name.

    Args:
        data: the manifest's bytes.
        where: its URL, for messages.

    Returns:
        The entries, by name relative to the manifest's folder.

    Raises:
        ShardFormatError: not a manifest, of a later version, or damaged.
    """
    return {row[0]: Entry(*row) for row in parse_rows(data, where)}


class Table:
    """A manifest's entries as columns: what counting a dataset's shards reads.

    No object per entry outlives the parse but its name (a key of
    :attr:`rows`); counting a million shards compares columns, not Entries.

    Args:
        data: the manifest's bytes.
        where: its URL, for messages.

    Raises:
        ShardFormatError: not a manifest, of a later version, or damaged.
    """

    def __init__(self, data: bytes, where: str) -> None:
        columns = parse_columns(data, where)
        self._columns = columns
        self.size = columns.size
        #: -1: null; Python ints (dtype object) where one is past an int64.
        self.crc32c = columns.crc32c
        self.version = columns.version
        self.formats = columns.formats
        self.format = columns.format
        self.samples = columns.samples
        self.data_size = columns.data_size

    @functools.cached_property
    def rows(self) -> dict[str, int]:
        """Row of each entry, by its name relative to the manifest's folder."""
        names = self._columns.names
        return dict(zip(names, range(len(names)), strict=True))

    def __len__(self) -> int:
        return len(self.rows)

    def same_names(self, names: bytes | memoryview, ends: npt.NDArray[Any]) -> bool:
        """Whether the entries are, in order, the names ``names`` holds end to
        end (UTF-8), entry ``k``'s ending at ``ends[k]``: compared as bytes,
        without a str a name (False where the manifest does not say cheaply).

        Args:
            names: the names' bytes, end to end.
            ends: where each ends in them (n + 1 ints from 0).
        """
        spans = self._columns.spans
        if spans is None or len(ends) - 1 != len(self.size):
            return False
        data, start, end = spans
        lengths = end - start
        if not np.array_equal(lengths, np.diff(ends)):
            return False
        codes, names = np.frombuffer(data, dtype=np.uint8), memoryview(names)
        # The manifest's names end to end, a block of them at a time: each
        # name's bytes gathered in turn (an index a byte: kept to a block).
        for k in range(0, len(lengths), _NAMES_AT_ONCE):
            size = lengths[k:k + _NAMES_AT_ONCE]
            low, high = int(ends[k]), int(ends[k + len(size)])
            at = np.repeat(start[k:k + _NAMES_AT_ONCE] - (ends[k:k + len(size)] - low), size)
            if codes[at + np.arange(high - low)].tobytes() != names[low:high]:
                return False
        return True

    def format_code(self, name: str) -> int:
        """The code of format ``name`` in :attr:`format` (-1: no entry has it)."""
        return self.formats.index(name) if name in self.formats else -1

    def matches(self, row: int, info: ObjectInfo) -> bool:
        """Whether entry ``row`` is of ``info`` as it is now (:meth:`Entry.matches`)."""
        if int(self.size[row]) != info.size:
            return False
        crc = self.crc32c[row]
        if crc is not None and crc >= 0 and info.crc32c is not None:
            return int(crc) == info.crc32c
        version = self.version[row]
        if version is None or version < 0:
            return False
        return int(version) == (info.generation or None)


async def read_manifest(store: ObjectStore, bucket: str, folder: str,
                        url: str) -> Table | None:
    """The manifest in ``folder`` as columns (one GET), or None where there is none.

    Args:
        store: the shards' store.
        bucket: their bucket.
        folder: the folder (``""`` or ending in ``/``).
        url: the manifest's URL, for messages.

    Raises:
        ShardFormatError: it is damaged.
        StorageError: the read failed.
    """
    try:
        data = await store.read(bucket, folder + MANIFEST_NAME)
    except NotFound:
        return None
    return Table(data, url)


async def _versioned(store: ObjectStore, bucket: str, name: str,
                     url: str) -> tuple[dict[str, Entry], int]:
    try:
        info = await store.stat(bucket, name)
        data = await store.read(bucket, name, generation=info.generation or None)
    except NotFound:
        return {}, 0  # 0: the write's precondition is "must not exist"
    return decode_manifest(data, url), info.generation


async def update_manifest(store: ObjectStore, bucket: str, folder: str, url: str,
                          entries: Sequence[Entry]) -> None:
    """Add ``entries`` to the manifest in ``folder`` (made if there is none).

    Args:
        store: the shards' store.
        bucket: their bucket.
        folder: the folder (``""`` or ending in ``/``).
        url: the manifest's URL, for messages.
        entries: the shards' entries.

    The entries already there stay unless one of the same name is given.
    Writers racing on the manifest each write over the version they read
    (a precondition), and read again when another wrote first, so no
    writer's entries are lost.

    Raises:
        ShardFormatError: the manifest there is damaged.
        StorageError: the write failed, or lost the race every time.
    """
    name = folder + MANIFEST_NAME
    for attempt in range(_ATTEMPTS):
        merged, generation = await _versioned(store, bucket, name, url)
        merged.update((e.name, e) for e in entries)
        try:
            await store.write(bucket, name, encode_manifest(merged.values()),
                              if_generation_match=generation)
            return
        except PreconditionFailed:
            if attempt == _ATTEMPTS - 1:
                raise
