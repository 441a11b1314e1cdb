"""``aioflux.open(url, mode)``: file objects over gs:// objects.

``"wb"`` returns an :class:`~aioflux._engines.writer.ObjectWriter` (streaming
multipart upload, published only on a clean close), ``"rb"`` an
:class:`~aioflux._engines.reader.ObjectReader` (parallel ranged read-ahead,
seekable). With ``compression="zstd"`` the stream is (de)compressed with
multithreaded zstandard on the way (the read side is then not seekable).
"""

from __future__ import annotations

import os
import threading
from typing import IO, Any

from .._core.store import ObjectStore
from .._core.validate import check_instance, check_int, check_str
from .._engines.reader import DEFAULT_CHUNK_SIZE, DEFAULT_READ_AHEAD, ObjectReader
from .._engines.writer import DEFAULT_MAX_IN_FLIGHT, DEFAULT_PART_SIZE, ObjectWriter
from ..gcs._client import AsyncClient
from .stores import AnyClient, store_for_url
from .sync import Client

__all__ = ["default_client", "open", "resolve_client"]

_WRITE_MODES = ("wb", "w+b", "bw")
_READ_MODES = ("rb", "br", "r")
_lock = threading.Lock()
_default: tuple[int, AsyncClient] | None = None


def default_client() -> AsyncClient:
    """The process-wide AsyncClient used when none is given.

    Built lazily (and again after fork) from the environment, so
    ``STORAGE_EMULATOR_HOST`` set before first use applies.

    Returns:
        The AsyncClient.
    """
    global _default
    with _lock:
        if _default is None or _default[0] != os.getpid():
            _default = (os.getpid(), AsyncClient())
        return _default[1]


def resolve_client(client: AsyncClient | Client | None) -> AsyncClient:
    """The AsyncClient behind ``client`` (the default one for ``None``).

    Args:
        client: an AsyncClient, a sync Client, or None.

    Returns:
        An AsyncClient.
    """
    if client is None:
        return default_client()
    if isinstance(client, Client):
        return client.aio
    return client


def open(
    url: str,
    mode: str = "rb",
    *,
    client: AnyClient | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    read_ahead: int = DEFAULT_READ_AHEAD,
    compression: str | None = None,
    content_type: str = "application/octet-stream",
) -> IO[bytes]:
    """Open ``gs://bucket/name`` as a binary file.

    Args:
        url: ``gs://bucket/name``.
        mode: ``"rb"`` or ``"wb"``.
        client: the store to use (an AsyncClient, a LocalStore, a sync
            Client); default: the process-wide store of the URL's scheme.
        part_size: writer part size (>= 5 MiB, multiple of 256 KiB).
        max_in_flight: writer parts uploading at once.
        chunk_size: reader bytes per ranged GET.
        read_ahead: reader blocks in flight ahead of the position.
        compression: ``None`` or ``"zstd"`` (needs ``aioflux-storage[zstd]``).
        content_type: Content-Type of a written object.

    Returns:
        A file object; use it as a context manager. For ``"wb"`` an exception
        in the ``with`` body aborts the upload and publishes nothing.

    Raises:
        InvalidURL: not a gs:// object URL.
        InvalidArgument: unsupported mode or compression.
        NotFound: ``"rb"`` of a missing object.
    """
    op = f"open {url}"
    check_str(op, "mode", mode, choices=_WRITE_MODES + _READ_MODES)
    check_str(op, "compression", compression, optional=True, choices=("zstd",))
    check_instance(op, "client", client, (ObjectStore, Client), optional=True)
    for arg, value in (("part_size", part_size), ("max_in_flight", max_in_flight),
                       ("chunk_size", chunk_size), ("read_ahead", read_ahead)):
        check_int(op, arg, value, minimum=1)
    check_str(op, "content_type", content_type)
    # The URL's scheme picks the store (file:// and paths: the filesystem).
    aio, (bucket, name) = store_for_url(url, client, require_object=True)
    raw: Any
    if mode in _WRITE_MODES:
        raw = ObjectWriter(aio, bucket, name, part_size=part_size, max_in_flight=max_in_flight,
                           content_type=content_type)
        if compression == "zstd":
            from .._engines.zstd import compress_writer

            return compress_writer(raw)  # type: ignore[return-value]
        return raw  # type: ignore[no-any-return]
    # A read mode (checked above).
    raw = ObjectReader(aio, bucket, name, chunk_size=chunk_size, read_ahead=read_ahead)
    if compression == "zstd":
        from .._engines.zstd import decompress_reader

        return decompress_reader(raw)  # type: ignore[no-any-return]
    return raw  # type: ignore[no-any-return]
