"""The file of ``fs.open(path, "rb")``: a buffered reader on aioflux's reader,
with the attributes fsspec's files have, that pickles as fsspec's do.

fsspec's own ``read_block`` (which dask's ``read_bytes`` calls), and tools
written against ``AbstractBufferedFile``, ask a file for its ``size``,
``path``, ``fs``, ``details`` or ``info()``: a plain ``io.BufferedReader``
has none of them (``read_block`` failed with ``AttributeError``).

Users hand open files to DataLoader workers, dask and spawned processes:
fsspec's read files pickle by opening the path again, where ours could not
be pickled at all. Ours is opened again too, at the position it had, but
pinned to the version it reads (one not read yet: the version it was opened
at): an object replaced or deleted in between fails the reads with
``NotFound`` instead of handing out the new version's bytes after the old
one's.

Its ``size`` is the size of the version it reads. Before the first read,
a file opened from a recent listing or stat has only that entry's word
for it: ``size`` is then the entry's, and handing it out holds the file to
it as a seek from the end does (see ``ObjectReader``'s ``recent``): if
the first read finds another version of another size, that read raises
``PreconditionFailed`` instead of serving the current version at offsets
the old size placed (fsspec's ``read_block`` read a prefix of a longer
version), and from then on ``size`` is the current version's. A file that
finds the entry it was opened from stale (the version gone, replaced or
deleted) makes the filesystem forget it, so the file opened again after
such an error reads the current version.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from typing import Any

from .._core.concurrency.portal import get_portal
from .._core.errors import NotFound, PreconditionFailed
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import ObjectStore
from .._engines.reader import ObjectReader
from ._entries import file_entry

__all__ = ["FileReader", "ReadFile"]


class FileReader(ObjectReader):
    """The reader under a :class:`ReadFile`: an ``ObjectReader`` that hands
    its size out as its file's ``size`` (``told_size``) and says when a
    read finds the version it was opened at gone (``stale``).

    Args:
        client: the store.
        bucket: bucket name.
        name: object name.
        info: the object's metadata if known (see ``ObjectReader``).
        recent: ``info`` is a recent listing's or stat's (see ``ObjectReader``).
        stat_beside: see ``ObjectReader``.
        stale: called once, when a read finds that version gone (replaced
            or deleted): the filesystem forgets the entry it came from.
    """

    def __init__(self, client: ObjectStore, bucket: str, name: str, *,
                 info: ObjectInfo | None = None, recent: bool = False,
                 stat_beside: bool = False, stale: Callable[[], None] | None = None) -> None:
        super().__init__(client, bucket, name, info=info, recent=recent,
                         stat_beside=stat_beside)
        self._stale = stale
        self._opened = (self.info.generation, self.info.size)

    @contextlib.contextmanager
    def _watching(self) -> Iterator[None]:
        try:
            yield
        except (NotFound, PreconditionFailed):
            self._found_stale()
            raise
        finally:
            info = self._version.info  # not the property: a call less each read
            if (info.generation, info.size) != self._opened:
                self._found_stale()  # a stale entry's version was gone: the current one read

    def _found_stale(self) -> None:
        stale, self._stale = self._stale, None
        if stale is not None:
            stale()

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        with self._watching():
            return super().readinto(buffer)

    def read(self, size: int | None = -1) -> bytes:
        with self._watching():
            return super().read(size)


class ReadFile(io.BufferedReader):
    """A read-only, seekable file of one object version.

    Pickles (as fsspec's read files do): unpickled, it reads the same
    version from the same position.

    Args:
        raw: the object's reader (ranged reads, read-ahead, crc32c checked
            front to back).
        fs: the filesystem that opened it.
        path: its fsspec path.
        buffer_size: the read buffer's size.
    """

    mode = "rb"

    def __init__(self, raw: FileReader, fs: Any, path: str, buffer_size: int) -> None:
        super().__init__(raw, buffer_size=buffer_size)
        self._reader = raw
        self._buffer_size = buffer_size
        self.fs = fs
        self.path = path

    @property
    def name(self) -> str:  # type: ignore[override]
        """Its fsspec path, as ``LocalFileSystem``'s files are named (a
        file's absolute path), not the object's name in its bucket."""
        return self.path

    @property
    def size(self) -> int:
        """The object's size, in bytes: of the version read (before the
        first read of a file opened from a recent entry, the entry's, which
        that read then holds the version to: see the module's notes)."""
        return self._reader.told_size()

    @property
    def details(self) -> dict[str, Any]:
        """The version read, as ``fs.info()`` gives it (its size as :attr:`size`)."""
        self._reader.told_size()
        return file_entry(self.fs.scheme, self._reader.info)

    def info(self) -> dict[str, Any]:
        """The version read, as ``fs.info()`` gives it."""
        return self.details

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the position; all the rest if ``size``
        is negative or None (as fsspec's files read: ``fs.read_block`` past
        the end asks for a negative length, which io refused).

        Args:
            size: byte count.

        Returns:
            The bytes (empty at the end).

        Raises:
            NotFound, ChecksumMismatch, StorageError: the read failed.
        """
        return super().read(-1 if size is None or size < 0 else size)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.closed:
            # fsspec reopens a closed file as an open one; nothing here is
            # left to read from, and tell() has no position to give.
            raise ValueError(f"cannot pickle {self._reader.url}: the file is closed")
        return _reopen, (self.fs, self.path, self._reader.info, self._buffer_size, self.tell())


def _reopen(fs: Any, path: str, info: ObjectInfo, buffer_size: int, position: int) -> ReadFile:
    """A pickled :class:`ReadFile` unpickled: ``info``'s version at ``position``."""
    store = fs.store
    if info.crc32c is None and info.md5 is None and store.config.verify_crc32c:
        # An S3 listing's entry names no checksum: the file it opened took
        # one from a stat beside its first read, perhaps not yet. A stat of
        # the same version gives it; another version's is not this one's.
        try:
            current = get_portal().call(store.stat(info.bucket, info.name))
        except NotFound:
            current = None  # gone: reading says so
        if current is not None and current.generation == info.generation:
            info = current
    file = ReadFile(FileReader(store, info.bucket, info.name, info=info), fs, path,
                    buffer_size)
    if position:
        file.seek(position)
    return file
