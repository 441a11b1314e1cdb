"""Reading Parquet shards: footers by range, row groups by their column chunks.

A footer is fetched once per node (:class:`FooterCache`, beside the index
cache: a read-only store's footers are its manifest there). A run of rows
(:class:`~._spans.Run`, rows numbered among the row groups a ``filters=``
keeps) is served from the row groups holding them: each row group's chunks
of the asked-for columns are fetched as ranged GETs (neighbouring chunks
coalesced), pinned to the listed version, each length checked, and handed
to pyarrow through :class:`~._parquet.RangeFile`, page CRCs verified.

The read unit is a row group. A row group whose asked-for chunks take more
than the read budget is fetched and decoded one column at a time (a
column's chunk bytes are let go before the next column is fetched): what
it holds is its decoded columns, not its compressed bytes too. The last
two decoded row groups are kept: consecutive runs of one row group (a
DataLoader worker's share of it, an unshuffled pass) decode it once; the
processes of a node that read the same row groups together (DataLoader
workers) share them decoded (:mod:`._parquet_shared`). A pass's first run
is read alone, the window's other reads after it (for a consumer in another
thread, once its first slice of rows is picked), and its rows are picked out
of its row groups a slice at a time as they are handed out: the first rows
wait on one row group, not on a window of them sharing the links, the
cores and the GIL, nor on the rest of the run's rows. Being alone on the
links, its row groups' chunks are fetched as a few GETs at once (a
connection's bandwidth is capped: a quarter of the transfer each); a read
in the window is one GET, the window's reads filling the links between them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import os
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..._core.concurrency.share import cpus, sharers
from ..._core.concurrency.window import window
from ..._core.errors import ChecksumMismatch, InvalidArgument, ShardFormatError
from ..._core.integrity.crc import crc32c
from ..._core.records.types import ObjectInfo
from ..._core.storage.protocol import ObjectStore
from ..cache import DiskCache
from ..hedge import Hedger
from ._parquet import TAIL, Footer, RangeFile, footer_of_tail, read_row_group
from ._parquet_shared import SharedGroups
from ._spans import Run, ShardsDone, _pinned_read

__all__ = ["FooterCache", "Kept", "Picked", "check_filters", "kept_groups", "read_footer",
           "read_group", "read_row_runs", "verify_file"]

# Chunks this close are fetched by one GET (the gap's bytes cost less than a request).
_GAP = 4096
# A read alone in flight (a pass's first, a random row's) is fetched as up to
# this many GETs at once of at least _PART bytes: a connection's bandwidth is
# capped (100 MB/s on the clouds), so a row group's transfer is cut by as much.
_PARTS = 4
_PART = 256 * 1024
# Decoded row groups a reader keeps for the next runs.
_KEEP = 2
_OPS = frozenset({"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"})

Filters = Sequence[Sequence[tuple[str, str, Any]]] | Sequence[tuple[str, str, Any]] | None


@dataclasses.dataclass(frozen=True, eq=False)
class Kept:
    """A shard's row groups that are read, and where each one's rows start.

    Attributes:
        footer: the file's footer.
        groups: the row groups read, in file order.
        starts: each one's first row among them, the total last.
    """

    footer: Footer
    groups: tuple[int, ...]
    starts: tuple[int, ...]

    @property
    def rows(self) -> int:
        """Rows of the kept row groups."""
        return self.starts[-1]


def check_filters(op: str, filters: object) -> list[list[tuple[str, str, Any]]] | None:
    """``filters`` as pyarrow spells them, in disjunctive form (a list of
    and-ed lists), or None.

    Raises:
        InvalidArgument: not pyarrow's form, or an operator it lacks.
    """
    if filters is None:
        return None
    if not isinstance(filters, (list, tuple)) or not filters:
        raise InvalidArgument(f"{op}: filters must be a non-empty list of (column, op, "
                              f"value) tuples or of lists of them, got {filters!r:.200}")
    dnf = [filters] if isinstance(filters[0], tuple) else filters
    out = []
    for conj in dnf:
        if not isinstance(conj, (list, tuple)) or not conj:
            raise InvalidArgument(f"{op}: filters: {conj!r:.100} is not a list of "
                                  "(column, op, value)")
        terms = []
        for term in conj:
            if not (isinstance(term, tuple) and len(term) == 3 and isinstance(term[0], str)
                    and term[1] in _OPS):
                raise InvalidArgument(f"{op}: filters: {term!r:.100} is not (column, op, "
                                      f"value) with op one of {', '.join(sorted(_OPS))}")
            terms.append(term)
        out.append(terms)
    return out


def _may_hold(op: str, value: Any, low: Any, high: Any) -> bool:
    """Whether a value within ``[low, high]`` may satisfy ``x op value``."""
    try:
        if op in ("=", "=="):
            return bool(low <= value <= high)
        if op == "!=":
            return not (low == high == value)
        if op == "<":
            return bool(low < value)
        if op == "<=":
            return bool(low <= value)
        if op == ">":
            return bool(high > value)
        if op == ">=":
            return bool(high >= value)
        if op == "in":
            return any(low <= v <= high for v in value)
        return not (low == high and low in value)  # "not in"
    except TypeError:
        return True  # a value the statistics' type does not compare with: read it


def kept_groups(footer: Footer, filters: list[list[tuple[str, str, Any]]] | None) -> Kept:
    """The row groups whose statistics may hold rows ``filters`` keeps (every
    row group without ``filters``, or where a column has no statistics)."""
    md = footer.metadata
    groups = []
    for g in range(md.num_row_groups):
        if filters is None or any(all(_term_may_hold(footer, g, t) for t in conj)
                                  for conj in filters):
            groups.append(g)
    starts = [0]
    for g in groups:
        starts.append(starts[-1] + footer.rows[g])
    return Kept(footer, tuple(groups), tuple(starts))


def _term_may_hold(footer: Footer, group: int, term: tuple[str, str, Any]) -> bool:
    name, op, value = term
    # A column not in the files is refused when the dataset is made; a
    # nested one's statistics are its leaves', none of its own.
    leaves = footer.leaves.get(name)
    if leaves is None or len(leaves) != 1:
        return True
    stats = footer.metadata.row_group(group).column(leaves[0]).statistics
    if stats is None or not stats.has_min_max:
        return True
    return _may_hold(op, value, stats.min, stats.max)


class FooterCache:
    """Footers on local disk, keyed by the file's URL, version and size; each
    entry its crc32c then the footer, written whole (renamed into place).

    Args:
        directory: where the entries live (created on first write).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, info: ObjectInfo) -> Path:
        key = f"{info.url}\n{info.generation}\n{info.size}\nparquet-footer"
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return self.directory / f"{digest}.pqf"

    def has(self, info: ObjectInfo) -> bool:
        """Whether an entry of this version of the file is there (unchecked)."""
        return bool(info.generation) and self._path(info).is_file()

    def get(self, info: ObjectInfo) -> Footer | None:
        """The cached footer of this version of the file, or None (a damaged
        entry is dropped)."""
        if not info.generation:
            return None
        path = self._path(info)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        raw = data[4:]
        if len(data) < 12 or crc32c(raw).to_bytes(4, "little") != data[:4]:
            path.unlink(missing_ok=True)
            return None
        return Footer(raw, info.size, info.url)

    def put(self, info: ObjectInfo, footer: Footer) -> None:
        """Keep ``footer`` for this version of the file (none for an unversioned one)."""
        if not info.generation:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(crc32c(footer.raw).to_bytes(4, "little") + footer.raw)
            os.replace(tmp, self._path(info))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


