"""The Parquet side of the shard datasets: rows counted from footers, read by row group.

A :class:`ParquetRows` rides in a :class:`~._shard_source.ShardSource` whose
format is Parquet. When the dataset is made it counts the shards the
manifest does not (every shard with ``filters=``: a count is of the row
groups the statistics keep) from their footers, fetched by range and kept
in the node's footer cache beside the index cache, and holds each file's
schema to the first one's. In the process reading a shard it loads the
shard's footer (the cache, else two ranged GETs at most) and reads runs of
rows by their row groups (:mod:`aioflux._engines.shards._parquet_read`);
DataLoader workers share the row groups they decode through a directory
of the dataset's (on ``/dev/shm``), since their batches hold rows of the
same row groups at once.

A sample is a row: positions, resume and the rank split are the shard
datasets' own, exact at a row.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import shutil
import tempfile
import weakref
from collections.abc import Collection, Generator, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..._core.concurrency.portal import get_portal, iterate
from ..._core.concurrency.window import gather_bounded
from ..._core.errors import InvalidArgument, ShardFormatError
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import format_url
from ..._core.storage.protocol import ObjectStore
from ..._engines.cache import DiskCache
from ..._engines.hedge import Hedger
from ..._engines.shards import Run, ShardsDone
from ..._engines.shards._counts import Counts
from ..._engines.shards._manifest import manifest_folder
from ..._engines.shards._parquet import Footer, pyarrow_parquet
from ..._engines.shards._parquet_footers import FOOTERS_NAME, read_footers
from ..._engines.shards._parquet_read import (
    FooterCache,
    Kept,
    Picked,
    check_filters,
    kept_groups,
    read_footer,
    read_row_runs,
)
from ..._engines.shards._parquet_shared import SharedGroups, shared_base

__all__ = ["OUTPUTS", "ParquetRows", "check_parquet_settings"]

#: What ``ShardDataset(output=...)`` yields: a dict a row, or a batch of
#: rows as a dict of columns or a pyarrow RecordBatch.
OUTPUTS = ("rows", "columns", "arrow")
# Footers fetched at once when counting (small ranged GETs: latency-bound).
_FOOTERS_AT_ONCE = 32
# Footers a reading process keeps (a few KiB each).
_KEEP_FOOTERS = 64
# Rows made into dicts at once (pyarrow's per-call cost is small beside 256 rows').
_ROWS_AT_ONCE = 256
# A run's first slice: a batch's worth (DataLoader's default batches are
# smaller). A pass's first run holds its window's reads back until that
# slice is picked (see read_row_runs' first_out).
_FIRST_ROWS = 64
# Decoded row groups the workers share, per worker (see _parquet_shared).
_SHARED_PER_WORKER = 4
# How long a worker's jemalloc keeps freed pages (see _set_up_worker).
_JEMALLOC_DECAY_MS = 10_000
# The worker process set up to read (see _set_up_worker).
_set_up_in: int | None = None


def check_parquet_settings(op: str, format_name: str, columns: object, filters: object,
                           output: object, tensors: object) -> None:
    """Refuse Parquet's settings on another format, or of the wrong type.

    Raises:
        InvalidArgument: a bad setting.
    """
    if output not in OUTPUTS:
        raise InvalidArgument(f"{op}: output must be one of {', '.join(OUTPUTS)}, "
                              f"got {output!r}")
    if not isinstance(tensors, bool):
        raise InvalidArgument(f"{op}: tensors must be a bool, got {tensors!r}")
    if columns is not None and (isinstance(columns, str) or not isinstance(columns, Sequence)
                                or not columns or not all(isinstance(c, str) for c in columns)):
        raise InvalidArgument(f"{op}: columns must be a non-empty list of column names, "
                              f"got {columns!r:.200}")
    check_filters(op, filters)
    given = [name for name, value in (("columns", columns), ("filters", filters),
                                      ("tensors", tensors or None))
             if value is not None] + (["output"] if output != "rows" else [])
    if format_name != "parquet" and given:
        raise InvalidArgument(f"{op}: {', '.join(given)} apply to Parquet shards only, "
                              f"and these are {format_name}")


class ParquetRows:
    """Counting and reading Parquet shards for a :class:`ShardSource` (see the module).

    Args:
        op: the dataset, for messages.
        columns: the columns read (None: all).
        filters: pyarrow's ``filters`` form; row groups whose statistics
            rule them out are left out of the dataset.
        output: ``"rows"``, ``"columns"`` or ``"arrow"`` (:data:`OUTPUTS`).
        tensors: list columns (and, batched, every numeric column) as tensors.
        footer_dir: the footer cache's directory.
    """

    def __init__(self, op: str, *, columns: Sequence[str] | None, filters: object,
                 output: str, tensors: bool, footer_dir: str | os.PathLike[str]) -> None:
        pyarrow_parquet(op)
        self.op = op
        self.columns = None if columns is None else list(columns)
        self.filters = check_filters(op, filters)
        self.output, self.tensors = output, tensors
        self.footers = FooterCache(footer_dir)
        self.reference: tuple[str, Any] | None = None  # the first shard's URL and schema
        self.first_group_rows = 1
        self._kept: tuple[int, collections.OrderedDict[int, Kept]] | None = None
        # The DataLoader workers' shared row groups: a directory of this
        # process's, removed when the dataset is collected or the process exits.
        self.shared_dir = tempfile.mkdtemp(prefix="aioflux-row-groups-", dir=shared_base())
        weakref.finalize(self, _remove_dir, self.shared_dir, os.getpid())

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_kept"] = None  # footers are loaded where the shards are read
        return state

    async def footer(self, store: ObjectStore, info: ObjectInfo) -> Footer:
        """The footer of the listed version of ``info`` (the cache, else fetched)."""
        found = self.footers.get(info)
        if found is None:
            found = await read_footer(store, info)
            await asyncio.to_thread(self.footers.put, info, found)
        return found

    def _held_to_reference(self, footer: Footer) -> None:
        assert self.reference is not None
        url, schema = self.reference
        if not footer.arrow_schema.equals(schema):
            raise ShardFormatError(
                f"{self.op}: {footer.where} and {url} have different schemas ({footer.where}: "
                f"{_schema_line(footer.arrow_schema)}; {url}: {_schema_line(schema)}); "
                "a dataset reads files of one schema")

    def take_footers(self, store: ObjectStore, infos: Sequence[ObjectInfo],
                     listed: Collection[str] | None) -> int:
        """Put the footers of the folder's footers object (one GET) that are of
        the files as they are now into the node's footer cache, where any
        file's is missing; the files' footers are then not fetched by range.

        Args:
            store: the files' store.
            infos: the files.
            listed: the manifests and footers objects a listing of the folder
                held (None: not listed; the object is asked for).

        Returns:
            The footers taken.

        Raises:
            ShardFormatError: the footers object is damaged.
            StorageError: its read failed.
        """
        if not infos or all(map(self.footers.has, infos)):
            return 0
        first = infos[0]
        names = [info.name for info in infos]
        if any(info.bucket != first.bucket for info in infos):
            return 0  # one folder's object names one bucket's files
        folder = manifest_folder(names)
        if listed is not None and folder + FOOTERS_NAME not in listed:
            return 0
        url = format_url(first.scheme, first.bucket, folder + FOOTERS_NAME)
        found = get_portal().call(read_footers(store, first.bucket, folder, url))
        taken = 0
        for info, name in zip(infos, names, strict=True):
            entry = (found or {}).get(name[len(folder):])
            if entry is not None and entry.matches(info) and not self.footers.has(info):
                self.footers.put(info, Footer(entry.footer, info.size, info.url))
                taken += 1
        return taken

    def count(self, store: ObjectStore, infos: Sequence[ObjectInfo], found: Counts) -> Counts:
        """Count the shards ``found`` lacks (all of them with ``filters``) from
        their footers; the first shard's footer sets the schema the others
        are held to, and the first non-empty row group of the first file
        with rows the default read unit.

        Raises:
            ShardFormatError: a file is not Parquet, or its schema is not the first's.
            InvalidArgument: a column, or a filter's column, not in the files.
            StorageError: a read failed.
        """
        missing = list(range(len(infos))) if self.filters is not None else found.missing()
        wanted = missing if missing[:1] == [0] else [0, *missing]
        # All at once, the first file's too: its schema is held to the others after.
        footers = get_portal().call(gather_bounded(
            (self.footer(store, infos[k]) for k in wanted), _FOOTERS_AT_ONCE))
        first = footers[0]
        self.reference = (infos[0].url, first.arrow_schema)
        first.check_columns(self.op, self.columns)
        # Checked here, as columns are: a row group's statistics of a column
        # the file lacks would keep every row group, the filter silently unused.
        first.check_columns(f"{self.op}: filters", list(dict.fromkeys(
            name for conj in self.filters or () for name, _, _ in conj)))
        counted = wanted if wanted is missing else wanted[1:]  # the manifest counted file 0
        for footer in footers:
            self._held_to_reference(footer)
        for k, footer in zip(counted, footers[len(wanted) - len(counted):], strict=True):
            found[k] = kept_groups(footer, self.filters).rows, infos[k].size
        self.first_group_rows = self._group_rows(store, infos, found,
                                                 dict(zip(wanted, footers, strict=True)))
        return found

    def _group_rows(self, store: ObjectStore, infos: Sequence[ObjectInfo], found: Counts,
                    read: dict[int, Footer]) -> int:
        """The default read unit: the rows of the first non-empty row group of
        the first file counted with rows (1 where none has any).

        Not the first file's first row group: an empty first file would make
        the unit a row, and a shuffled pass read and decode a row group for
        nearly every row. Picked from the counts, which every rank shares:
        the file's footer is the one read here, else fetched.
        """
        full = np.flatnonzero(found.samples > 0)
        if not len(full):
            return 1
        footer = read.get(int(full[0]))
        if footer is None:
            footer = get_portal().call(self.footer(store, infos[int(full[0])]))
            self._held_to_reference(footer)
        return next((n for n in footer.rows if n), 1)

    async def kept(self, store: ObjectStore, infos: Sequence[ObjectInfo], k: int,
                   count: int) -> Kept:
        """Shard ``k``'s kept row groups, held to the schema and to ``count``
        (the rows the dataset was made with)."""
        if self._kept is None or self._kept[0] != os.getpid():
            self._kept = (os.getpid(), collections.OrderedDict())
        held = self._kept[1]
        found = held.get(k)
        if found is not None:
            held.move_to_end(k)
            return found
        footer = await self.footer(store, infos[k])
        self._held_to_reference(footer)
        found = kept_groups(footer, self.filters)
        if found.rows != count:
            raise ShardFormatError(
                f"read {infos[k].url}: {found.rows} rows, but the dataset was made with "
                f"{count} (its manifest or a cached footer is of another version of the "
                "file); make the dataset again")
        held[k] = found
        while len(held) > _KEEP_FOOTERS:
            held.popitem(last=False)
        return found

    def reads(self, store: ObjectStore, infos: Sequence[ObjectInfo], counts: Any,
              runs: Iterable[Run | ShardsDone], *, limit: int, max_bytes: int,
              hedger: Hedger | None, cache: DiskCache | None) -> Iterator[tuple[Run, Any]]:
        """Each run with a pyarrow Table of its rows (see ``read_row_runs``)."""
        async def kept_of(k: int) -> Kept:
            return await self.kept(store, infos, k, counts(k))

        agen = read_row_runs(store, infos, kept_of, runs, columns=self.columns, limit=limit,
                             max_bytes=max_bytes, hedger=hedger, cache=cache,
                             shared=self._shared(max_bytes), first_out=True)
        items = iterate(agen, batch=8, nbytes=_table_bytes, max_bytes=max_bytes)
        return self._checked(items, infos) if self.tensors else items

    def _checked(self, items: Iterator[tuple[Run, Any]],
                 infos: Sequence[ObjectInfo]) -> Iterator[tuple[Run, Any]]:
        """``items``, each run's tensor columns checked (see :meth:`check_tensors`)."""
        try:
            for run, table in items:
                self.check_tensors(table, infos[run.shard].url)
                yield run, table
        finally:
            if isinstance(items, Generator):
                items.close()  # stops the reads

    def check_tensors(self, table: Any, where: str) -> None:
        """Refuse a run's list column of numbers whose rows make no tensor:
        one with a null inside a list, or lists of different lengths in one
        row. Checked a run at a time, in Arrow, where the file is known;
        the rows are made tensors later, a slice at a time.

        Args:
            table: the run's rows (a Table, or a ``Picked``).
            where: the file's URL, for messages.

        Raises:
            InvalidArgument: such a row.
        """
        # A Picked's row groups are looked at first: a take of the run's rows
        # only where they hold such a row.
        whole = table.whole if isinstance(table, Picked) else table
        for name in _tensor_lists(table.schema):
            why = _untensorable(whole.column(name))
            if why is not None and whole is not table:
                why = _untensorable(table.column(name))
            if why is not None:
                raise InvalidArgument(
                    f"{self.op}: tensors=True: {where}'s column {name!r} holds {why}, "
                    "which no tensor can (read it without tensors=True)")

    def _shared(self, max_bytes: int) -> SharedGroups | None:
        """The row groups this DataLoader worker shares with the others (None
        outside workers, or with one)."""
        import torch.utils.data

        info = torch.utils.data.get_worker_info()
        if info is None:
            return None
        _set_up_worker()
        if info.num_workers < 2:
            return None
        # The workers' batches hold rows of the same few row groups at once:
        # a few each, and at most the read budget twice over.
        return SharedGroups(self.shared_dir, keep=_SHARED_PER_WORKER * info.num_workers,
                            max_bytes=2 * max_bytes)

    def fetch(self, store: ObjectStore, infos: Sequence[ObjectInfo], counts: Any,
              runs: Sequence[Run], *, limit: int, max_bytes: int,
              hedger: Hedger | None, cache: DiskCache | None) -> list[tuple[Run, Any]]:
        """Read ``runs`` and return them all (map-style access)."""
        async def kept_of(k: int) -> Kept:
            return await self.kept(store, infos, k, counts(k))

        async def run() -> list[tuple[Run, Any]]:
            return [item async for item in read_row_runs(
                store, infos, kept_of, runs, columns=self.columns, limit=limit,
                max_bytes=max_bytes, hedger=hedger, cache=cache)]

        items = get_portal().call(run())
        if self.tensors:
            for read, table in items:
                self.check_tensors(table, infos[read.shard].url)
        return items

    def rows(self, table: Any) -> Iterator[Any]:
        """A run's rows (a Table or a ``Picked``) as dicts (list columns as
        lists, or tensors: see :func:`_tensor_lists`), made a slice at a
        time: the first rows go out before the rest are made (or picked)."""
        lists = _tensor_lists(table.schema) if self.tensors else []
        at, count = 0, _FIRST_ROWS
        while at < table.num_rows:
            rows = table.slice(at, count).to_pylist()
            if self.tensors:
                import torch
                for row in rows:
                    for name in lists:
                        if row[name] is not None:
                            row[name] = torch.tensor(row[name])
            yield from rows
            at, count = at + count, _ROWS_AT_ONCE

    def batch(self, pieces: list[Any]) -> Any:
        """One batch of rows from Table ``pieces``: a RecordBatch (``"arrow"``)
        or a dict of columns (lists; tensors where asked: numeric columns
        without nulls, and the list columns of :func:`_tensor_lists`)."""
        import pyarrow as pa
        table = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
        table = table.combine_chunks()
        if self.output == "arrow":
            batches = table.to_batches()
            return batches[0] if batches else pa.RecordBatch.from_pylist([], table.schema)
        out = table.to_pydict()
        if self.tensors:
            import torch
            lists = _tensor_lists(table.schema)
            for field in table.schema:
                if _is_numeric(field.type) and table.column(field.name).null_count == 0:
                    # A copy: pyarrow's buffers are read-only, a tensor is not.
                    out[field.name] = torch.tensor(table.column(field.name).to_numpy())
                elif field.name in lists:
                    out[field.name] = [None if v is None else torch.tensor(v)
                                       for v in out[field.name]]
        return out


