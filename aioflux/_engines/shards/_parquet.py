"""Parquet shards: a shard's index is its footer; a sample is a row.

A Parquet file ends with its footer (Thrift metadata, its length as 4
bytes, ``PAR1``): the schema, and per row group its row count and each
column chunk's byte range. :func:`read_footer` fetches it by ranged GETs
(the last 64 KiB, then whatever of a longer footer that missed), pinned to
the version the shard was listed at. A read then fetches only the asked-for
columns' chunks of a row group (:mod:`._parquet_read`) and pyarrow decodes
them from :class:`RangeFile`, which serves the footer and those ranges and
refuses any other byte, so a decode never reads behind aioflux's back.

Decoding is pyarrow's (the ``parquet`` extra); aioflux parses no Parquet.
Page CRCs are verified where the writer wrote them
(``page_checksum_verification``).

:class:`ParquetFormat` is the format of the shard machinery's table
(``FORMATS["parquet"]``): its streamed ``index`` (what ``aioflux shards
index`` and a dataset without any footer at hand run) keeps only the
file's tail, so memory stays bounded by the footer whatever the file's size.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..._core.errors import InvalidArgument, ShardFormatError
from ._index import new_columns

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = ["MAGIC", "MAX_FOOTER", "TAIL", "Footer", "ParquetFormat", "RangeFile",
           "footer_of_tail", "pyarrow_parquet", "read_row_group"]

MAGIC = b"PAR1"
#: The first footer read: a file's last bytes (most footers fit; a longer
#: one costs a second GET of the rest).
TAIL = 64 * 1024
#: The most bytes a footer may take (a wide schema of many row groups: a
#: few MiB); past it a shard is refused rather than held in memory.
MAX_FOOTER = 64 * 1024 * 1024


def pyarrow_parquet(op: str) -> Any:
    """``pyarrow.parquet``, or an error naming the extra that installs it.

    Raises:
        InvalidArgument: pyarrow is not installed.
    """
    try:
        # pyarrow.compute too: a run's rows are taken from their row group
        # with it, and its import (60 ms here, several times that on a busy
        # host) would fall on the first row's path.
        import pyarrow.compute
        import pyarrow.parquet
    except ImportError:
        raise InvalidArgument(f"{op}: Parquet shards need pyarrow: "
                              "pip install 'aioflux-storage[parquet]'") from None
    return pyarrow.parquet


@dataclasses.dataclass(frozen=True, eq=False)
class Footer:
    """A Parquet file's footer and what reads need of it.

    Attributes:
        raw: the footer's bytes as the file ends: metadata, length, ``PAR1``.
        size: the file's size.
        where: the file's URL, for messages.
    """

    raw: bytes
    size: int
    where: str

    @functools.cached_property
    def metadata(self) -> pq.FileMetaData:
        """The parsed metadata (pyarrow's)."""
        pq = pyarrow_parquet(f"read {self.where}")
        try:
            return pq.read_metadata(_footer_file(self.raw))
        except (OSError, ValueError) as exc:
            raise ShardFormatError(f"read {self.where}: damaged Parquet footer ({exc})") \
                from None

    @functools.cached_property
    def rows(self) -> tuple[int, ...]:
        """Rows of each row group."""
        md = self.metadata
        return tuple(md.row_group(g).num_rows for g in range(md.num_row_groups))

    @functools.cached_property
    def leaves(self) -> dict[str, tuple[int, ...]]:
        """The leaf columns (column chunks) of each top-level column, by name.

        Counted off the Arrow schema, whose fields' leaves follow one another
        depth first: a leaf's dotted path cannot say which top-level column
        it is of, since a name may hold a dot (``a.b`` is no field ``b`` of
        a column ``a``).

        Raises:
            ShardFormatError: the fields' leaves are not the file's columns.
        """
        schema = self.metadata.schema
        found = _field_leaves(self.arrow_schema, schema)
        if found is None:
            raise ShardFormatError(f"read {self.where}: its schema's fields do not match its "
                                   f"{len(schema)} leaf columns")
        return found

    @functools.cached_property
    def arrow_schema(self) -> Any:
        """The file's schema as pyarrow reads it."""
        return self.metadata.schema.to_arrow_schema()

    def chunks(self, group: int, columns: Sequence[str] | None) -> list[tuple[int, int]]:
        """The byte ranges ``[start, end)`` of the column chunks of ``columns``
        (None: all) in row group ``group``, in file order.

        Raises:
            ShardFormatError: a chunk outside the file's data.
        """
        rg = self.metadata.row_group(group)
        leaves = range(rg.num_columns) if columns is None else \
            [c for name in columns for c in self.leaves[name]]
        out = []
        for c in leaves:
            chunk = rg.column(c)
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            end = start + chunk.total_compressed_size
            if not len(MAGIC) <= start < end <= self.size - len(self.raw):
                raise ShardFormatError(f"read {self.where}: row group {group}'s column chunk "
                                       f"{c} claims bytes {start}-{end} of {self.size}")
            out.append((start, end))
        return sorted(out)

    def chunk_bytes(self, group: int, columns: Sequence[str] | None) -> int:
        """Compressed bytes of ``columns``' chunks (None: all) in row group
        ``group``; kept, since every run read from it counts them."""
        key = (group, None if columns is None else tuple(columns))
        found = self._chunk_bytes.get(key)
        if found is None:
            found = sum(end - start for start, end in self.chunks(group, columns))
            self._chunk_bytes[key] = found
        return found

    @functools.cached_property
    def _chunk_bytes(self) -> dict[tuple[int, tuple[str, ...] | None], int]:
        return {}

    def check_columns(self, op: str, columns: Sequence[str] | None) -> None:
        """Refuse columns the file does not have (naming the file).

        Raises:
            InvalidArgument: a column not in the file.
        """
        for name in columns or ():
            if name not in self.leaves:
                raise InvalidArgument(f"{op}: {self.where} has no column {name!r} (it has "
                                      f"{', '.join(self.leaves)})")


def read_row_group(file: Any, footer: Footer, group: int, columns: Sequence[str] | None) -> Any:
    """Row group ``group``'s ``columns`` (None: all) of ``file``, page CRCs
    verified, decoded in this thread into jemalloc's pool where pyarrow has it.

    jemalloc, not mimalloc (pyarrow's default): in a process that imported
    torch, mimalloc's first decode often pays tens of milliseconds of
    system time, on the path of a job's first row. ``ParquetFile`` takes
    no pool; its reader does.

    Raises:
        OSError, ValueError: as pyarrow's ``read_row_group``.
    """
    pq = pyarrow_parquet(f"read {footer.where}")
    # pre_buffer off: pyarrow's own coalescing would read across the other
    # columns' chunks (holes up to 8 KiB), which were not fetched.
    pool = _decode_pool()
    # By leaf index, not by name: pyarrow takes a name's dots as a path into
    # nested columns, and the footer knows which leaves are a column's.
    leaves = None if columns is None else [c for name in columns for c in footer.leaves[name]]
    if pool is None:
        reader = pq.ParquetFile(file, metadata=footer.metadata, pre_buffer=False,
                                page_checksum_verification=True)
        return reader.reader.read_row_group(group, column_indices=leaves, use_threads=False)
    raw = pool[0](memory_pool=pool[1])
    raw.open(file, pre_buffer=False, metadata=footer.metadata,
             page_checksum_verification=True)
    return raw.read_row_group(group, column_indices=leaves, use_threads=False)


def _leaf_count(kind: Any) -> int:
    """The Parquet leaf columns an Arrow type is stored as."""
    import pyarrow as pa
    if isinstance(kind, pa.ExtensionType):
        return _leaf_count(kind.storage_type)
    if pa.types.is_struct(kind):
        return sum(_leaf_count(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaf_count(kind.key_type) + _leaf_count(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
            pa.types.is_fixed_size_list(kind):
        return _leaf_count(kind.value_type)
    return 1


def _field_leaves(fields: Any, schema: Any) -> dict[str, tuple[int, ...]] | None:
    """Each of ``fields``' (an Arrow schema's) leaf columns in ``schema`` (the
    Parquet one), or None where they do not cover its leaves one to one."""
    out: dict[str, list[int]] = {}
    at = 0
    for field in fields:
        leaves = range(at, at + _leaf_count(field.type))
        # Each leaf's path starts with its column's name: a miscount would
        # hand a column another's chunks.
        if leaves.stop > len(schema) or not all(
                _is_under(schema.column(c).path, field.name) for c in leaves):
            return None
        out.setdefault(field.name, []).extend(leaves)
        at = leaves.stop
    return {name: tuple(cs) for name, cs in out.items()} if at == len(schema) else None


def _is_under(path: str, name: str) -> bool:
    """Whether a leaf's dotted ``path`` may be of the top-level column ``name``."""
    return path == name or path.startswith(name + ".")


@functools.cache
def _decode_pool() -> tuple[Any, Any] | None:
    """pyarrow's row group reader class and jemalloc's pool, or None (no
    jemalloc in this pyarrow, or a reader of another shape): then decodes
    go through ``ParquetFile``, into the default pool."""
    import pyarrow as pa
    try:
        from pyarrow._parquet import ParquetReader
        pool = pa.jemalloc_memory_pool()
        ParquetReader(memory_pool=pool)
    except (ImportError, NotImplementedError, TypeError):
        return None
    return ParquetReader, pool


def _footer_file(raw: bytes) -> Any:
    """A file of the footer alone, which pyarrow reads metadata from (the
    offsets in it are the real file's; parsing them checks none)."""
    import pyarrow as pa
    return pa.BufferReader(MAGIC + raw)


def footer_of_tail(tail: bytes, size: int, where: str) -> Footer | int:
    """The footer in a file's last ``len(tail)`` bytes, or the bytes of the
    file's end a footer needs when ``tail`` holds too few.

    Raises:
        ShardFormatError: not a Parquet file, or a footer past :data:`MAX_FOOTER`.
    """
    if size < 12 or len(tail) < 8 or tail[-4:] != MAGIC:
        raise ShardFormatError(f"read {where}: not a Parquet file (it does not end in PAR1)")
    length = int.from_bytes(tail[-8:-4], "little")
    need = length + 8
    if need + len(MAGIC) > size or length > MAX_FOOTER:
        raise ShardFormatError(f"read {where}: damaged Parquet footer (length {length} in a "
                               f"file of {size} bytes)")
    if need > len(tail):
        return need
    return Footer(bytes(tail[-need:]), size, where)


class RangeFile(io.RawIOBase):
    """A file of ``size`` bytes that holds only ``pieces`` (``(start, bytes)``)
    and its footer: what pyarrow reads a row group's chunks from. A read of
    any other byte raises: pyarrow never reads what aioflux did not fetch
    and check.

    Args:
        size: the file's size.
        footer: the footer's bytes (the file's last).
        pieces: the fetched ranges.
        where: the file's URL, for messages.
    """

    def __init__(self, size: int, footer: bytes, pieces: Iterable[tuple[int, bytes]],
                 where: str) -> None:
        super().__init__()
        self._size, self._where = size, where
        self._pieces = sorted([*pieces, (size - len(footer), footer)], key=lambda p: p[0])
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), max(0, self._size - self._pos))
        if not n:
            return 0
        for start, data in self._pieces:
            if start <= self._pos and self._pos + n <= start + len(data):
                at = self._pos - start
                view[:n] = data[at:at + n]
                self._pos += n
                return n
        raise ShardFormatError(f"read {self._where}: the Parquet decoder asked for bytes "
                               f"{self._pos}-{self._pos + n}, outside the column chunks "
                               "fetched (the footer's ranges are wrong)")


class ParquetFormat:
    """Parquet files as shards: a sample is a row (see the module)."""

    name = "parquet"

    def index(self, chunks: Iterable[bytes | memoryview], where: str
              ) -> tuple[Any, Any, Any, int]:
        """Index a file as it streams by: only its tail is kept, then its footer read.

        Each row gets its row group's first byte and span (its bytes are a
        row group's, read together); a row has no bytes of its own, so its
        crc32c is 0: rows are checked by the page CRCs and the pinned version.

        Args:
            chunks: the file's bytes, in order.
            where: its URL, for messages.

        Returns:
            ``(offsets, lengths, crcs, data_size)``.

        Raises:
            ShardFormatError: not a Parquet file, or a damaged footer.
        """
        tail = bytearray()
        size = 0
        for chunk in chunks:
            size += len(chunk)
            tail += chunk
            if len(tail) > MAX_FOOTER + 8:
                del tail[:len(tail) - MAX_FOOTER - 8]
        found = footer_of_tail(bytes(tail), size, where)
        if isinstance(found, int):
            raise ShardFormatError(f"read {where}: damaged Parquet footer ({found} bytes "
                                   f"in a file of {size})")
        offsets, lengths, crcs = new_columns()
        for g, rows in enumerate(found.rows):
            spans = found.chunks(g, None)
            start = spans[0][0] if spans else 0
            length = spans[-1][1] - start if spans else 0
            offsets.extend([start] * rows)
            lengths.extend([length] * rows)
            crcs.extend([0] * rows)
        return offsets, lengths, crcs, size

    def sample(self, region: bytes | memoryview, url: str, offset: int, *,
               checked: bool = False) -> Any:
        """Rows are decoded a row group at a time, never from one row's bytes.

        Raises:
            ShardFormatError: always (a Parquet row has no region of its own).
        """
        raise ShardFormatError(f"read {url}: a Parquet row is read with its row group "
                               "(ShardDataset(format=\"parquet\")), not as a byte region")