async def _checked_read(store: ObjectStore, info: ObjectInfo, start: int, end: int,
                        hedger: Hedger | None = None) -> bytes:
    """``[start, end)`` of the listed version, its length checked."""
    data = await _pinned_read(store, info, info.generation or None, start, end, hedger)
    if len(data) != end - start:
        raise ChecksumMismatch(f"read {info.url}: bytes {start}-{end} came back as "
                               f"{len(data)} bytes", operation="read", bucket=info.bucket,
                               name=info.name)
    return bytes(data)


def _parts(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut into at most ``parts`` ranges of at least :data:`_PART`."""
    count = max(1, min(parts, (end - start) // _PART))
    step = -(-(end - start) // count)
    return [(at, min(end, at + step)) for at in range(start, end, step)]


async def _split_read(store: ObjectStore, info: ObjectInfo, start: int, end: int,
                      hedger: Hedger | None, parts: int) -> bytes:
    """``[start, end)`` as up to ``parts`` ranged GETs at once, joined."""
    ranges = _parts(start, end, parts)
    if len(ranges) == 1:
        return await _checked_read(store, info, start, end, hedger)
    datas = await asyncio.gather(*(_checked_read(store, info, a, b, hedger) for a, b in ranges))
    return b"".join(datas)


async def read_footer(store: ObjectStore, info: ObjectInfo) -> Footer:
    """The footer of the listed version of a Parquet file: its last
    :data:`~._parquet.TAIL` bytes, then the rest of a longer footer.

    Raises:
        ShardFormatError: not a Parquet file.
        NotFound, PreconditionFailed: it changed since it was listed.
        ChecksumMismatch: a read came back short.
        StorageError: a read failed.
    """
    start = max(0, info.size - TAIL)
    tail = await _checked_read(store, info, start, info.size)
    found = footer_of_tail(tail, info.size, info.url)
    if isinstance(found, int):
        rest = await _checked_read(store, info, info.size - found, start)
        found = footer_of_tail(rest + tail, info.size, info.url)
        assert not isinstance(found, int)
    return found


def _coalesced(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start - out[-1][1] <= _GAP:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _decode(info: ObjectInfo, footer: Footer, pieces: list[tuple[int, bytes]], group: int,
            columns: Sequence[str] | None) -> Any:
    file = RangeFile(footer.size, footer.raw, pieces, info.url)
    try:
        return read_row_group(file, footer, group, columns)
    except ShardFormatError:
        raise
    except (OSError, ValueError) as exc:
        text = str(exc)
        kind = ChecksumMismatch if "CRC" in text or "checksum" in text.lower() else None
        message = f"read {info.url}: row group {group} does not decode ({text})"
        if kind is not None:
            raise kind(message, operation="read", bucket=info.bucket, name=info.name) from None
        raise ShardFormatError(message) from None


async def read_group(store: ObjectStore, info: ObjectInfo, footer: Footer, group: int,
                     columns: Sequence[str] | None, *, budget: int,
                     hedger: Hedger | None = None, cache: DiskCache | None = None,
                     decoding: asyncio.Semaphore | None = None, split: int = 1) -> Any:
    """Row group ``group``'s ``columns`` (None: all) as a pyarrow Table.

    Fetches only those columns' chunks (neighbours coalesced), one GET a
    piece in parallel (a piece past ``2 * _PART`` bytes as up to ``split``
    GETs at once); past ``budget`` bytes, one column at a time. With a
    disk cache, each piece is an entry keyed by the file's version and the
    piece's range, shared by the machine's workers and later epochs.
    ``decoding`` bounds the decodes running at once (each a thread's).

    Raises:
        ChecksumMismatch: a page's CRC, or a read's length, is wrong.
        ShardFormatError: the chunks do not decode.
        NotFound, PreconditionFailed: the file changed since it was listed.
        StorageError: a read failed.
    """
    names = list(footer.leaves) if columns is None else list(columns)
    spans = footer.chunks(group, names)
    total = sum(end - start for start, end in spans)
    parts = [names] if total <= budget or len(names) < 2 else [[n] for n in names]
    tables = []
    for part in parts:
        ranges = _coalesced(footer.chunks(group, part))
        datas = await asyncio.gather(*(_piece(store, info, start, end, hedger, cache, split)
                                       for start, end in ranges))
        pieces = [(start, data) for (start, _), data in zip(ranges, datas, strict=True)]
        del datas
        async with decoding or contextlib.nullcontext():
            tables.append(await asyncio.to_thread(_decode, info, footer, pieces, group, part))
        del pieces
    return tables[0] if len(tables) == 1 else _joined(tables)


def _joined(tables: list[Any]) -> Any:
    """A row group's columns, decoded apart, as one table of the schema a
    whole read gives: every column of each part with its field as decoded
    (nullability, field metadata) and the file's schema metadata, which
    each part carries. Of another schema, a run of row groups on both
    sides of the budget would not concatenate."""
    import pyarrow as pa
    fields = [field for t in tables for field in t.schema]
    columns = [column for t in tables for column in t.columns]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, tables[0].schema.metadata))


async def _piece(store: ObjectStore, info: ObjectInfo, start: int, end: int,
                 hedger: Hedger | None, cache: DiskCache | None, split: int) -> bytes:
    if cache is None:
        return await _split_read(store, info, start, end, hedger, split)
    # The entry's name carries the range; size and version keep it to these bytes.
    entry = info._replace(name=f"{info.name}#bytes={start}-{end}", size=end - start,
                          crc32c=None, md5=None)

    async def fetch(objects: list[ObjectInfo]) -> list[bytes | bytearray]:
        return [await _split_read(store, info, start, end, hedger, split) for _ in objects]

    data = bytes(await cache.get(entry, fetch))
    if len(data) != end - start:
        raise ChecksumMismatch(f"read {info.url}: the cached bytes {start}-{end} are "
                               f"{len(data)} bytes", operation="read", bucket=info.bucket,
                               name=info.name)
    return data


def _indices(rows: Any) -> Any:
    """``rows`` (an int64 numpy array) as an Arrow int64 array, from its
    buffer: ``pa.array`` of a list (or of a numpy array) looks for pandas
    first, and a process's first look imports it (0.8 s of CPU here, on the
    first row's path and in each DataLoader worker)."""
    import pyarrow as pa
    return pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)])


