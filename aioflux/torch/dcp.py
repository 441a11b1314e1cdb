"""``torch.distributed.checkpoint`` storage for ``gs://``, ``s3://``, ``file://`` and path
checkpoints.

:class:`DcpWriter` and :class:`DcpReader` plug aioflux's
streaming writer and ranged reads into DCP's file-system layout, so
``dcp.save``, ``dcp.async_save`` and ``dcp.load`` work with
``checkpoint_id="gs://bucket/run/step-100"`` (or ``file:///mnt/nfs/run``,
or a path: each path's scheme picks its store). Each data file is a
streaming upload, published only when complete; the ``.metadata`` file is
written last, straight to its name (not DCP's temporary name and rename:
a copy and a delete on a store), and a save into an existing checkpoint
deletes the old one first, so an interrupted re-save leaves no checkpoint
rather than a mix of two. On files, the metadata's publish fsyncs the
directory once for every file of the save (``_dcp_file``).
Reads fetch exactly each plan item's
byte range, several items ahead within a byte budget, instead of streaming
whole files, each at the version of its file the load's one stat of it
found (``_dcp_pins``: a file replaced mid-load is a ``PreconditionFailed``,
never items of two versions). Each item's bytes must have the crc32c the writer recorded as
it wrote them (``.metadata.crc32c``, written just before ``.metadata``, or
``__<rank>.metadata.crc32c`` beside a rank's own metadata: ``_dcp_crc``),
so a load of some items (the model without the optimizer) is checked too;
and where a load's ranges cover a whole data file (a full load), their
crc32c combine and must equal the file's (for checkpoints without the
items' crc32c: torch's writer, older aioflux). DCP's zstd stream extension
(``compression="zstd"`` or ``_extensions=[ZStandard()]``)
is accepted on both sides.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import itertools
import os
import pickle
import sys
import threading
import weakref
from collections.abc import Generator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

import torch
from torch.distributed.checkpoint import filesystem as dcp_filesystem
from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    FileSystemReader,
    FileSystemWriter,
)
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
)
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future as TorchFuture

from .._api.stores import AnyClient, store_for_url
from .._api.sync import Client
from .._core.checks.arguments import check_instance, check_int
from .._core.concurrency.portal import get_portal
from .._core.concurrency.share import cpus, pool_threads
from .._core.deprecation import warn_deprecated
from .._core.errors import AiofluxError, InvalidArgument, InvalidURL, NotFound, StorageError
from .._core.records.types import ObjectInfo
from .._core.records.urls import SCHEMES, StoreURL, format_url, parse_url
from .._core.settings.options import WriterOptions
from .._core.storage.protocol import Fetched, ObjectStore
from .._engines.reader import ObjectReader
from ..local._reader import FileReader
from .checkpoint._dcp_crc import (
    ITEM_CRCS,
    CheckedStorageInfo,
    RecordingWriter,
    Segments,
    check_tiled_files,
    decode_item_crcs,
    encode_item_crcs,
    item_mismatch,
    metadata_name,
    split_item_crcs,
    truncated,
)
from .checkpoint._dcp_direct import HeldItem, load_item, staging_for
from .checkpoint._dcp_file import RecordingFileWriter
from .checkpoint._dcp_pins import PinnedFiles, changed
from .checkpoint._dcp_stage import (
    cached_state,
    copy_into,
    fresh_copy,
    layout,
    staged_nbytes,
    tensors,
    wants_cache,
)
from .checkpoint._dcp_threads import ended_on_failure
from .checkpoint._dcp_turns import LOADER, SAVER, Turns, holds, on_stack
from .checkpoint._device_load import DeviceStager
from .checkpoint._zip_crc import without_zip_crc32

__all__ = ["DcpReader", "DcpWriter", "GcsFileSystem"]

# Plan items fetched ahead of the one DCP is reading.
DEFAULT_ITEMS_AHEAD = 8
# Most bytes of plan items in flight, the one DCP waits for included (it
# always goes, however large): what a checkpoint's streaming reader holds
# ahead (ReaderOptions: 32 blocks of 4 MiB). Loading 8 items of 48 MiB from
# file:// (a few runs each) raised peak RSS by 530-626 MiB with all 8 in
# flight, 339-434 MiB within 256 MiB, 195-243 MiB within 128 MiB and 147 MiB
# one at a time; torch's own reader, reading straight from the file, 97 MiB.
DEFAULT_BYTES_AHEAD = 128 * 1024 * 1024

# DCP's steps of a save (load) that take the turn, in DCP's order (see
# _dcp_turns.Turns.take: a step out of this order starts the next save).
_RESET, _METADATA, _SET_UP, _READ = 0, 1, 2, 3


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
        # Data files written, by URL: their items' crc32c (DcpWriter
        # takes each out once the save's results name its items).
        self.written: dict[str, Segments] = {}
        # Why data files failed: DCP's writer threads past the first drop
        # their exceptions (threading.excepthook), so DcpWriter
        # names them from here.
        self.failures: list[BaseException] = []
        # While a load reads (DcpReader.read_data): the version of
        # each data file it reads, which opening one for reading takes.
        self.pinned: PinnedFiles | None = None

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
            A reader opened while a load reads (:attr:`pinned`) is at the
            version of the file the load reads.

        Raises:
            InvalidArgument: a mode other than ``"rb"`` and ``"wb"``.
            NotFound: reading an object that does not exist.
            StorageError: the upload or a read failed.
        """
        store, (bucket, name) = self.locate(path)
        if "w" in mode:
            # A file: written straight into it, in this thread (_dcp_file.py).
            writer: RecordingWriter | RecordingFileWriter = (
                RecordingFileWriter(bucket, name) if store.features.local_files
                else RecordingWriter(store, bucket, name, options=self.writer_options))
            try:
                with writer:  # aborts, publishing nothing, if the body raises
                    yield writer
            except BaseException as exc:
                self.failures.append(exc)
                raise
            self.written[os.fspath(path)] = writer.segments  # for the items' crc32c
        elif "r" in mode:
            info = None if self.pinned is None else self.pinned.info(store, bucket, name)
            if store.features.local_files:
                # A file's own checked reader: items read straight into
                # torch's tensors, in this thread (aioflux/local/_reader.py).
                with FileReader(bucket, name, info=info,
                                verify=store.config.verify_crc32c) as local:
                    yield local
                return
            with ObjectReader(store, bucket, name, info=info) as reader:
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


