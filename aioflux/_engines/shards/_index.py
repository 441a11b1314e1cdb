"""A shard's index: where each sample lies, and its crc32c.

One :class:`ShardIndex` per shard records the object it was built from
(size, crc32c, version) and, per sample, the byte offset and length of its
region in the shard's *data* (the decompressed bytes for a compressed
shard) and the crc32c of that region. With it a dataset knows every
shard's sample count before training, reads any sample with one ranged
read, and checks every sample's bytes against what was indexed.

The same encoding serves the sidecar a writer publishes beside a shard
(``<shard>.idx``, version 1): a magic line, one JSON line (what the index
is of), the three columns little-endian, and the crc32c of everything
before it. The local index cache writes version 2, the same with the JSON
line padded so that each column starts on its own item size: a cached
entry is then memory-mapped and its columns are views of the file, not
copies (every process of a machine shares the pages, and an index dropped
from memory costs nothing to drop). A count is read from the JSON line
alone (:meth:`IndexCache.count`), without the columns. An index is matched to its shard by size and
crc32c, where the store keeps a crc32c for the shard (a copy of the pair to
another bucket keeps both), else by size and version (the store's version
token of the indexed object): a shard rewritten with the same size by a tool
that records no crc32c (local files, S3 objects uploaded without checksums)
is then not cut by the old index's boundaries. A cached index is keyed by the
object's version as well.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import hashlib
import json
import mmap
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, Union

from ..._core.errors import ShardFormatError
from ..._core.integrity.crc import crc32c

__all__ = ["INDEX_SUFFIX", "Column", "Columns", "IndexCache", "ShardIndex", "decode_index",
           "default_index_dir", "encode_index", "index_bytes", "new_columns", "total_samples"]

INDEX_SUFFIX = ".idx"
_MAGIC = b"AIOFLUX-SHARD-INDEX 1\n"
_MAGIC_2 = b"AIOFLUX-SHARD-INDEX 2\n"
# Version 2 cache entries end so: an older aioflux sharing the directory
# would take one for a damaged version 1 entry and delete it.
_CACHE_SUFFIX = ".idx2"
_LITTLE = sys.byteorder == "little"
# The most bytes a JSON line of an index takes (it holds a few numbers).
_MAX_HEAD = 64 * 1024
# Bytes each sample takes in the columns.
_SAMPLE_BYTES = 8 + 8 + 4

T = TypeVar("T")

#: A column: an array, or (memory-mapped) a view of a cached file.
Column = Union["array.array[int]", memoryview]


@dataclasses.dataclass(eq=False)
class ShardIndex:
    """Samples of one shard.

    Attributes:
        format: the shard's format name (``"tar"``, ``"lines"``).
        compression: ``None``, ``"gzip"`` or ``"zstd"`` (the whole shard).
        size: the object's size in bytes.
        crc32c: the object's crc32c (None where the store keeps none).
        version: the object's version token when indexed (``info.generation``).
        data_size: bytes of the shard's data (``size`` when not compressed).
        offsets: each sample's first byte in the data.
        lengths: each sample's byte count.
        crcs: each sample's crc32c.
        checked: built here from the shard's bytes, which the format
            checked as it indexed them (a tar's headers): a region whose
            crc32c matches holds those very bytes, which need no second
            check. Kept by the local cache; a sidecar, which anyone may
            write, is never taken for one.
    """

    format: str
    compression: str | None
    size: int
    crc32c: int | None
    version: int | None
    data_size: int
    offsets: Column
    lengths: Column
    crcs: Column
    checked: bool = False

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def nbytes(self) -> int:
        """Bytes its columns take (in memory, or mapped)."""
        return len(self) * _SAMPLE_BYTES

    def span(self, first: int, last: int) -> tuple[int, int]:
        """The bytes ``[start, end)`` covering samples ``first..last`` (inclusive)."""
        start = self.offsets[first]
        return start, self.offsets[last] + self.lengths[last]

    def matches(self, size: int, crc: int | None, version: int | None) -> bool:
        """Whether this index is of the object of this size, crc32c and version.

        The crc32c decides where both it and the index know one (a copy
        keeps it, and changes the version); else the version must be the
        indexed one: the size alone would take a shard rewritten with the
        same size for the one indexed.
        """
        if self.size != size:
            return False
        if crc is not None and self.crc32c is not None:
            return self.crc32c == crc
        return self.version is not None and self.version == version


Columns = tuple["array.array[int]", "array.array[int]", "array.array[int]"]


def new_columns() -> Columns:
    """Empty offset, length and crc32c columns."""
    return array.array("Q"), array.array("Q"), array.array("I")


def encode_index(index: ShardIndex, *, version: int = 1) -> bytes:
    """The index as bytes (the sidecar and cache encoding).

    Args:
        index: the index.
        version: 1 (sidecars: what every aioflux reads) or 2 (the local
            cache: columns aligned, to be memory-mapped).

    Returns:
        The encoded index.
    """
    fields = _head(index)
    if version != 1 and index.checked:
        fields["checked"] = True  # a cache entry's alone (see decode_index)
    head = json.dumps(fields, sort_keys=True).encode()
    magic = _MAGIC if version == 1 else _MAGIC_2
    if version != 1:
        # Spaces before the newline put the first column on an 8-byte boundary.
        head += b" " * (-(len(magic) + len(head) + 1) % 8)
    parts = [magic, head + b"\n"]
    for column in (index.offsets, index.lengths, index.crcs):
        if not _LITTLE:
            column = array.array("I" if column is index.crcs else "Q", column)
            column.byteswap()
        parts.append(bytes(column))
    body = b"".join(parts)
    return body + crc32c(body).to_bytes(4, "little")


def _head(index: ShardIndex) -> dict[str, Any]:
    return {"format": index.format, "compression": index.compression, "size": index.size,
            "crc32c": index.crc32c, "version": index.version, "data_size": index.data_size,
            "count": len(index)}


def _parse_head(line: bytes | memoryview, where: str) -> dict[str, Any]:
    try:
        head = json.loads(bytes(line))
        if not isinstance(head, dict):
            raise TypeError("not an object")
        int(head["count"]), int(head["size"]), int(head["data_size"])
        str(head["format"])
        return head
    except (ValueError, KeyError, TypeError) as exc:
        raise ShardFormatError(f"read index {where}: damaged ({exc})") from None


def _index_of(head: dict[str, Any], columns: Sequence[Column], checked: bool) -> ShardIndex:
    crc, version = head.get("crc32c"), head.get("version")
    return ShardIndex(format=str(head["format"]),
                      compression=head["compression"], size=int(head["size"]),
                      crc32c=crc if isinstance(crc, int) else None,
                      version=version if isinstance(version, int) else None,
                      data_size=int(head["data_size"]),
                      offsets=columns[0], lengths=columns[1], crcs=columns[2],
                      checked=checked)


def decode_index(data: bytes | memoryview, where: str, *, ours: bool = False) -> ShardIndex:
    """Parse what :func:`encode_index` wrote (either version).

    Args:
        data: the encoded index (a memoryview of a mapped file: the
            columns are then views of it where the byte order allows).
        where: the index's URL or path, for messages.
        ours: an entry of the local cache, whose ``checked`` is believed
            (a sidecar's never is).

    Returns:
        The index.

    Raises:
        ShardFormatError: not an index, or damaged.
    """
    view = memoryview(data).cast("B")
    magic = bytes(view[:len(_MAGIC)])
    if magic not in (_MAGIC, _MAGIC_2) or len(view) < len(_MAGIC) + 4:
        raise ShardFormatError(f"read index {where}: not an aioflux shard index")
    body, tail = view[:-4], bytes(view[-4:])
    if crc32c(body).to_bytes(4, "little") != tail:
        raise ShardFormatError(f"read index {where}: damaged (its crc32c does not match)")
    end = bytes(body[:_MAX_HEAD + len(_MAGIC)]).find(b"\n", len(_MAGIC))
    if end < 0:
        raise ShardFormatError(f"read index {where}: damaged (no header line)")
    head = _parse_head(body[len(_MAGIC):end], where)
    count = int(head["count"])
    pos = end + 1
    if len(body) - pos != count * _SAMPLE_BYTES:
        raise ShardFormatError(f"read index {where}: damaged ({len(body) - pos} bytes of "
                               f"columns for {count} samples)")
    mapped = magic == _MAGIC_2 and _LITTLE and pos % 8 == 0
    columns: list[Column] = []
    for typecode in ("Q", "Q", "I"):
        width = count * (8 if typecode == "Q" else 4)
        piece = body[pos:pos + width]
        if mapped:
            columns.append(piece.cast(typecode))
        else:
            column = array.array(typecode)
            column.frombytes(piece)
            if not _LITTLE:
                column.byteswap()
            columns.append(column)
        pos += width
    return _index_of(head, columns, ours and head.get("checked") is True)


def index_bytes(count: int) -> int:
    """Bytes the columns of ``count`` samples take."""
    return count * _SAMPLE_BYTES


class IndexCache:
    """Shard indexes on local disk, keyed by the shard's URL and version.

    Entries are written whole (a temporary file renamed into place), so
    processes sharing the directory never read half an index.

    An entry whose crc32c is the shard's (as the store reports it) and one
    tied to its shard by the version alone have keys of their own: entries
    under the first key were once also taken from sidecars matched by size
    alone, so one there counts only where its crc32c proves it.

    Args:
        directory: where the entries live (created on first write).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._root = os.fspath(self.directory)

    def _path(self, url: str, version: int | None, *, by_crc: bool) -> str:
        key = f"{url}\n{version}" if by_crc else f"{url}\n{version}\nby-version"
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass"))
        # A str, not a Path: pathlib interns every part it parses, and the
        # interpreter's table of interned strings never shrinks, so looking
        # up a million shards' entries kept ~40 bytes a shard for good.
        return os.path.join(self._root, f"{digest.hexdigest()[:32]}{_CACHE_SUFFIX}")

    def _load(self, path: str) -> ShardIndex | None:
        try:
            with open(path, "rb") as file:
                # Mapped, not read: the columns are views of the page cache,
                # which every process of the machine shares.
                mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # ValueError: an empty file cannot be mapped
            return None
        try:
            return decode_index(memoryview(mapped), path, ours=True)
        except ShardFormatError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return None

    def _head(self, path: str) -> dict[str, Any] | None:
        try:
            with open(path, "rb") as file:
                start = file.read(len(_MAGIC_2) + _MAX_HEAD)
        except OSError:
            return None
        end = start.find(b"\n", len(_MAGIC_2))
        if not start.startswith(_MAGIC_2) or end < 0:
            return None
        try:
            return _parse_head(start[len(_MAGIC_2):end], path)
        except ShardFormatError:
            return None

    def _find(self, url: str, version: int | None, size: int, crc: int | None,
              format: str, read: Callable[[str], T | None],
              head: Callable[[T], dict[str, Any]]) -> T | None:
        if version is None:
            return None
        if crc is not None:
            found = read(self._path(url, version, by_crc=True))
            if found is not None:
                h = head(found)
                if h["format"] == format and h["version"] == version and \
                        h["size"] == size and h["crc32c"] == crc:
                    return found
        found = read(self._path(url, version, by_crc=False))
        if found is None:
            return None
        h = head(found)
        if h["format"] != format or h["version"] != version or h["size"] != size:
            return None
        if crc is not None and h["crc32c"] is not None:
            return found if h["crc32c"] == crc else None
        return found

    def count(self, url: str, version: int | None, size: int, crc: int | None, *,
              format: str) -> tuple[int, int] | None:
        """``(samples, data bytes)`` of the cached index of this version of the
        shard, read from the entry's header alone (its columns stay on disk);
        None where there is none.

        A damaged entry is found out, and dropped, when its columns are loaded
        (:meth:`get`, which checks its crc32c): its count is then held against
        the index it is replaced with.
        """
        head = self._find(url, version, size, crc, format, self._head, lambda h: h)
        if head is None:
            return None
        return int(head["count"]), int(head["data_size"])

    def get(self, url: str, version: int | None, size: int, crc: int | None, *,
            format: str) -> ShardIndex | None:
        """The cached index of this version of the shard in ``format``, if any
        (a damaged one is dropped), its columns mapped from the file.

        An entry of another format is a miss, as a sidecar of another format
        is: a shard once opened with the wrong format (a tar read as lines
        indexes without error) is indexed again in the right one, whose
        entry then replaces it, instead of failing on the wrong one forever.
        """
        return self._find(url, version, size, crc, format, self._load, _head)

    def put(self, url: str, index: ShardIndex, *, crc: int | None) -> None:
        """Keep ``index`` for its shard's version (nothing for an unversioned one).

        Args:
            url: the shard's URL.
            index: its index.
            crc: the shard's crc32c as its store reports it (None: none).
        """
        if index.version is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(url, index.version,
                          by_crc=crc is not None and index.crc32c == crc)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(encode_index(index, version=2))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def default_index_dir() -> Path:
    """``$XDG_CACHE_HOME/aioflux/shard-index`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "aioflux" / "shard-index"


def total_samples(indexes: Sequence[ShardIndex]) -> int:
    """Samples of all ``indexes`` together."""
    return sum(map(len, indexes))