def _located(kept: Kept, samples: Sequence[int]) -> tuple[list[int], Any]:
    """The positions in ``kept.groups`` of the row groups holding ``samples``
    (in file order), and each sample's row in those row groups joined in
    that order (an int64 numpy array, in the samples' order).

    A run at a time in numpy, not a Python call a row: it runs on the loop,
    for every row read."""
    import numpy as np
    rows = np.asarray(samples, dtype=np.int64)
    starts = np.asarray(kept.starts, dtype=np.int64)
    js = np.searchsorted(starts, rows, side="right") - 1
    # Not np.unique: its first call imports numpy.ma (6 ms, on the first row's path).
    order = np.flatnonzero(np.bincount(js, minlength=len(starts)))
    sizes = starts[order + 1] - starts[order]
    # Where each row group's rows start in the joined table.
    base = np.zeros(len(starts), dtype=np.int64)
    base[order] = np.cumsum(sizes) - sizes
    return order.tolist(), np.ascontiguousarray(base[js] + (rows - starts[js]))


class Picked:
    """A run's rows of its row groups, picked a slice at a time as they are
    wanted: the first rows go out before the rest are picked.

    Args:
        whole: the run's row groups' table.
        rows: the run's rows in it, in the run's order (int64 numpy).
        picked: called once, from the consumer's thread, when the first
            slice is made (None: not told).
    """

    def __init__(self, whole: Any, rows: Any, picked: Callable[[], None] | None = None) -> None:
        self.whole, self.rows = whole, rows
        self._picked = picked

    @property
    def schema(self) -> Any:
        """The columns' pyarrow schema."""
        return self.whole.schema

    @property
    def num_rows(self) -> int:
        """The run's rows."""
        return len(self.rows)

    def get_total_buffer_size(self) -> int:
        """The decoded bytes held: its row groups' buffers (as a Table counts its own)."""
        return int(self.whole.get_total_buffer_size())

    def column(self, name: str) -> Any:
        """Column ``name`` of the run's rows, picked whole (a ChunkedArray)."""
        return self.whole.column(name).take(_indices(self.rows))

    def slice(self, at: int, count: int) -> Any:
        """Rows ``at`` to ``at + count`` of the run as a pyarrow Table."""
        table = self.whole.take(_indices(self.rows[at:at + count]))
        if self._picked is not None:
            picked, self._picked = self._picked, None
            picked()
        return table


