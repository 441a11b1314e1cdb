"""``torch.distributed.checkpoint`` storage for ``gs://``, ``s3://``, ``file://`` and path
checkpoints.

:class:`GcsStorageWriter` and :class:`GcsStorageReader` plug aioflux's
streaming writer and ranged reads into DCP's file-system layout, so
``dcp.save``, ``dcp.async_save`` and ``dcp.load`` work with
``checkpoint_id="gs://bucket/run/step-100"`` (or ``file:///mnt/nfs/run``,
or a path: each path's scheme picks its store). Each data file is a
streaming upload, published only when complete; the ``.metadata`` file is
written last, and a save into an existing checkpoint deletes the old one
first, so an interrupted re-save leaves no checkpoint rather than a mix of
two (DCP writes a temporary name and renames it: on a store with
compose a single-source compose plus a delete, else a copy plus a delete).
Reads fetch exactly each plan item's
byte range, several items ahead within a byte budget, instead of streaming
whole files. Each item's bytes must have the crc32c the writer recorded as
it wrote them (``.metadata.crc32c``, written just before ``.metadata``), so
a load of some items (the model without the optimizer) is checked too; and
where a load's ranges cover a whole data file (a full load), their crc32c
combine and must equal the file's (for checkpoints without the items'
crc32c: torch's writer, older aioflux). DCP's zstd stream extension
(``compression="zstd"`` or ``_extensions=[ZStandard()]``)
is accepted on both sides.
"""

from __future__ import annotations

import collections
import io
import itertools
import json
import os
from collections.abc import Generator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    FileSystemReader,
    FileSystemWriter,
    _StorageInfo,
)
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future as TorchFuture

from .._api.stores import AnyClient, store_for_url
from .._api.sync import Client
from .._core.crc import crc32c_combine, decode_crc32c, encode_crc32c
from .._core.errors import AiofluxError, ChecksumMismatch, InvalidArgument, InvalidURL, NotFound
from .._core.options import WriterOptions
from .._core.portal import get_portal
from .._core.store import Fetched, ObjectStore
from .._core.types import ObjectInfo
from .._core.urls import SCHEMES, StoreURL, format_url, parse_url
from .._core.validate import check_instance, check_int
from .._engines.reader import ObjectReader
from .._engines.writer import ObjectWriter
from ._zip_crc import without_zip_crc32

__all__ = ["GcsFileSystem", "GcsStorageReader", "GcsStorageWriter"]

# Plan items fetched ahead of the one DCP is reading.
DEFAULT_ITEMS_AHEAD = 8
# Most bytes of plan items in flight, the one DCP waits for included (it
# always goes, however large): what a checkpoint's streaming reader holds
# ahead (ReaderOptions: 32 blocks of 4 MiB). Loading 8 items of 48 MiB from
# file:// (a few runs each) raised peak RSS by 530-626 MiB with all 8 in
# flight, 339-434 MiB within 256 MiB, 195-243 MiB within 128 MiB and 147 MiB
# one at a time; torch's own reader, reading straight from the file, 97 MiB.
DEFAULT_BYTES_AHEAD = 128 * 1024 * 1024
# Read size when a data file is checked whole after torch failed on it.
_CHECK_CHUNK = 8 * 1024 * 1024
# Beside a checkpoint's metadata (".metadata.crc32c"), written just before
# it: the crc32c of every item's bytes, which DCP's metadata does not hold.
# A load of some items of a file (the model without the optimizer) checks
# them against it; without it only loads that read whole files are checked.
# It names the save it belongs to (the save_id DCP puts in the metadata's
# storage_meta): another writer re-saving into the directory (torch's
# FileSystemWriter(overwrite=True)) replaces the metadata and data files but
# leaves ours, whose crc32c then are of bytes no longer there.
_ITEM_CRCS = ".crc32c"
# DCP's name for a checkpoint's metadata (``__<rank>.metadata`` per rank
# when ranks save without collectives).
_METADATA = ".metadata"


