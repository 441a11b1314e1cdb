"""``Checkpoint``: torch.save / torch.load straight to and from gs:// objects.

The writer streams ``torch.save`` output as a multipart upload (bounded
memory, published only on a clean close); the reader serves ``torch.load``
from parallel ranged GETs. Compatible in spirit with dataflux's
``DatafluxCheckpoint`` (``writer(path)`` / ``reader(path)``).
"""

from __future__ import annotations

from typing import IO, Any

import torch

from .._api.open import resolve_client
from .._api.sync import Client
from .._core.errors import InvalidArgument, StorageError
from .._core.types import ObjectInfo
from .._core.urls import parse_url
from .._core.validate import check_instance, check_int
from .._engines.reader import DEFAULT_CHUNK_SIZE, DEFAULT_READ_AHEAD, ObjectReader
from .._engines.writer import DEFAULT_MAX_IN_FLIGHT, DEFAULT_PART_SIZE, ObjectWriter
from ..gcs._client import AsyncClient

__all__ = ["Checkpoint", "raw_writer", "save_into"]


def raw_writer(writer: Any) -> ObjectWriter:
    """The ObjectWriter under a (possibly compressing) writer.

    Args:
        writer: what :meth:`Checkpoint.writer` returned.

    Returns:
        The ObjectWriter.
    """
    return writer if isinstance(writer, ObjectWriter) else writer.raw  # type: ignore[no-any-return]


class Checkpoint:
    """Saves and loads single checkpoint objects.

    Args:
        client: AsyncClient or Client (default: the process-wide client).
        part_size: writer part size.
        max_in_flight: writer parts in flight (memory = part_size x (n + 1)).
        chunk_size: reader bytes per ranged GET.
        read_ahead: reader GETs in flight.

    Raises:
        InvalidArgument: a setting of the wrong type or below 1.
    """

    def __init__(self, client: AsyncClient | Client | None = None, *,
                 part_size: int = DEFAULT_PART_SIZE,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 chunk_size: int = DEFAULT_CHUNK_SIZE,
                 read_ahead: int = DEFAULT_READ_AHEAD) -> None:
        check_instance("Checkpoint", "client", client, (AsyncClient, Client), optional=True)
        for arg, value in (("part_size", part_size), ("max_in_flight", max_in_flight),
                           ("chunk_size", chunk_size), ("read_ahead", read_ahead)):
            check_int("Checkpoint", arg, value, minimum=1)
        self.client = resolve_client(client)
        self.part_size = part_size
        self.max_in_flight = max_in_flight
        self.chunk_size = chunk_size
        self.read_ahead = read_ahead

    def writer(self, url: str, *, compression: str | None = None) -> IO[bytes]:
        """A write-only file for ``url``; publish by closing, abort on error.

        Args:
            url: ``gs://bucket/name``.
            compression: ``None`` or ``"zstd"``.

        Returns:
            The writer (a context manager).

        Raises:
            InvalidURL: bad URL.
            InvalidArgument: unknown compression.
        """
        bucket, name = parse_url(url, require_object=True)
        raw = ObjectWriter(self.client, bucket, name, part_size=self.part_size,
                           max_in_flight=self.max_in_flight)
        if compression is None:
            return raw  # type: ignore[return-value]
        if compression == "zstd":
            from .._engines.zstd import compress_writer

            return compress_writer(raw)  # type: ignore[return-value]
        raw.abort()
        raise InvalidArgument(f"compression must be None or 'zstd', got {compression!r}")

    def reader(self, url: str, *, info: ObjectInfo | None = None) -> ObjectReader:
        """A seekable read-only file for ``url``.

        Args:
            url: ``gs://bucket/name``.
            info: the object's metadata if known (skips a stat).

        Returns:
            The reader.

        Raises:
            NotFound: no such object.
        """
        bucket, name = parse_url(url, require_object=True)
        return ObjectReader(self.client, bucket, name, chunk_size=self.chunk_size,
                            read_ahead=self.read_ahead, info=info)

    def save(self, obj: Any, url: str, *, compression: str | None = None) -> ObjectInfo:
        """``torch.save(obj)`` to ``url``.

        Args:
            obj: what to save.
            url: ``gs://bucket/name``.
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

    def load(self, url: str, *, map_location: Any = None, weights_only: bool = True,
             compression: str | None = None, info: ObjectInfo | None = None) -> Any:
        """``torch.load`` from ``url``.

        Args:
            url: ``gs://bucket/name``.
            map_location: as for ``torch.load``.
            weights_only: as for ``torch.load``.
            compression: ``None`` or ``"zstd"`` (then decompressed in memory,
                since ``torch.load`` needs to seek).
            info: the object's metadata if known.

        Returns:
            The loaded object.

        Raises:
            NotFound: no such object.
        """
        with self.reader(url, info=info) as reader:
            if compression == "zstd":
                from .._engines.zstd import decompress_all

                return torch.load(decompress_all(reader), map_location=map_location,
                                  weights_only=weights_only)
            return torch.load(reader, map_location=map_location,  # type: ignore[arg-type]
                              weights_only=weights_only)


def save_into(obj: Any, writer: IO[bytes]) -> None:
    """``torch.save(obj, writer)``, raising the writer's own error if it failed.

    When a write raises (an upload that failed for good), torch's zip writer
    still finishes the archive on its way out; that write fails too, with a
    ``RuntimeError`` ("unexpected pos ...") that would replace the typed
    storage error (seen under connection cuts in tests/torch/test_chaos.py).

    Args:
        obj: what to save.
        writer: a writable aioflux object (or any file-like).

    Raises:
        StorageError: the upload failed (what the writer raised).
    """
    try:
        torch.save(obj, writer)
    except RuntimeError as exc:
        cause = exc.__context__
        while cause is not None and not isinstance(cause, StorageError):
            cause = cause.__context__
        if cause is None:
            raise
        raise cause from None