def _teller(out: asyncio.Future[None]) -> Callable[[], None]:
    """A call, from any thread, that resolves ``out`` on its loop."""
    loop = out.get_loop()

    def resolve() -> None:
        if not out.done():
            out.set_result(None)

    def told() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: no one waits
            loop.call_soon_threadsafe(resolve)

    return told


def _retrieved(task: asyncio.Future[Kept]) -> None:
    if not task.cancelled():
        task.exception()  # the run that wanted it is no longer read: not "never retrieved"


async def read_row_runs(store: ObjectStore, shards: Sequence[ObjectInfo],
                        kept_of: Callable[[int], Awaitable[Kept]],
                        runs: Iterable[Run | ShardsDone], *, columns: Sequence[str] | None,
                        limit: int, max_bytes: int, hedger: Hedger | None = None,
                        cache: DiskCache | None = None, shared: SharedGroups | None = None,
                        first_out: bool = False) -> AsyncGenerator[tuple[Run, Any], None]:
    """Read ``runs`` of rows in order, a window of them in flight.

    Args:
        store: the shards' store.
        shards: the shards (what :attr:`Run.shard` numbers).
        kept_of: shard ``k``'s kept row groups (its footer loaded).
        runs: the runs (rows numbered among the kept row groups), with
            :class:`ShardsDone` markers (skipped).
        columns: the columns read (None: all).
        limit: runs in flight.
        max_bytes: compressed bytes in flight (one run always reads); a row
            group past it is read a column at a time.
        hedger: hedges slow ranged reads (None: never).
        cache: a disk cache of the fetched chunks (None: none).
        shared: decoded row groups shared with the node's other readers
            (None: read alone).
        first_out: the window waits until the first run's first slice of
            rows is picked (see :class:`Picked`): cutting runs and starting
            reads is Python on the loop, which would hold up, under the GIL,
            a consumer picking those rows in another thread. Only for a
            consumer that slices a run before it asks for the next.

    Yields:
        Each run with a pyarrow Table of its rows (the first run's a
        :class:`Picked`: picked a slice at a time), in the run's order.

    Raises:
        ChecksumMismatch, ShardFormatError, NotFound, PreconditionFailed,
        StorageError: as :func:`read_group`.
    """
    done: collections.OrderedDict[tuple[int, int], Any] = collections.OrderedDict()
    flying: dict[tuple[int, int], asyncio.Future[Any]] = {}
    # Decodes at once: this process's share of the CPUs. More only queue up
    # on the cores, and held the ranged reads' own CPU (and a shaper's or a
    # server's on the same machine) back behind them.
    decoding = asyncio.Semaphore(max(1, cpus() // sharers()))

    async def group(k: int, kept: Kept, g: int, split: int) -> Any:
        key = (k, g)
        if key in done:
            done.move_to_end(key)
            return done[key]
        if key not in flying:
            info = shards[k]

            def read() -> Awaitable[Any]:
                return read_group(store, info, kept.footer, g, columns, budget=max_bytes,
                                  hedger=hedger, cache=cache, decoding=decoding, split=split)

            flying[key] = asyncio.ensure_future(read() if shared is None else shared.get(
                f"{info.url}\n{info.generation}\n{info.size}\n{g}\n{columns!r}", read))
        try:
            table = await asyncio.shield(flying[key])
        finally:
            if key in flying and flying[key].done():
                del flying[key]
        if table.num_rows != kept.footer.rows[g]:
            raise ShardFormatError(f"read {shards[k].url}: row group {g} holds {table.num_rows} "
                                   f"rows, its footer says {kept.footer.rows[g]}")
        done[key] = table
        while len(done) > _KEEP:
            done.popitem(last=False)
        return table

    async def job(item: tuple[Run, Kept, list[int], Any], picked: bool = False,
                  told: Callable[[], None] | None = None) -> Any:
        run, kept, order, rows = item
        # The first run is read alone: its chunks split across connections.
        split = _PARTS if picked else 1
        tables = [await group(run.shard, kept, kept.groups[j], split) for j in order]
        import pyarrow as pa
        whole = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        # A later run's rows are taken whole: a Picked would hold its row
        # groups while in the window, where the run's rows alone are counted.
        return Picked(whole, rows, told) if picked else whole.take(_indices(rows))

    async def with_kept() -> AsyncGenerator[tuple[Run, Kept, list[int], Any], None]:
        # The footers of the shards of the next ``limit`` runs are asked for
        # together: one at a time, each shard's first run would wait a round
        # trip with no read in flight behind it.
        source = (item for item in runs if isinstance(item, Run))
        ahead: collections.deque[Run] = collections.deque()
        loading: dict[int, asyncio.Future[Kept]] = {}
        looked = 1  # the first run goes without waiting for the others to be cut
        try:
            while True:
                while len(ahead) < looked:
                    item = next(source, None)
                    if item is None:
                        break
                    ahead.append(item)
                    if item.shard not in loading:
                        loading[item.shard] = asyncio.ensure_future(kept_of(item.shard))
                    # Cutting runs from the epoch order is CPU on the loop: the
                    # reads' and the consumer's callbacks run between them.
                    await asyncio.sleep(0)
                looked = limit
                if not ahead:
                    return
                run = ahead.popleft()
                kept = await loading[run.shard]
                if all(r.shard != run.shard for r in ahead):
                    del loading[run.shard]  # asked for again if a later run reads it
                # Located once: the window's byte count wants them, then the read.
                yield (run, kept, *_located(kept, run.samples))
        finally:
            for task in loading.values():
                task.cancel()
                task.add_done_callback(_retrieved)

    def nbytes(item: tuple[Run, Kept, list[int], Any]) -> int:
        _, kept, order, _ = item
        return sum(kept.footer.chunk_bytes(kept.groups[j], columns) for j in order)

    items = with_kept()
    try:
        first = await anext(items, None)
        if first is None:
            return
        # The first run is read alone and handed out at once: the first rows
        # wait on its row groups, not on a window's worth of reads sharing
        # the links and the cores, nor on the window filling up.
        out = asyncio.get_running_loop().create_future() if first_out else None
        yield first[0], await job(first, picked=True,
                                  told=None if out is None else _teller(out))
        if out is not None:
            await out
        async for (run, *_), table in window(items, job, limit=limit, ordered=True,
                                            max_bytes=max_bytes, nbytes=nbytes):
            yield run, table
    finally:
        await items.aclose()
        for future in flying.values():
            future.cancel()


async def verify_file(store: ObjectStore, info: ObjectInfo, *, budget: int) -> int:
    """Read every row group of a Parquet file (all columns, a row group at a
    time, page CRCs verified) and hold each one's rows to its footer's.

    Returns:
        The file's rows.

    Raises:
        ShardFormatError: a row group decodes to other than its footer's rows.
        ChecksumMismatch, NotFound, PreconditionFailed, StorageError: as
            :func:`read_group`.
    """
    footer = await read_footer(store, info)
    for g, rows in enumerate(footer.rows):
        got = (await read_group(store, info, footer, g, None, budget=budget)).num_rows
        if got != rows:
            raise ShardFormatError(f"verify {info.url}: row group {g} holds {got} rows, its "
                                   f"footer says {rows}")
    return sum(footer.rows)