class _Segments:
    """The crc32c of a data file's bytes between the positions DCP asked
    for: each item starts and ends at a ``tell()`` (``_write_item``), so an
    item's crc32c combines from these without a second pass over it."""

    def __init__(self) -> None:
        self._marks: dict[int, tuple[int, int]] = {}  # segment end -> (start, crc32c)
        self._start = 0
        self._crc = 0

    def add(self, crc: int, length: int) -> None:
        """The next ``length`` bytes of the file have crc32c ``crc``."""
        self._crc = crc32c_combine(self._crc, crc, length)

    def mark(self, at: int) -> None:
        if at != self._start:
            self._marks[at] = (self._start, self._crc)
            self._start, self._crc = at, 0

    def item_crc32c(self, offset: int, length: int) -> int | None:
        """The crc32c of bytes ``offset`` to ``offset + length``, or None
        when they do not start and end at positions DCP asked for."""
        end, pieces = offset + length, []
        while end > offset:
            segment = self._marks.get(end)
            if segment is None:
                return None
            pieces.append((segment[1], end - segment[0]))
            end = segment[0]
        if end != offset:
            return None
        combined = 0  # the crc32c of no bytes
        for crc, size in reversed(pieces):
            combined = crc32c_combine(combined, crc, size)
        return combined


