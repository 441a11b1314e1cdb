"""Packing rows into a Parquet shard: row groups of a target size, page CRCs on.

Rows (dicts) are taken a block at a time into Arrow, and a row group is
written once the rows waiting take :data:`DEFAULT_ROW_GROUP_BYTES` of
Arrow memory (or the shard ends): what the packer holds is one row group's
rows, whatever the shard's size. A row waiting for its block is a copy of
what it held when it was written (see :func:`_snapshot`): a caller may
fill the same dict, list or array again for the next row. pyarrow writes
the file (``write_page_checksum=True`` always, so readers verify every
page) into the shard's sink, the object writer that publishes it whole on
close.

The schema is the first rows' (or the one given) for every shard of the
writer: readers refuse files of two schemas. Every row has the schema's
columns, no more and no fewer (the first row's, before there is one), but
for the nullable ones of a schema given, which a row may leave out (null):
a row of others is refused as it is written.
"""

from __future__ import annotations

import copy
import datetime
import decimal
from collections.abc import Callable, Mapping
from typing import Any

from ..._core.errors import InvalidArgument
from ._parquet import pyarrow_parquet

__all__ = ["DEFAULT_ROW_GROUP_BYTES", "ParquetPacker"]

#: Arrow bytes of a row group's rows (a reader holds a couple of row groups
#: decoded per worker).
DEFAULT_ROW_GROUP_BYTES = 32 * 1024 * 1024
# Most rows turned into Arrow at once: fewer as a row group nears its
# bytes, at the rows' size so far, so a row group ends near its target.
_BLOCK = 1024
# Values no caller can change after writing them: taken as they are.
_FIXED = frozenset({int, float, str, bytes, bool, type(None), decimal.Decimal,
                    datetime.datetime, datetime.date, datetime.time, datetime.timedelta})


class _Out:
    """The sink as the file pyarrow writes to (it asks where it is)."""

    def __init__(self, write: Callable[[Any], object]) -> None:
        self._write = write
        self.pos = 0
        self.closed = False
        self.capture: bytearray | None = None  # what is written from now on, kept

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._write(bytes(data))
        if self.capture is not None:
            self.capture += data
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True  # the sink publishes on its own close