def _table_bytes(item: tuple[Run, Any]) -> int:
    # Its buffers' sizes: pyarrow's ``nbytes`` walks every value's offsets
    # (a slice's share), 25 times the time, and a run's table (or Picked)
    # owns its buffers.
    return int(item[1].get_total_buffer_size())


def _set_up_worker() -> None:
    """Once in each DataLoader worker, before its first read:

    - Leave the objects it holds when it starts (a fork's: the parent's heap,
      torch's and pyarrow's modules) out of its garbage collections: each
      full collection walks every one and writes its header, faulting in a
      private copy of every page the fork shared. Python's docs freeze
      before the fork; the DataLoader forks, so the worker freezes at its
      start. Objects made after are collected as ever.
    - Have pyarrow allocate from jemalloc where it has it: a worker's decodes,
      takes and shared row groups cost less CPU there than in the mimalloc
      heaps a fork inherits (perf scenario parquet, 4 workers). Only the
      worker's pool: the process that made the dataset keeps its own.
    - Have jemalloc keep freed pages 10 s, not 1 s, before it gives them
      back: a worker frees and makes row groups' worth of buffers all the
      time, and each page given back is faulted in and zeroed again (4
      workers on 2 cores: a third fewer madvise calls, 4% less CPU). What
      it keeps is the worker's own recent high-water mark.
    """
    global _set_up_in
    if _set_up_in != os.getpid():
        _set_up_in = os.getpid()
        gc.freeze()
        import pyarrow as pa
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
            pa.jemalloc_set_decay_ms(_JEMALLOC_DECAY_MS)
        except NotImplementedError:
            pass  # a pyarrow built without jemalloc keeps its default