class _RecordingWriter(ObjectWriter):
    """An ObjectWriter that keeps :class:`_Segments` of what DCP writes,
    from the checksums the writer computes of its part buffers anyway
    (each byte is checksummed once, in place: see ``_checksum_filled``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.segments = _Segments()

    def _checksummed(self, crc: int, length: int) -> None:
        self.segments.add(crc, length)

    def tell(self) -> int:
        with self._lock:
            self._checksum_filled()  # the bytes up to here end a segment
            at = super().tell()
            self.segments.mark(at)
            return at

    def _close(self) -> None:
        if not self._done:
            self.tell()  # the last segment
        super()._close()


@dataclass
class _CheckedStorageInfo(_StorageInfo):
    """DCP's per-item storage info, with the item's crc32c: what a rank's
    write results carry to the coordinator, whose ``finish`` moves the
    crc32c into the ``.crc32c`` file and writes plain ``_StorageInfo`` into
    ``.metadata`` (which torch's own reader then still loads)."""

    crc32c: int | None = None


class GcsFileSystem(FileSystemBase):
    """DCP's file-system interface over object stores (paths stay URL strings).

    Each path's scheme picks its store: ``gs://`` the GCS client, ``s3://``
    the S3 store, ``file://`` and plain paths the local filesystem.

    Args:
        client: the store for paths of its scheme (``AsyncClient`` or
            ``Client`` for ``gs://``, an ``S3Store`` for ``s3://``, a
            ``LocalStore`` for files); default:
            the process-wide store of each path's scheme.
        writer: part size and parts in flight of the writers.

    Raises:
        InvalidArgument: a setting of the wrong type.
    """

    def __init__(self, client: AnyClient | None = None, *,
                 writer: WriterOptions | None = None) -> None:
        check_instance("GcsFileSystem", "client", client, (ObjectStore, Client), optional=True)
        check_instance("GcsFileSystem", "writer", writer, WriterOptions, optional=True)
        self.client = client
        self.writer_options = writer or WriterOptions()
        # Data files written, by URL: their items' crc32c (GcsStorageWriter
        # takes each out once the save's results name its items).
        self.written: dict[str, _Segments] = {}

    def locate(self, path: str | os.PathLike[str], *,
               require_object: bool = True) -> tuple[ObjectStore, StoreURL]:
        """The store serving ``path`` and the parsed path.

        Args:
            path: an object URL or path.
            require_object: the path must name an object.

        Returns:
            ``(store, parsed URL)``.

        Raises:
            InvalidURL: a malformed URL.
            InvalidArgument: a client of another scheme than a ``gs://`` path's.
        """
        return store_for_url(os.fspath(path), self.client, require_object=require_object)

    def _call(self, coro: Any) -> Any:
        return get_portal().call(coro)

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str],
                      mode: str) -> Generator[io.IOBase, None, None]:
        """Open ``path`` for DCP: a streaming writer or a ranged reader.

        Args:
            path: object URL.
            mode: ``"wb"`` or ``"rb"``.

        Yields:
            The file object; a writer publishes only if the block succeeds.

        Raises:
            InvalidArgument: a mode other than ``"rb"`` and ``"wb"``.
            NotFound: reading an object that does not exist.
            StorageError: the upload or a read failed.
        """
        store, (bucket, name) = self.locate(path)
        if "w" in mode:
            writer = _RecordingWriter(store, bucket, name, options=self.writer_options)
            with writer:  # aborts, publishing nothing, if the body raises
                yield writer
            self.written[os.fspath(path)] = writer.segments  # for the items' crc32c
        elif "r" in mode:
            with ObjectReader(store, bucket, name) as reader:
                yield reader
        else:
            raise InvalidArgument(f"open {path}: mode must be 'rb' or 'wb', got {mode!r}")

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> str:
        """Join ``suffix`` under ``path`` with ``/``.

        Args:
            path: base URL.
            suffix: relative name.

        Returns:
            The joined URL.
        """
        return f"{str(path).rstrip('/')}/{suffix}"

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        """Move an object (a copy within the store, then delete).

        Args:
            path: source URL.
            new_path: destination URL in the same bucket.

        Raises:
            InvalidArgument: the stores or buckets differ.
        """
        store, source = self.locate(path)
        _, dest = self.locate(new_path)
        if (source.scheme, source.bucket) != (dest.scheme, dest.bucket):
            raise InvalidArgument(f"rename {source} -> {dest}: not in the same bucket")
        if store.features.compose:
            # GCS has no rename: a one-source compose copies server-side, atomically.
            self._call(store.compose(source.bucket, dest.name, [source.name]))
        else:
            self._call(store.copy(source.bucket, source.name, dest.bucket, dest.name))
        self._call(store.delete(source.bucket, source.name))

    def init_path(self, path: str | os.PathLike[str]) -> str:
        """Validate and normalise a checkpoint root.

        Args:
            path: ``gs://bucket/prefix``, ``s3://bucket/prefix``, ``file:///dir`` or a path.

        Returns:
            Its URL (a path becomes ``file:///...``) without a trailing ``/``.

        Raises:
            InvalidURL: a malformed URL.
            InvalidArgument: no backend for its scheme.
        """
        _, parsed = self.locate(path, require_object=False)
        return str(parsed).rstrip("/")

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        """No-op: object stores have no directories, and the filesystem
        store creates them as it writes.

        Args:
            path: ignored.
        """

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether ``checkpoint_id`` is a ``gs://``, ``s3://`` or ``file://`` URL or a path.

        Args:
            checkpoint_id: what DCP was given.

        Returns:
            True if these classes can store it.
        """
        try:
            return parse_url(os.fspath(checkpoint_id)).scheme in SCHEMES
        except (InvalidURL, TypeError):
            return False

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether the object exists.

        Args:
            path: object URL.

        Returns:
            True if it exists.
        """
        store, (bucket, name) = self.locate(path)
        return bool(self._call(store.exists(bucket, name)))

    def rm_file(self, path: str | os.PathLike[str]) -> None:
        """Delete an object (missing is fine).

        Args:
            path: object URL.
        """
        store, (bucket, name) = self.locate(path)
        self._call(store.delete(bucket, name, missing_ok=True))

    def ls(self, path: str | os.PathLike[str]) -> list[str]:
        """Names directly under ``path``.

        Args:
            path: prefix URL.

        Returns:
            Object URLs under the prefix.
        """
        store, parsed = self.locate(path, require_object=False)
        bucket, prefix = parsed
        prefix = prefix.rstrip("/") + "/" if prefix else ""

        async def names() -> list[str]:
            return [format_url(parsed.scheme, bucket, o.name)
                    async for o in store.list_objects(bucket, prefix)]

        return list(self._call(names()))


def _zstd_extensions(compression: str | None, extensions: Sequence[Any] | None) -> Any:
    if compression is None:
        return extensions
    if compression != "zstd":
        raise InvalidArgument(f"compression must be None or 'zstd', got {compression!r}")
    from torch.distributed.checkpoint._extension import ZStandard

    return [*(extensions or ()), ZStandard()]