def _writer_threads() -> int:
    """``DcpWriter``'s threads by default: one per 4 of this process's CPUs
    (its share of them, beside other processes), 1 to 4.

    Each thread writes files of its own. Writes into one file are one at a
    time (the file's lock), so a rank's bytes reach the page cache, a
    disk or tmpfs, only as fast as one thread can put them there: on a
    16-core GPU node ``dcp.save`` of a 4 GiB state to ``/dev/shm`` from one
    thread took 4.2-4.8 s, torch's and aioflux's alike, and 3.7 s from
    four. A few threads write a few files side by side; on a small machine
    one thread keeps the checksums and the read-back of each piece from
    taking the cores the write needs.
    """
    return pool_threads(min(4, max(1, cpus() // 4)), least=1)


class DcpWriter(FileSystemWriter):
    """DCP ``StorageWriter`` for ``gs://``, ``s3://``, ``file://`` and path checkpoint
    directories.

    Works with ``dcp.save`` and ``dcp.async_save`` (it is a
    ``BlockingAsyncStager``: state is staged to CPU before the background save).
    A writer serves one save at a time: a save through it while another is
    running (an ``async_save`` whose future nobody waited for) waits for that
    one to end before it starts writing, and stages into memory of its own
    while the kept copy is the running save's (see ``_dcp_turns``).

    Args:
        path: ``gs://bucket/prefix``, ``s3://bucket/prefix``, ``file:///dir`` or a path.
        client: the store for paths of its scheme (see :class:`GcsFileSystem`).
        compression: ``None`` or ``"zstd"`` (DCP's zstd stream extension).
        single_file_per_rank: one object per rank (else one per item).
        thread_count: DCP writer threads per rank, each writing files of
            its own (``None``: one per 4 of the process's CPUs, 1 to 4; see
            ``_writer_threads``).
        writer: part size and parts in flight per object.
        cache_staged_state_dict: keep ``dcp.async_save``'s host copy between
            saves, in pinned memory (``None``: for CUDA states), made again
            when the state's tensors or structure change. Its bytes:
            :attr:`staged_nbytes`; :attr:`pin_error` says why it is pageable.
        **kwargs: passed to ``FileSystemWriter`` (e.g. ``_extensions``, ``overwrite``).
    """

    def __init__(self, path: str | os.PathLike[str], *, client: AnyClient | None = None,
                 compression: str | None = None, single_file_per_rank: bool = True,
                 thread_count: int | None = None, writer: WriterOptions | None = None,
                 cache_staged_state_dict: bool | None = None, **kwargs: Any) -> None:
        self._cache_choice = cache_staged_state_dict
        self.pin_error: str | None = None
        self._start_turns()
        # The rank writes the checkpoint's metadata (``finish``): its save
        # ends there, else with ``write_data``.
        self._writes_metadata = True
        # The layout of the state the cache was made for (see _dcp_stage).
        self._cache_layout: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        kwargs["_extensions"] = _zstd_extensions(compression, kwargs.get("_extensions"))
        # No fsync by DCP: an object exists only once complete (the
        # filesystem store fsyncs each file before it renames it into place).
        kwargs.setdefault("sync_files", False)
        super().__init__(os.devnull, single_file_per_rank=single_file_per_rank,
                         thread_count=_writer_threads() if thread_count is None else thread_count,
                         **kwargs)
        self.fs = GcsFileSystem(client, writer=writer)  # type: ignore[assignment]
        self.path = self.fs.init_path(path)  # type: ignore[assignment]

    def _start_turns(self) -> None:
        self._turns = Turns(SAVER)
        self._staging = threading.Lock()
        self._lent: torch.Tensor | None = None  # the kept copy, lent to a save (marker)
        # The staged state the kept copy was lent as: gone, its save is over.
        self._borrower: weakref.ref[_Staged] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process (DCP's process executor) saves on its
        # own: its turns and loan start afresh.
        state = self.__dict__.copy()
        for name in ("_turns", "_staging", "_lent", "_borrower"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start_turns()

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether DCP may hand this ``checkpoint_id`` to this class.

        Args:
            checkpoint_id: a ``gs://``, ``s3://`` or ``file://`` URL, or a path.

        Returns:
            True for the URLs and paths :class:`GcsFileSystem` serves.
        """
        return GcsFileSystem.validate_checkpoint_id(checkpoint_id)

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A save's first step (DCP's, with a ``checkpoint_id``): once no other
        save holds this writer, take it and point it at ``checkpoint_id``.

        Args:
            checkpoint_id: the checkpoint's URL or path (None: the last one).
        """
        with self._turns.step(_RESET):
            super().reset(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """DCP's set-up of a save, once no other save holds this writer.

        Args:
            is_coordinator: this rank writes the checkpoint's metadata
                (every rank does when ranks save without collectives).
            *args: passed to ``FileSystemWriter``.
            **kwargs: passed to ``FileSystemWriter`` (``rank``, ``use_collectives``).
        """
        with self._turns.step(_SET_UP):
            super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        self._writes_metadata = is_coordinator or not kwargs.get("use_collectives", True)

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """``dcp.async_save``'s host copy of ``state_dict`` (see ``_dcp_stage``).

        Args:
            state_dict: the state being saved.

        Returns:
            The copy, complete.
        """
        staged = self._staged(state_dict)
        self._turns.issue(staged)  # this save's place in line, the same on every rank
        return staged

    def _staged(self, state_dict: dict[str, Any]) -> _Staged:
        self.per_thread_copy_ahead = 0  # the state is on the host by now (as torch's)
        if not wants_cache(self._cache_choice, state_dict):
            self.cache_staged_state_dict = False
            self.state_dict_cache = None
            return _Staged(super().stage(state_dict))
        self.cache_staged_state_dict = True
        with self._staging:
            if self._lent is not None and self._borrower is not None and \
                    self._borrower() is not None:
                # The kept copy is a save's that has not read it yet. (A save
                # that failed before its write_data never read it: the loan
                # ends with the save, once DCP has let its state go.)
                return _Staged(fresh_copy(state_dict))
            shape = layout(state_dict)
            if self.state_dict_cache is None or shape != self._cache_layout:
                # Made for this state's layout, again where it changed (see
                # _dcp_stage); the old copy let go first, not held beside the new.
                self.state_dict_cache, self.pin_error = None, None
                self.state_dict_cache, self.pin_error = cached_state(state_dict)
                self._cache_layout = shape
            staged = _Staged(copy_into(state_dict, self.state_dict_cache))
            self._lent = next(iter(tensors(self.state_dict_cache)), None)
            self._borrower = weakref.ref(staged)
            return staged

    @property
    def staged_nbytes(self) -> int:
        """Host bytes the kept staged copy holds (0: none kept)."""
        return staged_nbytes(self.state_dict_cache)

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
        with self._ending_on_failure():
            plan = super().prepare_local_plan(plan)  # refuses an existing one unless overwrite
            rank, use_collectives = _rank_of(self)
            if not use_collectives and rank is not None:
                # Each rank writes only its own files and metadata.
                self._forget_metadata(metadata_name(rank, use_collectives))
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
        with self._ending_on_failure():
            self._forget_metadata(metadata_name(None, True))
            return super().prepare_global_plan(plans)

    @contextmanager
    def _ending_on_failure(self) -> Generator[None, None, None]:
        """A failed step ends its save: the writer is free for the next."""
        try:
            yield
        except BaseException:
            self._end_failed_loan()
            self._turns.give_back()
            raise

    def _end_failed_loan(self) -> None:
        """A save that fails before its write_data never reads the kept copy:
        if it is the save the copy was lent to, the next stage may copy into
        it. The failing save's own frames (DCP's ``save``) hold the state it
        was lent as; the exception's traceback keeps them, and the loan with
        them, until a garbage collection would find the cycle."""
        borrower = None if self._borrower is None else self._borrower()
        if borrower is not None and on_stack(borrower, sys._getframe(1)):
            with self._staging:
                self._lent = self._borrower = None

    def _forget_metadata(self, filename: str) -> None:
        fs: GcsFileSystem = self.fs  # type: ignore[assignment]
        store, (bucket, name) = fs.locate(fs.concat_path(self.path, filename))

        async def forget() -> None:
            # The metadata first: gone, it leaves no checkpoint to vouch
            # for, whatever happens to its items' crc32c. None there is fine.
            for each in (name, name + ITEM_CRCS):
                await store.delete(bucket, each, missing_ok=True)

        get_portal().call(forget())  # one hop to the loop, not one a file

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
        try:
            with self._ending_on_failure():
                results = self._write(plan, planner)
        finally:
            lent = self._lent
            if lent is not None and holds(planner, lent):
                self._lent = None  # read: the next stage may copy into it
        if not self._writes_metadata:
            self._turns.give_back()
        done: TorchFuture[list[WriteResult]] = TorchFuture()
        done.set_result(results)
        return done

    def _write_data(self, planner: SavePlanner,
                    file_queue: Any) -> TorchFuture[list[WriteResult]]:
        # torch's own leaves its other writer threads writing when the
        # calling one fails: see _dcp_threads.
        with ended_on_failure(file_queue):
            return super()._write_data(planner, file_queue)

    def _write(self, plan: SavePlan, planner: SavePlanner) -> list[WriteResult]:
        fs: GcsFileSystem = self.fs  # type: ignore[assignment]
        fs.failures.clear()
        with without_zip_crc32():
            written = super().write_data(plan, planner).wait()  # written before it returns
        _check_all_written(os.fspath(self.path), plan, written, fs.failures)
        files: dict[str, Segments | None] = {}
        results = []
        for result in written:
            info = result.storage_data
            url = os.fspath(fs.concat_path(self.path, info.relative_path))
            if url not in files:
                files[url] = fs.written.pop(url, None)
            segments = files[url]
            crc = None if segments is None else segments.item_crc32c(info.offset, info.length)
            results.append(WriteResult(result.index, result.size_in_bytes, CheckedStorageInfo(
                info.relative_path, info.offset, info.length, info.transform_descriptors, crc)))
        return results

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Write the items' crc32c (``.metadata.crc32c``, or
        ``__<rank>.metadata.crc32c`` when ranks save without collectives),
        then DCP's metadata with plain storage infos, last.

        Args:
            metadata: DCP's checkpoint metadata.
            results: every rank's write results.

        Raises:
            StorageError: a metadata object could not be written.
        """
        try:
            self._finish(metadata, results)
        finally:
            self._turns.give_back()  # the save is done with the writer, written or not

    def _finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        crcs, plain = split_item_crcs(results)
        name = metadata_name(*_rank_of(self))
        # The save_id of the metadata's storage_meta (a new one per save:
        # DCP resets the writer before each).
        save_id = getattr(self, "save_id", None)
        with self.fs.create_stream(self.fs.concat_path(self.path, name + ITEM_CRCS),
                                   "wb") as out:
            out.write(encode_item_crcs(save_id, crcs))
        # What FileSystemWriter.finish puts in the metadata. It writes it
        # under a temporary name and renames it (a copy and a delete here);
        # every object written here is published only once complete, so
        # the metadata goes straight to its own name. (Older torch sets no
        # version, and before 2.4 no storage_meta.)
        version = getattr(dcp_filesystem, "CURRENT_DCP_VERSION", None)
        if version is not None:
            metadata.version = version
        metadata.storage_data = {r.index: r.storage_data for ranks in plain for r in ranks}
        if hasattr(self, "storage_meta"):
            metadata.storage_meta = self.storage_meta()
        with self.fs.create_stream(self.fs.concat_path(self.path, name), "wb") as out:
            pickle.dump(metadata, out)


class _Staged(dict):  # type: ignore[type-arg]
    """The state :meth:`DcpWriter.stage` hands a save, weakly referable: the
    save holds it until it ends, however it ends."""

    __slots__ = ("__weakref__",)


class DcpReader(FileSystemReader):
    """DCP ``StorageReader`` for ``gs://``, ``s3://``, ``file://`` and path checkpoint
    directories.

    From an object store, each plan item is one ranged GET of exactly its
    bytes; up to ``items_ahead`` of them are in flight ahead of the one being
    loaded, as long as the items in flight (that one included) hold at most
    ``bytes_ahead``. From local files, each whole tensor is read from the
    file straight into the state dict's tensor (other items by torch), its
    crc32c worked out as it goes and checked before the next item is read:
    a corrupt item fails the load (``ChecksumMismatch``) after its bytes
    landed in the state dict, which a failed load leaves partly loaded in
    any case. DCP's zstd stream
    extension is recognised from the metadata.

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
        check_int("DcpReader", "bytes_ahead", bytes_ahead, minimum=1)
        super().__init__(os.devnull, **kwargs)
        self.fs = GcsFileSystem(client)  # type: ignore[assignment]
        self.path = self.fs.init_path(path)  # type: ignore[assignment]
        self.items_ahead = max(items_ahead, 1)
        self.bytes_ahead = bytes_ahead
        self._queue: collections.deque[tuple[str, int, int]] = collections.deque()
        self._inflight: dict[tuple[str, int, int], Future[Fetched]] = {}
        self._handed: HeldItem | None = None
        # The item of a local file being loaded, checked once DCP is done with it.
        self._item: tuple[FileReader, Any] | None = None
        self._loading: str | None = None  # the data file of the item being loaded
        # Per data file read: its metadata, and the crc32c of each range.
        self._ranges: dict[str, tuple[ObjectInfo, dict[tuple[int, int], int]]] = {}
        # (relative path, offset, length) -> crc32c, from ``.metadata.crc32c``
        # (or this rank's ``__<rank>.metadata.crc32c``).
        self._item_crcs: dict[tuple[str, int, int], int] = {}
        # The save the metadata being loaded is of (its storage_meta's save_id).
        self._save_id: str | None = None
        # The version of each data file the load reads (see _dcp_pins).
        self._pinned = PinnedFiles()
        # One load at a time: a load's path, metadata and items are this
        # object's (see _dcp_turns).
        self._turns = Turns(LOADER)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_turns", None)  # a copy in another process loads on its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._turns = Turns(LOADER)

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A load's first step (DCP's, with a ``checkpoint_id``): once no
        other load holds this reader, take it and point it at ``checkpoint_id``.

        Args:
            checkpoint_id: the checkpoint's URL or path (None: the last one).
        """
        with self._turns.step(_RESET):
            super().reset(checkpoint_id)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The checkpoint's metadata, read once no other load holds this reader.

        Args:
            *args: passed to ``FileSystemReader``.
            **kwargs: passed to ``FileSystemReader`` (``rank``).

        Returns:
            The checkpoint's metadata.
        """
        # Again where the checkpoint's metadata was not found: this rank's own.
        with self._turns.step(_METADATA, again=True):
            return super().read_metadata(*args, **kwargs)

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool,
                              *args: Any, **kwargs: Any) -> None:
        """DCP's set-up, keeping which save the metadata is of.

        Args:
            metadata: the checkpoint's metadata (from ``read_metadata``).
            is_coordinator: whether this rank coordinates.
            *args: passed to ``FileSystemReader``.
            **kwargs: passed to ``FileSystemReader``.
        """
        with self._turns.step(_SET_UP):
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
            future = self._pinned.fetch(store, bucket, name, key[1], key[1] + key[2])
            self._inflight[key] = future
        return future

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> TorchFuture[None]:
        """Load the plan's items: ranged GETs read ahead, each item checked.

        Each item's bytes are checked against the crc32c the writer
        recorded; a load that reads every item of a data file also checks
        their combined crc32c against the file's. Every read of a data file
        is of one version, the one its first stat found (at most one stat
        per file: the stat its open took anyway).

        Args:
            plan: this rank's load plan.
            planner: DCP's planner, which takes each item's bytes.

        Returns:
            A completed future (the items are loaded when it returns).

        Raises:
            ChecksumMismatch: an item's or a data file's bytes differ.
            PreconditionFailed: a data file changed (or was deleted) during
                the load, after its first stat: its items would mix two
                versions (a checkpoint torch's writer wrote has no items'
                crc32c to catch it).
            StorageError: a read failed.
        """
        self._turns.take(_READ)  # the load's earlier steps took it, as a rule
        self._ranges = {}
        self._loading = None
        fs: GcsFileSystem = self.fs  # type: ignore[assignment]
        fs.pinned = self._pinned  # DCP's opens of the data files: at the load's versions
        try:
            self._item_crcs = self._read_item_crcs()
            try:
                rest = self._load_tensors(plan, planner)
                self._queue = self._replay(rest)
                done = super().read_data(rest, planner)  # reads every item before it returns
            except Exception as exc:
                if self._loading is not None and not isinstance(exc, AiofluxError):
                    # torch failed on an item's bytes ("failed finding central
                    # directory"): a byte flipped in an item's zip framing
                    # fails there before the whole-file check below, so the
                    # file is read through once (crc32c checked, at the
                    # version loaded) to tell a corrupt file
                    # (ChecksumMismatch) from any other failure.
                    store, (bucket, name) = self.fs.locate(  # type: ignore[attr-defined]
                        self._loading)
                    self._pinned.check_whole_file(store, bucket, name)
                raise
            self._finish_item()
            check_tiled_files(self._ranges)
            return done
        finally:
            if self._item is not None:
                self._item[0].close()
                self._item = None
            fs.pinned = None
            for future in self._inflight.values():
                future.cancel()
            self._inflight.clear()
            self._pinned.clear()
            self._queue.clear()
            self._ranges = {}
            self._release()
            self._turns.give_back()  # the load is done with the reader, read or not

    def _replay(self, plan: LoadPlan) -> collections.deque[tuple[str, int, int]]:
        """The keys of ``plan``'s items in DCP's own iteration order (grouped
        by file, plan order within), so that ranges are fetched ahead of
        the item being loaded."""
        per_file: dict[str, list[tuple[str, int, int]]] = {}
        for item in plan.items:
            md = self.storage_data[item.storage_index]
            path = str(self.fs.concat_path(self.path, md.relative_path))
            per_file.setdefault(md.relative_path, []).append((path, md.offset, md.length))
        return collections.deque(k for keys in per_file.values() for k in keys)

    def _load_tensors(self, plan: LoadPlan, planner: LoadPlanner) -> LoadPlan:
        """Load the plan's tensor items, each into its destination tensor's
        own memory where it can be (see ``_dcp_direct``), every item checked
        as DCP's loop would check it: a local file's item read straight from
        the file, an object's from its bytes fetched ahead.

        Returns:
            The plan of the items left to DCP's own loop (bytes, items of a
            transform such as zstd).
        """
        mine = [req for req in plan.items if req.type == LoadItemType.TENSOR
                and not getattr(self.storage_data[req.storage_index],
                                "transform_descriptors", None)]  # no zstd, say
        taken = {id(req) for req in mine}
        rest = dataclasses.replace(plan, items=[r for r in plan.items if id(r) not in taken])
        per_file: dict[str, list[Any]] = {}
        for req in mine:
            sinfo = self.storage_data[req.storage_index]
            per_file.setdefault(str(self.fs.concat_path(self.path, sinfo.relative_path)),
                                []).append(req)
        self._queue = self._replay(dataclasses.replace(plan, items=mine))
        stagers: dict[torch.device, DeviceStager] = {}
        try:
            for path, reqs in per_file.items():
                with self.fs.create_stream(path, "rb") as stream:
                    for req in reqs:
                        sinfo = self.storage_data[req.storage_index]
                        if isinstance(stream, FileReader):
                            item: FileReader | HeldItem = self._local_item(stream, sinfo)
                        else:
                            assert isinstance(stream, ObjectReader)  # create_stream's other
                            item = self._fetched_item(stream, sinfo)
                        target = planner.resolve_tensor(req).detach()
                        stager = staging_for(target, stagers)
                        load_item(item, req, target, stager)
                        if stager is not None:
                            stager.order()  # what the planner queues sees the bytes
                        planner.commit_tensor(req, target)
                self._release()
        finally:
            for stager in stagers.values():
                stager.finish()  # the loaded tensors complete, also on failure
        return rest

    def _read_item_crcs(self) -> dict[tuple[str, int, int], int]:
        """The items' crc32c the writer recorded beside the metadata being
        loaded (the checkpoint's, or this rank's when ranks saved without
        collectives); none for a checkpoint saved without them (by torch's
        writer, or an older aioflux)."""
        metadata = metadata_name(*_rank_of(self))
        url = os.fspath(self.fs.concat_path(self.path, metadata + ITEM_CRCS))
        store, (bucket, name) = self.fs.locate(url)  # type: ignore[attr-defined]
        try:
            raw = get_portal().call(store.read(bucket, name))
        except NotFound:
            return {}
        saved = {(info.relative_path, info.offset, info.length)
                 for info in self.storage_data.values()}
        return decode_item_crcs(raw, url=url, bucket=bucket, name=name, save_id=self._save_id,
                                saved=saved)

    def _release(self) -> None:
        # DCP's loop still names the slice it loaded last while it asks for
        # the next one: closing it frees that item's bytes before the next
        # item's arrive (8 x 48 MiB items: 195 MiB peak growth with one item
        # in flight, 147 MiB closed; torch's reader 97 MiB). DCP is done with
        # it by then: what it loads from a slice it copies out first.
        if self._handed is not None:
            self._handed.close()
            self._handed = None

    def _finish_item(self) -> None:
        """Check the local item DCP loaded last (see :meth:`_local_item`)."""
        if self._item is None:
            return
        item, sinfo = self._item
        self._item = None
        try:
            gone = item.modified()
            if gone is not None:
                raise changed(item.info, gone) from gone
            crc = item.finish()
        finally:
            item.close()
        if crc is None:
            return  # verify_crc32c off
        expected = self._item_crcs.get((sinfo.relative_path, sinfo.offset, sinfo.length))
        if expected is not None and crc != expected:
            raise item_mismatch(item.info, sinfo.offset, sinfo.length, crc, expected)
        self._ranges.setdefault(item.url, (item.info, {}))[1][
            (sinfo.offset, sinfo.length)] = crc

    def _local_item(self, file: FileReader, sinfo: Any) -> FileReader:
        """An item of a local file: read straight from the file, its
        crc32c worked out as it is read and checked once the next item is
        asked for (or the load ends), before ``dcp.load`` returns. Nothing
        is fetched ahead into memory: the kernel reads ahead on its own."""
        self._finish_item()
        info = file.info
        gone = file.modified()
        if gone is not None:
            # Rewritten in place since the load opened it (a rename over it
            # leaves the open file as it was): its items would be of two versions.
            raise changed(info, gone) from gone
        if sinfo.offset + sinfo.length > info.size:
            raise truncated(info, sinfo.offset + sinfo.length, info.size)
        self._loading = file.url
        item = file.item(sinfo.offset, sinfo.length)
        self._item = (item, sinfo)
        return item

    def _slice_file(self, file: Any, sinfo: Any) -> IO[bytes]:
        if isinstance(file, FileReader):
            return self._local_item(file, sinfo)  # type: ignore[return-value]
        if not isinstance(file, ObjectReader):
            return super()._slice_file(file, sinfo)
        return self._fetched_item(file, sinfo)

    def _fetched_item(self, file: ObjectReader, sinfo: Any) -> HeldItem:
        """An item of an object: its bytes, fetched (with the next items'
        ahead, in DCP's order) and checked against the crc32c its writer
        recorded."""
        key = (file.url, sinfo.offset, sinfo.length)
        self._loading = file.url
        info = file.info
        if sinfo.offset + sinfo.length > info.size:
            # A data file cut short after the save: a ranged read past its
            # end returns the bytes that are left (or HTTP 416), and torch
            # then fails with an unpickling or zip error, not a typed one.
            raise truncated(info, sinfo.offset + sinfo.length, info.size)
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
            raise truncated(info, sinfo.offset + sinfo.length, sinfo.offset + len(fetched.data))
        expected = self._item_crcs.get((sinfo.relative_path, sinfo.offset, sinfo.length))
        if expected is not None and fetched.crc != expected:
            # Checked per item: a load of some items of a file (the model
            # without the optimizer) never tiles it for the whole-file check.
            raise item_mismatch(info, sinfo.offset, sinfo.length, fetched.crc, expected)
        self._ranges.setdefault(file.url, (file.info, {}))[1][key[1:]] = fetched.crc
        self._handed = HeldItem(fetched.data)
        return self._handed


def _rank_of(storage: object) -> tuple[int | None, bool]:
    """``(rank, use_collectives)`` DCP's set-up gave a writer or reader:
    ``(None, True)`` on torch before rank-local saves (2.9), whose set-up
    sets neither."""
    return getattr(storage, "rank", None), getattr(storage, "use_collectives", True)


def _check_all_written(root: str, plan: SavePlan, written: list[WriteResult],
                       failures: list[BaseException]) -> None:
    """Raise unless every item of ``plan`` has a write result.

    DCP writes a rank's files from ``thread_count`` threads and gathers the
    results; a file failing in any thread but the caller's ends that
    thread with its exception unseen (torch prints it and goes on), so the
    save returned normally and published metadata without those items.

    Raises:
        StorageError: items were not written (chained to the first failure
            seen); the save fails, so no metadata is published.
    """
    done = {result.index for result in written}
    missing = [item for item in plan.items if item.index not in done]
    if not missing:
        return
    cause = failures[0] if failures else None
    why = f": {cause}" if cause is not None else ""
    raise StorageError(
        f"save {root}: {len(missing)} of {len(plan.items)} items were not written (a data "
        f"file failed in one of DCP's writer threads{why}); no metadata is published",
        operation="save") from cause


# The names from before DCP served every store: deprecated (docs/migration/deprecations.md).
_RENAMED = {"GcsStorageWriter": "DcpWriter", "GcsStorageReader": "DcpReader"}
if TYPE_CHECKING:
    GcsStorageWriter = DcpWriter
    GcsStorageReader = DcpReader
else:

    def __getattr__(name: str) -> object:
        new = _RENAMED.get(name)
        if new is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        warn_deprecated(f"aioflux.torch.dcp.{name}", f"aioflux.torch.dcp.{new}")
        return globals()[new]
