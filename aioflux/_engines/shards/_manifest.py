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
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..._core.errors import NotFound, PreconditionFailed, ShardFormatError
from ..._core.store import ObjectStore
from ..._core.types import ObjectInfo
from ._index import ShardIndex

__all__ = ["MANIFEST_NAME", "Entry", "decode_manifest", "encode_manifest", "entry_of",
           "is_manifest", "manifest_folder", "read_manifest", "update_manifest"]

MANIFEST_NAME = "_aioflux_manifest.jsonl"
_KIND = "aioflux-shard-manifest"
_VERSION = 1
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
    """Whether an object name is a manifest (not a shard)."""
    return name.rsplit("/", 1)[-1] == MANIFEST_NAME


def manifest_folder(names: Iterable[str]) -> str:
    """The deepest folder holding every name (``""`` or ending in ``/``)."""
    first = last = None
    for name in names:
        first = name if first is None or name < first else first
        last = name if last is None or name > last else last
    if first is None or last is None:
        return ""
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
    lines = [json.dumps({"kind": _KIND, "version": _VERSION, "shards": len(rows)},
                        sort_keys=True)]
    lines += [json.dumps(dataclasses.asdict(e), sort_keys=True, separators=(",", ":"))
              for e in rows]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def _int(row: Mapping[str, Any], key: str, *, optional: bool = False) -> int | None:
    value = row.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key!r} must be a count, got {value!r:.40}")
    return value


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
    lines = data.decode("utf-8", "surrogatepass").splitlines()
    try:
        head = json.loads(lines[0]) if lines else None
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("kind") != _KIND:
        raise ShardFormatError(f"read manifest {where}: not an aioflux shard manifest")
    if head.get("version") != _VERSION:
        raise ShardFormatError(f"read manifest {where}: version {head.get('version')!r}; "
                               f"this aioflux reads version {_VERSION}")
    out: dict[str, Entry] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("name"), str) \
                    or not isinstance(row.get("format"), str):
                raise ValueError("an entry needs a str 'name' and 'format'")
            compression = row.get("compression")
            if compression is not None and not isinstance(compression, str):
                raise ValueError(f"'compression' must be a str or null, got {compression!r:.40}")
            size = _int(row, "size")
            assert size is not None
            samples = _int(row, "samples")
            assert samples is not None
            data_size = _int(row, "data_size", optional=True)
            out[row["name"]] = Entry(
                name=row["name"], size=size, crc32c=_int(row, "crc32c", optional=True),
                version=_int(row, "version", optional=True), format=row["format"],
                compression=compression, samples=samples,
                data_size=size if data_size is None else data_size)
        except ValueError as exc:
            raise ShardFormatError(f"read manifest {where}: line {number}: {exc}") from None
    return out


async def read_manifest(store: ObjectStore, bucket: str, folder: str,
                        url: str) -> dict[str, Entry] | None:
    """The manifest in ``folder`` (one GET), or None where there is none.

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
    return decode_manifest(data, url)


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