class GcsStorageWriter(FileSystemWriter):
    """DCP ``StorageWriter`` for ``gs://``, ``s3://``, ``file://`` and path checkpoint
    directories.

    Works with ``dcp.save`` and ``dcp.async_save`` (it is a
    ``BlockingAsyncStager``: state is staged to CPU before the background save).

    Args:
        path: ``gs://bucket/prefix``, ``s3://bucket/prefix``, ``file:///dir`` or a path.
        client: the store for paths of its scheme (see :class:`GcsFileSystem`).
        compression: ``None`` or ``"zstd"`` (DCP's zstd stream extension).
        single_file_per_rank: one object per rank (else one per item).
        thread_count: DCP writer threads per rank.
        writer: part size and parts in flight per object.
        **kwargs: passed to ``FileSystemWriter`` (e.g. ``_extensions``,
            ``cache_staged_state_dict``, ``overwrite``).
    """

    def __init__(self, path: str | os.PathLike[str], *, client: AnyClient | None = None,
                 compression: str | None = None, single_file_per_rank: bool = True,
                 thread_count: int = 1, writer: WriterOptions | None = None,
                 **kwargs: Any) -> None:
        kwargs["_extensions"] = _zstd_extensions(compression, kwargs.get("_extensions"))
        # No fsync by DCP: an object exists only once complete (the
        # filesystem store fsyncs each file before it renames it into place).
        kwargs.setdefault("sync_files", False)
        super().__init__(os.devnull, single_file_per_rank=single_file_per_rank,
                         thread_count=thread_count, **kwargs)
        self.fs = GcsFileSystem(client, writer=writer)  # type: ignore[assignment]
        self.path = self.fs.init_path(path)  # type: ignore[assignment]

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether DCP may hand this ``checkpoint_id`` to this class.

        Args:
            checkpoint_id: a ``gs://``, ``s3://`` or ``file://`` URL, or a path.

        Returns:
            True for the URLs and paths :class:`GcsFileSystem` serves.
        """
        return GcsFileSystem.validate_checkpoint_id(checkpoint_id)

    # A save into an existing checkpoint replaces its data files one by one
    # and its metadata last: a save that dies in between would leave the old
    # metadata vouching for a mix of both saves' files (same shapes, same
    # offsets), which loads without an error. So the old metadata goes first:
    # an interrupted re-save leaves no checkpoint, never a mixed one.

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """DCP's local plan; a rank that writes its own metadata deletes its old one first.

        Args:
            plan: this rank's plan.

        Returns:
            The plan, as DCP's ``FileSystemWriter`` makes it.

        Raises:
            RuntimeError: the checkpoint exists and ``overwrite`` is off (DCP's check).
            StorageError: deleting the old metadata failed.
        """
        plan = super().prepare_local_plan(plan)  # refuses an existing one unless overwrite
        if not self.use_collectives and self.rank is not None:
            # Each rank writes only its own files and metadata.
            self._forget_metadata(f"__{self.rank}{_METADATA}")
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """DCP's global plan, after deleting the checkpoint's old ``.metadata``.

        An interrupted re-save into the same ``checkpoint_id`` then leaves no
        checkpoint, never the old metadata over a mix of two saves' files.

        Args:
            plans: every rank's local plan.

        Returns:
            The plans, as DCP's ``FileSystemWriter`` makes them.

        Raises:
            StorageError: deleting the old metadata failed.
        """
        # The coordinator, after every rank's local plan, before any data file.
        self._forget_metadata(_METADATA)
        return super().prepare_global_plan(plans)

    def _forget_metadata(self, filename: str) -> None:
        for name in (filename, filename + _ITEM_CRCS):  # none there is fine
            self.fs.rm_file(self.fs.concat_path(self.path, name))

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> TorchFuture[list[WriteResult]]:
        """DCP's ``write_data``, each result carrying its item's crc32c.

        Its items are written without torch's zip CRC32 (see ``_zip_crc``):
        each item's crc32c, checked on load, covers the same bytes.

        Args:
            plan: this rank's final plan.
            planner: DCP's planner, which resolves each item's data.

        Returns:
            A completed future of the write results (the data is written
            when it returns).

        Raises:
            StorageError: an object could not be written.
        """
        with without_zip_crc32():
            written = super().write_data(plan, planner).wait()  # written before it returns
        fs: GcsFileSystem = self.fs  # type: ignore[assignment]
        files: dict[str, _Segments | None] = {}
        results = []
        for result in written:
            info = result.storage_data
            url = os.fspath(fs.concat_path(self.path, info.relative_path))
            if url not in files:
                files[url] = fs.written.pop(url, None)
            segments = files[url]
            crc = None if segments is None else segments.item_crc32c(info.offset, info.length)
            results.append(WriteResult(result.index, result.size_in_bytes, _CheckedStorageInfo(
                info.relative_path, info.offset, info.length, info.transform_descriptors, crc)))
        done: TorchFuture[list[WriteResult]] = TorchFuture()
        done.set_result(results)
        return done

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Write the items' crc32c (``.metadata.crc32c``), then DCP's
        ``.metadata`` with plain storage infos, last.

        Args:
            metadata: DCP's checkpoint metadata.
            results: every rank's write results.

        Raises:
            StorageError: a metadata object could not be written.
        """
        crcs: dict[str, dict[str, str]] = {}
        plain: list[list[WriteResult]] = []
        for rank_results in results:
            plain.append([])
            for result in rank_results:
                info = result.storage_data
                if isinstance(info, _CheckedStorageInfo):
                    if info.crc32c is not None:
                        crcs.setdefault(info.relative_path, {})[
                            f"{info.offset}:{info.length}"] = encode_crc32c(info.crc32c)
                    info = _StorageInfo(info.relative_path, info.offset, info.length,
                                        info.transform_descriptors)
                plain[-1].append(WriteResult(result.index, result.size_in_bytes, info))
        rank_local = not self.use_collectives and self.rank is not None
        name = (f"__{self.rank}{_METADATA}" if rank_local else _METADATA) + _ITEM_CRCS
        # The save_id super().finish() puts in the metadata's storage_meta
        # (a new one per save: DCP resets the writer before each).
        save_id = getattr(self, "save_id", None)
        with self.fs.create_stream(self.fs.concat_path(self.path, name), "wb") as out:
            out.write(json.dumps({"format": 2, "save_id": save_id, "items": crcs}).encode())
        super().finish(metadata, plain)


class GcsStorageReader(FileSystemReader):
    """DCP ``StorageReader`` for ``gs://``, ``s3://``, ``file://`` and path checkpoint
    directories.

    Each plan item is one ranged GET of exactly its bytes; up to
    ``items_ahead`` of them are in flight ahead of the one being loaded, as
    long as the items in flight (that one included) hold at most
    ``bytes_ahead``. DCP's zstd stream extension is recognised from the
    metadata.

    Args:
        path: ``gs://bucket/prefix``, ``s3://bucket/prefix``, ``file:///dir`` or a path.
        client: the store for paths of its scheme (see :class:`GcsFileSystem`).
        items_ahead: plan items fetched ahead.
        bytes_ahead: most bytes of plan items in flight (default 128 MiB);
            the item being loaded is fetched whatever its size.
        **kwargs: passed to ``FileSystemReader``.

    Raises:
        InvalidArgument: ``bytes_ahead`` is not an int >= 1.
    """

    def __init__(self, path: str | os.PathLike[str], *, client: AnyClient | None = None,
                 items_ahead: int = DEFAULT_ITEMS_AHEAD,
                 bytes_ahead: int = DEFAULT_BYTES_AHEAD, **kwargs: Any) -> None:
        check_int("GcsStorageReader", "bytes_ahead", bytes_ahead, minimum=1)
        super().__init__(os.devnull, **kwargs)
        self.fs = GcsFileSystem(client)  # type: ignore[assignment]
        self.path = self.fs.init_path(path)  # type: ignore[assignment]
        self.items_ahead = max(items_ahead, 1)
        self.bytes_ahead = bytes_ahead
        self._queue: collections.deque[tuple[str, int, int]] = collections.deque()
        self._inflight: dict[tuple[str, int, int], Future[Fetched]] = {}
        self._handed: io.BytesIO | None = None
        self._loading: str | None = None  # the data file of the item being loaded
        # Per data file read: its metadata, and the crc32c of each range.
        self._ranges: dict[str, tuple[ObjectInfo, dict[tuple[int, int], int]]] = {}
        # (relative path, offset, length) -> crc32c, from ``.metadata.crc32c``.
        self._item_crcs: dict[tuple[str, int, int], int] = {}
        # The save the metadata being loaded is of (its storage_meta's save_id).
        self._save_id: str | None = None

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool,
                              *args: Any, **kwargs: Any) -> None:
        """DCP's set-up, keeping which save the metadata is of.

        Args:
            metadata: the checkpoint's metadata (from ``read_metadata``).
            is_coordinator: whether this rank coordinates.
            *args: passed to ``FileSystemReader``.
            **kwargs: passed to ``FileSystemReader``.
        """
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)
        self._save_id = getattr(metadata.storage_meta, "save_id", None)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether DCP may hand this ``checkpoint_id`` to this class.

        Args:
            checkpoint_id: a ``gs://``, ``s3://`` or ``file://`` URL, or a path.

        Returns:
            True for the URLs and paths :class:`GcsFileSystem` serves.
        """
        return GcsFileSystem.validate_checkpoint_id(checkpoint_id)

    def _fetch(self, key: tuple[str, int, int]) -> Future[Fetched]:
        future = self._inflight.get(key)
        if future is None:
            store, (bucket, name) = self.fs.locate(key[0])  # type: ignore[attr-defined]
            future = get_portal().submit(store.fetch(bucket, name, start=key[1],
                                                     end=key[1] + key[2], want_crc=True))
            self._inflight[key] = future
        return future

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> TorchFuture[None]:
        """Load the plan's items: ranged GETs read ahead, each item checked.

        Each item's bytes are checked against the crc32c the writer
        recorded; a load that reads every item of a data file also checks
        their combined crc32c against the file's.

        Args:
            plan: this rank's load plan.
            planner: DCP's planner, which takes each item's bytes.

        Returns:
            A completed future (the items are loaded when it returns).

        Raises:
            ChecksumMismatch: an item's or a data file's bytes differ.
            StorageError: a read failed.
        """
        # Replay DCP's own iteration order (grouped by file, plan order within)
        # so the ranges can be fetched ahead of the item being loaded.
        per_file: dict[str, list[tuple[str, int, int]]] = {}
        for item in plan.items:
            md = self.storage_data[item.storage_index]
            path = str(self.fs.concat_path(self.path, md.relative_path))
            per_file.setdefault(md.relative_path, []).append((path, md.offset, md.length))
        self._queue = collections.deque(k for keys in per_file.values() for k in keys)
        self._ranges = {}
        self._loading = None
        self._item_crcs = self._read_item_crcs()
        try:
            try:
                done = super().read_data(plan, planner)  # reads every item before it returns
            except Exception as exc:
                if self._loading is not None and not isinstance(exc, AiofluxError):
                    # torch failed on an item's bytes ("failed finding central
                    # directory"): a byte flipped in an item's zip framing
                    # fails there before the whole-file check below, so the
                    # file is read through once (crc32c checked) to tell a
                    # corrupt file (ChecksumMismatch) from any other failure.
                    self._check_file(self._loading)
                raise
            self._check_whole_files()
            return done
        finally:
            for future in self._inflight.values():
                future.cancel()
            self._inflight.clear()
            self._queue.clear()
            self._ranges = {}
            self._release()

    def _read_item_crcs(self) -> dict[tuple[str, int, int], int]:
        """The items' crc32c the writer recorded; none for a checkpoint
        saved without them (by torch's writer, or an older aioflux)."""
        url = os.fspath(self.fs.concat_path(self.path, _METADATA + _ITEM_CRCS))
        store, (bucket, name) = self.fs.locate(url)  # type: ignore[attr-defined]
        try:
            raw = get_portal().call(store.read(bucket, name))
        except NotFound:
            return {}
        try:
            doc = json.loads(raw)
            items = doc["items"]
            crcs = {(path, int(offset), int(length)): decode_crc32c(crc)
                    for path, ranges in items.items()
                    for key, crc in ranges.items()
                    for offset, length in [key.split(":")]}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ChecksumMismatch(f"dcp.load {url} failed: not the items' crc32c a "
                                   f"GcsStorageWriter writes ({type(exc).__name__})",
                                   operation="read", bucket=bucket, name=name) from exc
        if doc.get("save_id") is not None:
            # Another save's (see _ITEM_CRCS): its crc32c are of bytes a
            # later writer replaced, and would fail a valid checkpoint.
            return crcs if doc["save_id"] == self._save_id else {}
        # Written before the tie (format 1, older aioflux): it cannot say
        # which save it is of. Used only if every item it lists is one of
        # the metadata's (offset and length alike), as a stale one of
        # another layout is not; one of the same layout is used as before
        # (the price of still checking every checkpoint older aioflux
        # wrote, and the only case a later writer's save can trip over).
        saved = {(info.relative_path, info.offset, info.length)
                 for info in self.storage_data.values()}
        return crcs if crcs.keys() <= saved else {}

    def _check_file(self, url: str) -> None:
        store, (bucket, name) = self.fs.locate(url)  # type: ignore[attr-defined]
        with ObjectReader(store, bucket, name) as reader:  # bounded read-ahead
            while reader.read(_CHECK_CHUNK):
                pass  # its last read raises ChecksumMismatch if the crc32c differs

    def _check_whole_files(self) -> None:
        """The crc32c of each data file whose ranges this load read tile it
        whole, against the file's: ranged reads carry no checksum of their
        own, while the store states each object's (``ChecksumMismatch`` if
        the bytes DCP loaded, or a file replaced between ranges, differ)."""
        for url, (info, ranges) in self._ranges.items():
            if info.crc32c is None:
                continue  # nothing to check against
            at, combined = 0, 0
            for (offset, length), crc in sorted(ranges.items()):
                if offset != at:
                    break  # a partial load (resharding): its ranges leave gaps
                combined = crc32c_combine(combined, crc, length) if at else crc
                at += length
            else:
                if at == info.size and combined != info.crc32c:
                    raise ChecksumMismatch(
                        f"dcp.load {url} failed: the {len(ranges)} ranges read have crc32c "
                        f"{encode_crc32c(combined)}, the file's is "
                        f"{encode_crc32c(info.crc32c)}", operation="read",
                        bucket=info.bucket, name=info.name)

    @staticmethod
    def _short(info: ObjectInfo, needed: int, have: int) -> ChecksumMismatch:
        return ChecksumMismatch(
            f"dcp.load {info.url} failed: the "
            f"checkpoint's metadata needs its bytes up to {needed}, it ends at {have} "
            "(truncated)", operation="read", bucket=info.bucket, name=info.name)

    def _release(self) -> None:
        # DCP's loop still names the slice it loaded last while it asks for
        # the next one: closing it frees that item's bytes before the next
        # item's arrive (8 x 48 MiB items: 195 MiB peak growth with one item
        # in flight, 147 MiB closed; torch's reader 97 MiB). DCP is done with
        # it by then: what it loads from a slice it copies out first.
        if self._handed is not None:
            self._handed.close()
            self._handed = None

    def _slice_file(self, file: Any, sinfo: Any) -> IO[bytes]:
        if not isinstance(file, ObjectReader):
            return super()._slice_file(file, sinfo)
        key = (file.url, sinfo.offset, sinfo.length)
        self._loading = file.url
        info = file.info
        if sinfo.offset + sinfo.length > info.size:
            # A data file cut short after the save: a ranged read past its
            # end returns the bytes that are left (or HTTP 416), and torch
            # then fails with an unpickling or zip error, not a typed one.
            raise self._short(info, sinfo.offset + sinfo.length, info.size)
        while self._queue and self._queue[0] != key:
            self._queue.popleft()  # out of step with DCP's order: resynchronise
        if self._queue:
            self._queue.popleft()
        self._release()
        current = self._fetch(key)
        held = sum(length for _, _, length in self._inflight)
        for ahead in itertools.islice(self._queue, self.items_ahead):
            if ahead not in self._inflight:
                if held + ahead[2] > self.bytes_ahead:
                    break  # in plan order: a large item is not overtaken by smaller ones
                self._fetch(ahead)
                held += ahead[2]
        fetched = current.result()
        self._inflight.pop(key, None)
        assert fetched.data is not None and fetched.crc is not None
        if len(fetched.data) != sinfo.length:  # cut short since its stat
            raise self._short(info, sinfo.offset + sinfo.length, sinfo.offset + len(fetched.data))
        expected = self._item_crcs.get((sinfo.relative_path, sinfo.offset, sinfo.length))
        if expected is not None and fetched.crc != expected:
            # Checked per item: a load of some items of a file (the model
            # without the optimizer) never tiles it for the whole-file check.
            raise ChecksumMismatch(
                f"dcp.load {info.url} failed: bytes {sinfo.offset}-"
                f"{sinfo.offset + sinfo.length} have crc32c {encode_crc32c(fetched.crc)}, the "
                f"item was saved with {encode_crc32c(expected)}", operation="read",
                bucket=info.bucket, name=info.name)
        self._ranges.setdefault(file.url, (file.info, {}))[1][key[1:]] = fetched.crc
        self._handed = io.BytesIO(fetched.data)
        return self._handed
