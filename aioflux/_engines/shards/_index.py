"""A shard's index: where each sample lies, and its crc32c.

One :class:`ShardIndex` per shard records the object it was built from
(size, crc32c, version) and, per sample, the byte offset and length of its
region in the shard's *data* (the decompressed bytes for a compressed
shard) and the crc32c of that region. With it a dataset knows every
shard's sample count before training, reads any sample with one ranged
read, and checks every sample's bytes against what was indexed.

The same encoding serves the sidecar a writer publishes beside a shard
(``<shard>.idx``) and the local index cache: a magic line, one JSON line
(what the index is of), the three columns little-endian, and the crc32c of
everything before it. An index is matched to its shard by size and
crc32c, where the store keeps a crc32c for the shard (a copy of the pair to
another bucket keeps both), else by size and version (the store's version
token of the indexed object): a shard rewritten with the same size by a tool
that records no crc32c (local files, S3 objects uploaded without checksums)
is then not cut by the old index's boundaries. A cached index is keyed by the
object's version as well.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..._core.crc import crc32c
from ..._core.errors import ShardFormatError

__all__ = ["INDEX_SUFFIX", "Columns", "IndexCache", "ShardIndex", "decode_index",
           "default_index_dir", "encode_index", "new_columns", "total_samples"]

INDEX_SUFFIX = ".idx"
_MAGIC = b"AIOFLUX-SHARD-INDEX 1\n"
_LITTLE = sys.byteorder == "little"


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
    """

    format: str
    compression: str | None
    size: int
    crc32c: int | None
    version: int | None
    data_size: int
    offsets: array.array[int]
    lengths: array.array[int]
    crcs: array.array[int]

    def __len__(self) -> int:
        return len(self.offsets)

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


def encode_index(index: ShardIndex) -> bytes:
    """The index as bytes (the sidecar and cache encoding).

    Args:
        index: the index.

    Returns:
        The encoded index.
    """
    head = {"format": index.format, "compression": index.compression, "size": index.size,
            "crc32c": index.crc32c, "version": index.version, "data_size": index.data_size,
            "count": len(index)}
    parts = [_MAGIC, json.dumps(head, sort_keys=True).encode() + b"\n"]
    for column in (index.offsets, index.lengths, index.crcs):
        if not _LITTLE:
            column = array.array(column.typecode, column)
            column.byteswap()
        parts.append(column.tobytes())
    body = b"".join(parts)
    return body + crc32c(body).to_bytes(4, "little")


def decode_index(data: bytes, where: str) -> ShardIndex:
    """Parse what :func:`encode_index` wrote.

    Args:
        data: the encoded index.
        where: the index's URL or path, for messages.

    Returns:
        The index.

    Raises:
        ShardFormatError: not an index, or damaged.
    """
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4:
        raise ShardFormatError(f"read index {where}: not an aioflux shard index")
    body, tail = data[:-4], data[-4:]
    if crc32c(body).to_bytes(4, "little") != tail:
        raise ShardFormatError(f"read index {where}: damaged (its crc32c does not match)")
    end = body.index(b"\n", len(_MAGIC))
    try:
        head = json.loads(body[len(_MAGIC):end])
        count = int(head["count"])
        columns = new_columns()
        pos = end + 1
        for column in columns:
            width = column.itemsize * count
            column.frombytes(body[pos:pos + width])
            if not _LITTLE:
                column.byteswap()
            pos += width
        if pos != len(body) or any(len(c) != count for c in columns):
            raise ValueError("column lengths")
        return ShardIndex(format=str(head["format"]), compression=head["compression"],
                          size=int(head["size"]), crc32c=head["crc32c"],
                          version=head["version"], data_size=int(head["data_size"]),
                          offsets=columns[0], lengths=columns[1], crcs=columns[2])
    except (ValueError, KeyError, TypeError) as exc:
        raise ShardFormatError(f"read index {where}: damaged ({exc})") from None


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

    def _path(self, url: str, version: int | None, *, by_crc: bool) -> Path:
        key = f"{url}\n{version}" if by_crc else f"{url}\n{version}\nby-version"
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass"))
        return self.directory / f"{digest.hexdigest()[:32]}{INDEX_SUFFIX}"

    def _load(self, path: Path) -> ShardIndex | None:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            return decode_index(data, str(path))
        except ShardFormatError:
            path.unlink(missing_ok=True)
            return None

    def get(self, url: str, version: int | None, size: int, crc: int | None, *,
            format: str) -> ShardIndex | None:
        """The cached index of this version of the shard in ``format``, if any
        (a damaged one is dropped).

        An entry of another format is a miss, as a sidecar of another format
        is: a shard once opened with the wrong format (a tar read as lines
        indexes without error) is indexed again in the right one, whose
        entry then replaces it, instead of failing on the wrong one forever.
        """
        if version is None:
            return None
        if crc is not None:
            index = self._load(self._path(url, version, by_crc=True))
            if index is not None and index.format == format and index.version == version \
                    and index.size == size and index.crc32c == crc:
                return index
        index = self._load(self._path(url, version, by_crc=False))
        if index is None or index.format != format or index.version != version or \
                not index.matches(size, crc, version):
            return None
        return index

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
                out.write(encode_index(index))
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
