"""``aioflux.open(url, mode)``: file objects over objects of any store.

``"wb"`` returns an :class:`~aioflux._engines.writer.ObjectWriter` (streaming
upload, published only on a clean close), ``"rb"`` an
:class:`~aioflux._engines.reader.ObjectReader` (parallel ranged read-ahead,
seekable). With ``compression="zstd"`` the stream is (de)compressed with
multithreaded zstandard on the way (the read side is then not seekable).
The URL's scheme picks the store (``gs://``, ``file://`` or a path).
"""

from __future__ import annotations

import os
from typing import IO, Any

from .._core.errors import InvalidArgument
from .._core.options import ReaderOptions, WriterOptions
from .._core.store import ObjectStore
from .._core.validate import check_instance, check_metadata, check_str
from .._engines.reader import ObjectReader
from .._engines.writer import ObjectWriter
from .stores import AnyClient, store_for_url
from .sync import Client

__all__ = ["open"]

_WRITE_MODES = ("wb", "w+b", "bw")
_READ_MODES = ("rb", "br", "r")


def open(
    url: str | os.PathLike[str],
    mode: str = "rb",
    *,
    client: AnyClient | None = None,
    writer: WriterOptions | None = None,
    reader: ReaderOptions | None = None,
    compression: str | None = None,
    content_type: str = "application/octet-stream",
    metadata: dict[str, str] | None = None,
) -> IO[bytes]:
    """Open an object as a binary file.

    Args:
        url: ``gs://bucket/name``, ``s3://bucket/key``, ``file:///path`` or
            a path (``str`` or ``os.PathLike``).
        mode: ``"rb"`` or ``"wb"``.
        client: the client for ``gs://`` URLs (default: a process-wide one
            from the environment); files need none.
        writer: part size and parts in flight of a ``"wb"`` file.
        reader: block size and read-ahead of an ``"rb"`` file.
        compression: ``None`` or ``"zstd"`` (needs ``aioflux-storage[zstd]``).
        content_type: Content-Type of a written object.
        metadata: custom metadata of a written object (GCS and S3; files
            have none).

    Returns:
        A file object; use it as a context manager. For ``"wb"`` an exception
        in the ``with`` body aborts the upload and publishes nothing.

    Raises:
        InvalidURL: not an object URL.
        InvalidArgument: unsupported mode or compression, or ``metadata``
            for a read or for a file.
        NotFound: ``"rb"`` of a missing object.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    op = f"open {url}"
    check_instance(op, "client", client, (ObjectStore, Client), optional=True)
    store, (bucket, name) = store_for_url(url, client, require_object=True)
    check_str(op, "mode", mode, choices=_WRITE_MODES + _READ_MODES)
    check_str(op, "compression", compression, optional=True, choices=("zstd",))
    check_instance(op, "writer", writer, WriterOptions, optional=True)
    check_instance(op, "reader", reader, ReaderOptions, optional=True)
    check_str(op, "content_type", content_type)  # the writer checks what a header takes
    check_metadata(op, "metadata", metadata)
    raw: Any
    if mode in _WRITE_MODES:
        raw = ObjectWriter(store, bucket, name, options=writer, content_type=content_type,
                           metadata=metadata)
        if compression == "zstd":
            from .._engines.zstd import compress_writer

            return compress_writer(raw)  # type: ignore[return-value]
        return raw  # type: ignore[no-any-return]
    # A read mode (checked above).
    if metadata is not None:
        raise InvalidArgument(f"{op}: metadata is for writing (mode 'wb'); stat() reads it")
    raw = ObjectReader(store, bucket, name, options=reader)
    if compression == "zstd":
        from .._engines.zstd import decompress_reader

        return decompress_reader(raw)  # type: ignore[no-any-return]
    return raw  # type: ignore[no-any-return]
