"""``Checkpoint``: torch.save / torch.load straight to and from objects of any store.

The writer streams ``torch.save`` output as a multipart upload (bounded
memory, published only on a clean close); the reader serves ``torch.load``
from parallel ranged GETs. Compatible in spirit with dataflux's
``DatafluxCheckpoint`` (``writer(path)`` / ``reader(path)``).
"""

from __future__ import annotations

import os
from typing import IO, Any

import torch

from ..._api.stores import AnyClient, store_for_url
from ..._api.sync import Client
from ..._core.checks.arguments import check_instance, check_str
from ..._core.errors import AiofluxError
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import StoreURL
from ..._core.settings.options import ReaderOptions, WriterOptions
from ..._core.storage.protocol import ObjectStore
from ..._engines.compression import require_zstd, starts_zstd
from ..._engines.reader import ObjectReader
from ..._engines.writer import ObjectWriter
from ...local._file_writer import FileWriter
from ...local._reader import FileReader
from ._device_direct import load_onto
from ._device_load import DeviceStager, cuda_target
from ._safetensors import load_safetensors
from ._zip_crc import without_zip_crc32

__all__ = ["Checkpoint", "raw_writer", "save_into"]


def raw_writer(writer: Any) -> ObjectWriter | FileWriter:
    """The ObjectWriter (or a file's FileWriter) under a (possibly compressing) writer.

    Args:
        writer: what :meth:`Checkpoint.writer` returned.

    Returns:
        The writer that stores the bytes.
    """
    if isinstance(writer, (ObjectWriter, FileWriter)):
        return writer
    return writer.raw  # type: ignore[no-any-return]