class ParquetPacker:
    """One Parquet shard, row by row (see the module).

    Args:
        where: the shard's URL, for messages.
        write: takes the file's bytes (its sink's ``write``).
        row_group_bytes: Arrow bytes of rows that make a row group.
        schema: the rows' pyarrow schema (None: the first rows').
    """

    def __init__(self, where: str, write: Callable[[Any], object], *, row_group_bytes: int,
                 schema: Any = None) -> None:
        self._pq = pyarrow_parquet(f"write {where}")
        self.where = where
        self.schema = schema
        self.row_group_bytes = row_group_bytes
        self._out = _Out(write)
        self._writer: Any = None
        self._rows: list[dict[str, Any]] = []  # not yet in Arrow
        # Every row's columns: the schema's, else the first row's.
        self._columns: frozenset[str] | None = None if schema is None else \
            frozenset(schema.names)
        # Those a row may leave out (null): a given schema's nullable ones.
        self._nullable = frozenset() if schema is None else \
            frozenset(field.name for field in schema if field.nullable)
        self._tables: list[Any] = []  # in Arrow, not yet written
        self._pending = 0  # Arrow bytes of _tables
        self.count = 0
        self.row_groups = 0
        #: The footer as the file ends (after :meth:`finish`; None if it was
        #: not seen whole): what the folder's footers object keeps.
        self.footer: bytes | None = None
        self._block = 16  # rows to take before the next turn into Arrow
        self._per_row = 1  # Arrow bytes a row, as the rows so far take

    @property
    def size(self) -> int:
        """Bytes written, and the Arrow bytes of the rows waiting (an upper
        bound of what they add, before encoding and compression)."""
        return self._out.pos + self._pending

    def add(self, row: object) -> None:
        """Take one row.

        Raises:
            InvalidArgument: not a dict of str keys, other columns than the
                schema's (or the first row's), or (when its block is turned
                into Arrow) values that do not fit the schema.
        """
        if not isinstance(row, Mapping) or not all(isinstance(k, str) for k in row):
            raise InvalidArgument(f"write {self.where} (row {self.count}): a Parquet row is "
                                  f"a dict of column name to value, got {type(row).__name__}")
        if self._columns is None:
            self._columns = frozenset(row)
        elif row.keys() != self._columns and not self._leaves_nulls(row):
            self._refuse_columns(row)
        # Copied now, not when its block is turned into Arrow: by then the
        # caller may have filled the same dict (or list, or array) again.
        self._rows.append({name: _snapshot(value) for name, value in row.items()})
        self.count += 1
        if len(self._rows) >= self._block:
            self._arrow()
            if self._pending >= self.row_group_bytes:
                self._row_group()

    def _leaves_nulls(self, row: Mapping[str, Any]) -> bool:
        """Whether ``row`` only leaves out columns a given schema declares
        nullable: those are null, as pyarrow writes them (a schema inferred
        from the first row declares nothing, and takes no fewer)."""
        assert self._columns is not None
        return row.keys() < self._columns and \
            self._columns - row.keys() <= self._nullable

    def _refuse_columns(self, row: Mapping[str, Any]) -> None:
        assert self._columns is not None
        differ = [f"{what} {', '.join(map(repr, sorted(names)))}" for what, names in
                  (("extra", row.keys() - self._columns), ("missing", self._columns - row.keys()))
                  if names]
        raise InvalidArgument(f"write {self.where} (row {self.count}): its columns differ from "
                              f"the schema's (the first row's where none was given): "
                              f"{'; '.join(differ)}")

    def _arrow(self) -> None:
        if not self._rows:
            return
        import pyarrow as pa
        first = self.count - len(self._rows)
        try:
            table = pa.Table.from_pylist(self._rows, schema=self.schema)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise InvalidArgument(f"write {self.where} (rows {first}-{self.count - 1}): do "
                                  f"not fit the schema ({exc})") from None
        if self.schema is None:
            self.schema = table.schema
        self._per_row = max(1, table.nbytes // max(1, table.num_rows))
        self._rows = []
        self._tables.append(table)
        self._pending += table.nbytes
        self._next_block()

    def _next_block(self) -> None:
        left = self.row_group_bytes - self._pending
        self._block = min(_BLOCK, max(1, -(-left // self._per_row)))

    def _row_group(self) -> None:
        """Write the rows waiting as one row group."""
        self._arrow()
        if not self._tables:
            return
        import pyarrow as pa
        table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        self._tables, self._pending = [], 0
        if self._writer is None:
            self._writer = self._pq.ParquetWriter(self._out, self.schema,
                                                  write_page_checksum=True)
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.row_groups += 1
        self._next_block()

    def finish(self) -> None:
        """Write the last row group and the footer."""
        self._row_group()
        if self._writer is None:  # a shard of no rows: a file with the schema alone
            if self.schema is None:
                raise InvalidArgument(f"write {self.where}: no rows, and no schema to "
                                      "write an empty file with")
            self._writer = self._pq.ParquetWriter(self._out, self.schema,
                                                  write_page_checksum=True)
        # What closing writes is the footer (metadata, length, PAR1), after
        # any page pyarrow still held: its length says where it starts.
        self._out.capture = bytearray()
        self._writer.close()
        tail, self._out.capture = bytes(self._out.capture), None
        length = int.from_bytes(tail[-8:-4], "little") + 8 if len(tail) >= 8 else 0
        if tail[-4:] == b"PAR1" and 8 < length <= len(tail):
            self.footer = tail[-length:]


def _snapshot(value: Any) -> Any:
    """``value`` as it is now, safe from the caller's changes to it after.

    Only what can change is copied, and a list of plain values (most list
    columns' rows) by one shallow copy, checked at C speed: a few
    microseconds a row, a small share of its turn into Arrow. A full
    ``copy.deepcopy`` costs four times that.
    """
    kind = type(value)
    if kind in _FIXED:
        return value
    if kind is list or kind is tuple:
        if all(map(_FIXED.__contains__, map(type, value))):
            return value if kind is tuple else list(value)
        return kind(map(_snapshot, value))
    if kind is dict:
        return {k: _snapshot(v) for k, v in value.items()}
    if kind is bytearray or kind is memoryview:
        return bytes(value)
    return copy.deepcopy(value)  # an array, a set, a subclass: copied whole