def _remove_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def _is_list(kind: Any) -> bool:
    import pyarrow as pa
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind)
                or pa.types.is_fixed_size_list(kind))


def _tensor_lists(schema: Any) -> list[str]:
    """The list columns ``tensors=True`` makes tensors: numbers or booleans,
    in lists (at any depth). Decided by the type, so a column is tensors in
    every row or in none; lists of strings, structs and the like stay lists."""
    out = []
    for field in schema:
        kind, lists = field.type, 0
        while _is_list(kind):
            kind, lists = kind.value_type, lists + 1
        if lists and _is_numeric(kind):
            out.append(field.name)
    return out


def _untensorable(column: Any) -> str | None:
    """What in list ``column`` (a ChunkedArray) makes no tensor, or None: a
    null inside a list (a null list is a None row), or lists of different
    lengths inside one row's list. In Arrow, a run's values at a time: for
    a list of numbers, a count of its values' nulls."""
    import pyarrow.compute as pc
    for chunk in column.chunks:
        level, rows = chunk, None
        while _is_list(level.type):
            inner = level.flatten()
            if inner.null_count:
                return "a null inside a list"
            if not _is_list(inner.type):
                break
            # The row of each inner list: lengths must agree within a row.
            parents = pc.list_parent_indices(level).to_numpy()
            rows = parents if rows is None else rows[parents]
            lengths = pc.list_value_length(inner).to_numpy()
            if np.any((rows[1:] == rows[:-1]) & (lengths[1:] != lengths[:-1])):
                return "lists of different lengths in one row"
            level = inner
    return None


def _is_numeric(kind: Any) -> bool:
    import pyarrow as pa
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind)
                or pa.types.is_boolean(kind))


def _schema_line(schema: Any) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in schema)