class Checkpoint:
    """Saves and loads single checkpoint objects.

    Args:
        client: the store for URLs of its scheme (an ``AsyncClient`` or
            ``Client`` for ``gs://``, a ``LocalStore`` for files); default:
            the process-wide store of each URL's scheme. ``file://`` URLs
            and paths need none.
        writer: part size and parts in flight (memory = part_size x (n + 1)).
        reader: block size and blocks in flight of loads.

    Raises:
        InvalidArgument: a setting of the wrong type.
    """

    def __init__(self, client: AnyClient | None = None, *,
                 writer: WriterOptions | None = None,
                 reader: ReaderOptions | None = None) -> None:
        check_instance("Checkpoint", "client", client, (ObjectStore, Client), optional=True)
        check_instance("Checkpoint", "writer", writer, WriterOptions, optional=True)
        check_instance("Checkpoint", "reader", reader, ReaderOptions, optional=True)
        self._client = client
        # The store given (any scheme): it serves URLs of its own scheme,
        # the process-wide default store serves the others (see locate).
        self.client: ObjectStore | None = client.aio if isinstance(client, Client) else client
        self.writer_options = writer or WriterOptions()
        self.reader_options = reader or ReaderOptions()

    def locate(self, url: str | os.PathLike[str]) -> tuple[ObjectStore, StoreURL]:
        """The store serving ``url`` and the parsed URL.

        Args:
            url: an object URL or a path (``str`` or ``os.PathLike``).

        Returns:
            ``(store, parsed URL)``.

        Raises:
            InvalidURL: a malformed URL or one naming no object.
        """
        return store_for_url(url, self._client, require_object=True)

    def writer(self, url: str | os.PathLike[str], *, compression: str | None = None) -> IO[bytes]:
        """A write-only file for ``url``; publish by closing, abort on error.

        Args:
            url: an object URL (``gs://bucket/name``, ``file:///path``...) or path.
            compression: ``None`` or ``"zstd"``.

        Returns:
            The writer (a context manager).

        Raises:
            InvalidURL: bad URL, or a name ending in ``/`` (a folder's).
            InvalidArgument: unknown compression, or zstd without the
                zstandard package.
        """
        store, (bucket, name) = store_for_url(url, self._client, writing=True)
        if compression is not None:
            check_str(f"save {url}", "compression", compression, choices=("zstd",))
            require_zstd(f"save {url}")
        if compression is None and store.features.local_files:
            # Straight into the file, in this thread (see local/_file_writer.py).
            return FileWriter(bucket, name)  # type: ignore[return-value]
        raw = ObjectWriter(store, bucket, name, options=self.writer_options)
        if compression is None:
            return raw  # type: ignore[return-value]
        from ..._engines.zstd import compress_writer

        return compress_writer(raw)  # type: ignore[return-value]

    def reader(self, url: str | os.PathLike[str], *,
               info: ObjectInfo | None = None) -> ObjectReader:
        """A seekable read-only file for ``url``.

        Args:
            url: an object URL (``gs://bucket/name``, ``file:///path``...) or path.
            info: the object's metadata if known (skips a stat).

        Returns:
            The reader.

        Raises:
            NotFound: no such object.
        """
        store, (bucket, name) = self.locate(url)
        return ObjectReader(store, bucket, name, options=self.reader_options, info=info)

    def save(self, obj: Any, url: str | os.PathLike[str], *,
             compression: str | None = None) -> ObjectInfo:
        """``torch.save(obj)`` to ``url``.

        Args:
            obj: what to save.
            url: an object URL (``gs://bucket/name``, ``file:///path``...) or path.
            compression: ``None`` or ``"zstd"``.

        Returns:
            ObjectInfo of the stored object.

        Raises:
            StorageError: the upload failed (nothing published).
        """
        writer = self.writer(url, compression=compression)
        with writer:
            save_into(obj, writer)
        info = raw_writer(writer).info
        assert info is not None
        return info

    def load(self, url: str | os.PathLike[str], *, map_location: Any = None,
             weights_only: bool = True, compression: str | None = None,
             info: ObjectInfo | None = None) -> Any:
        """``torch.load`` from ``url``; a ``*.safetensors`` object's tensors
        as a dict of name to tensor (``safetensors.torch.load_file``'s).

        Args:
            url: an object URL (``gs://bucket/name``, ``file:///path``...) or path.
            map_location: as for ``torch.load``; a CUDA device's storages
                go through pinned staging buffers, copied to the device
                while the next are read. For safetensors: a device or its name.
            weights_only: as for ``torch.load`` (safetensors hold no code).
            compression: ``None``: found from the object's first bytes (a
                zstd frame's magic number), so a compressed checkpoint loads
                without being told; ``"zstd"``: the object must be zstd. A
                zstd object is decompressed first, since ``torch.load``
                needs to seek: beyond 64 MiB into a temporary file, not memory.
            info: the object's metadata if known.

        Returns:
            The loaded object.

        Raises:
            NotFound: no such object.
            InvalidArgument: an unknown ``compression``, or a zstd object
                without the zstandard package (the message names the extra).
            ChecksumMismatch: a zstd stream that is corrupt or truncated; a
                safetensors header that does not describe the file.
        """
        check_str(f"load {url}", "compression", compression, optional=True, choices=("zstd",))
        if os.fspath(url).endswith(".safetensors"):
            return self._load_safetensors(url, map_location, info)
        device = cuda_target(map_location)
        if device is not None:
            stager = DeviceStager(device)
            try:
                straight = self._load_straight(url, info, stager) \
                    if weights_only and compression is None else None
                if straight is not None:
                    return straight[0]
                return self.load(url, map_location=stager, weights_only=weights_only,
                                 compression=compression, info=info)
            finally:
                stager.finish()
        with self._load_reader(url, info) as reader:
            if compression == "zstd" or starts_zstd(reader):
                require_zstd(f"load {reader.url} (zstd-compressed)")
                from ..._engines.zstd import decompress_seekable

                with decompress_seekable(reader) as plain:
                    return torch.load(plain, map_location=map_location,
                                      weights_only=weights_only)
            try:
                loaded = torch.load(reader, map_location=map_location,  # type: ignore[arg-type]
                                    weights_only=weights_only)
            except AiofluxError:
                raise
            except Exception:
                # torch's own error for bytes it could not parse (a flipped
                # byte in the zip's framing): the object's check says why.
                reader.verify()
                raise
            # torch.load need not read the zip front to back to its end (its
            # central directory is read first): the rest is checked here.
            reader.verify()
            return loaded

    def _load_straight(self, url: str | os.PathLike[str], info: ObjectInfo | None,
                       stager: DeviceStager) -> tuple[Any] | None:
        """A local file's checkpoint read straight onto ``stager``'s device
        (``_device_direct.py``), or None where it is not one that can be."""
        with self._load_reader(url, info) as reader:
            if not isinstance(reader, FileReader) or starts_zstd(reader):
                return None
            try:
                return load_onto(reader, stager)
            except AiofluxError:
                raise
            except Exception:
                reader.verify()  # bytes torch could not parse: the file's check says why
                raise

    def _load_safetensors(self, url: str | os.PathLike[str], map_location: Any,
                          info: ObjectInfo | None) -> dict[str, torch.Tensor]:
        with self._load_reader(url, info) as reader:
            tensors = load_safetensors(reader, reader.url, reader.bucket,
                                       reader.name, map_location)
            reader.verify()  # the bytes the header did not cover, and the crc32c
            return tensors

    def _load_reader(self, url: str | os.PathLike[str],
                     info: ObjectInfo | None) -> ObjectReader | FileReader:
        """What a load reads through: a file's own checked reader on the
        local filesystem (reads straight into torch's tensors, in this
        thread: see ``aioflux/local/_reader.py``), the object reader elsewhere."""
        store, (bucket, name) = self.locate(url)
        if store.features.local_files:
            return FileReader(bucket, name, info=info, verify=store.config.verify_crc32c)
        return ObjectReader(store, bucket, name, options=self.reader_options, info=info)


def save_into(obj: Any, writer: IO[bytes]) -> None:
    """``torch.save(obj, writer)``, raising the writer's own error if it failed.

    When a write raises (an upload that failed for good, a Ctrl-C while it
    waited for an upload slot), torch's zip writer still finishes the
    archive on its way out; that write fails too, with a ``RuntimeError``
    ("unexpected pos ...") that would replace the writer's own error (seen
    under connection cuts in tests/torch/test_chaos.py), and a
    ``KeyboardInterrupt`` would no longer reach the handlers waiting for it.

    torch's zip CRC32 is left out (see ``_zip_crc``): the writer's crc32c
    covers the same bytes, and the CRC32 cost more CPU than the upload.

    Args:
        obj: what to save.
        writer: a writable aioflux object (or any file-like).

    Raises:
        AiofluxError: the upload failed, or the writer refused (what the
            writer raised).
        KeyboardInterrupt: interrupted while writing (likewise SystemExit).
    """
    try:
        with without_zip_crc32():
            torch.save(obj, writer)
    except RuntimeError as exc:
        cause = exc.__context__
        while cause is not None and not _the_writers(cause):
            cause = cause.__context__
        if cause is None:
            raise
        raise cause from None


def _the_writers(error: BaseException) -> bool:
    """An error of the writer's own (not pickling's, which stays as raised),
    or an interrupt, which must stay one."""
    return isinstance(error, AiofluxError) or not isinstance(error, Exception)
