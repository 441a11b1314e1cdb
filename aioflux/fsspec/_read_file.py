"""The file of ``fs.open(path, "rb")``: a buffered reader on aioflux's reader,
with the attributes fsspec's files have.

fsspec's own ``read_block`` (which dask's ``read_bytes`` calls), and tools
written against ``AbstractBufferedFile``, ask a file for its ``size``,
``path``, ``fs``, ``details`` or ``info()``: a plain ``io.BufferedReader``
has none of them (``read_block`` failed with ``AttributeError``).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from .._core.types import ObjectInfo
from .._engines.reader import ObjectReader

__all__ = ["ReadFile"]


class ReadFile(io.BufferedReader):
    """A read-only, seekable file of one object version.

    Args:
        raw: the object's reader (ranged reads, read-ahead, crc32c checked
            front to back).
        fs: the filesystem that opened it.
        path: its fsspec path.
        entry: makes the fsspec info dict of an object's info.
        buffer_size: the read buffer's size.
    """

    mode = "rb"

    def __init__(self, raw: ObjectReader, fs: Any, path: str,
                 entry: Callable[[ObjectInfo], dict[str, Any]], buffer_size: int) -> None:
        super().__init__(raw, buffer_size=buffer_size)
        self._reader = raw
        self.fs = fs
        self.path = path
        self._entry = entry

    @property
    def size(self) -> int:
        """The object's size, in bytes (of the version read)."""
        return self._reader.size

    @property
    def details(self) -> dict[str, Any]:
        """The version read, as ``fs.info()`` gives it."""
        return self._entry(self._reader.info)

    def info(self) -> dict[str, Any]:
        """The version read, as ``fs.info()`` gives it."""
        return self.details
