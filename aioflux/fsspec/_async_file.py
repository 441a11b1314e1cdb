"""The file objects of ``await fs.open_async(...)``, for callers on their own loop.

Reads are ranged GETs pinned to the version found at open (an overwrite
mid-read fails instead of mixing two versions), and read front to back they
are checked against the object's crc32c (or a plain S3 ETag's MD5). A file
opened from a recent listing's entry reads the version the store has now if
that one is gone, before any byte is handed out; its ``size`` is the
entry's until then, and once handed out (or used by a seek from the end)
the file holds to it: a current version of another size is then
``PreconditionFailed``, as ``fs.open``'s files say it (see ``_read_file``),
not bytes at offsets the old size placed. Writes
stream through :class:`~aioflux._engines.async_writer.AsyncObjectWriter`:
the object is published by ``close()``, whole, and an exception inside
``async with`` publishes nothing, and a write file does not pickle.
"""

from __future__ import annotations

import base64
import hashlib
import operator
import os
from collections.abc import Callable
from typing import Any

from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    ProtocolError,
)
from .._core.integrity.crc import crc32c_combine, encode_crc32c
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import ObjectStore
from .._engines.async_writer import AsyncObjectWriter
from ._write_file import refuse_pickling

__all__ = ["AsyncReadFile", "AsyncWriteFile"]


class AsyncReadFile:
    """A seekable, read-only async file over one version of an object.

    Args:
        store: the store.
        info: the object's metadata (its size, checksums and version).
        recent: ``info`` came from a recent listing or stat: if its version
            is gone at the first read (or that read starts at or past its
            end), the store is asked for the current one.
        stale: called once, when a read finds the version gone (replaced
            or deleted): the filesystem forgets the entry it came from.
    """

    mode = "rb"

    def __init__(self, store: ObjectStore, info: ObjectInfo, *, recent: bool = False,
                 stale: Callable[[], None] | None = None) -> None:
        self.store = store
        self.loc = 0
        self.closed = False
        self._recent = recent
        # The caller was told the size (size, a seek from the end) while unconfirmed.
        self._size_told = False
        self._stale = stale
        # The object read front to back failed its check: every later read says so.
        self._corrupt: ChecksumMismatch | None = None
        self._adopt(info)

    @property
    def size(self) -> int:
        """The object's size, in bytes: of the version read (before the
        first read of a file opened from a recent entry, the entry's, which
        that read then holds the version to)."""
        if self._recent:
            self._size_told = True
        return self.info.size

    def _adopt(self, info: ObjectInfo) -> None:
        self.info = info
        checking = self.store.config.verify_crc32c
        self._verify = checking and info.crc32c is not None
        self._md5 = hashlib.md5(usedforsecurity=False) \
            if checking and not self._verify and info.md5 is not None else None
        # Bytes [0, _checked) are folded into _crc (or _md5): only a read
        # starting there extends the check, so seeks never fool it.
        self._checked = 0
        self._crc = 0

    async def read(self, length: int = -1) -> bytes:
        """Read up to ``length`` bytes from the position (all the rest if negative).

        Args:
            length: byte count.

        Returns:
            The bytes (empty at the end).

        Raises:
            InvalidArgument: the file is closed.
            NotFound: the object, or the version opened, is gone.
            ChecksumMismatch: the object read front to back did not match
                its crc32c or MD5.
            StorageError: a ranged GET failed after retries.
        """
        if self.closed:
            raise InvalidArgument(f"read from closed file {self.info.url}")
        if self._corrupt is not None:
            # Said again: the bytes after the check's failure are the
            # corrupt object's too, and a read from there extends no check.
            raise self._corrupt
        try:
            if self._recent:
                if self._end(length) <= self.loc and length != 0:
                    # At or past the end a listing named: the store says where it is now.
                    await self._renew()
                else:
                    try:
                        data = await self._read(length)
                    except (NotFound, PreconditionFailed):
                        # The version the listing named is gone (a deleted
                        # object raises NotFound from the stat).
                        await self._renew()
                    else:
                        self._recent = False
                        return data
            return await self._read(length)
        except (NotFound, PreconditionFailed):
            self._found_stale()
            raise

    def _end(self, length: int | None) -> int:
        size = self.info.size
        return size if length is None or length < 0 else min(size, self.loc + length)

    async def _renew(self) -> None:
        """Read the version the store has now (a recent entry was stale).

        Raises:
            NotFound: the object is gone.
            PreconditionFailed: the caller was told the entry's size, and
                the current version's is another: offsets placed by it
                would read other bytes than the caller meant (reads go on
                at the current version, once said).
        """
        self._recent = False  # only before the first byte is handed out
        told = self.info.size if self._size_told else None
        current = await self.store.stat(self.info.bucket, self.info.name)
        if (current.generation, current.size) != (self.info.generation, self.info.size):
            self._found_stale()
        self._adopt(current)
        if told is not None and told != current.size:
            raise PreconditionFailed(
                f"read {self.info.url} failed: the object changed since it was opened (a "
                f"recent listing or stat said {told} bytes, which its size or a seek from "
                f"its end gave; it now has {current.size}): open it again",
                operation="read", bucket=self.info.bucket, name=self.info.name, status=412,
                reason="conditionNotMet")

    def _found_stale(self) -> None:
        stale, self._stale = self._stale, None
        if stale is not None:
            stale()

    async def _read(self, length: int | None) -> bytes:
        end = self._end(length)
        if end <= self.loc:
            return b""
        start = self.loc
        extends = start == self._checked
        fetched = await self.store.fetch(
            self.info.bucket, self.info.name, start=start, end=end,
            generation=self.info.generation or None, size=self.info.size,
            want_crc=self._verify and extends)
        data = fetched.data
        if data is None or len(data) != end - start:
            raise ProtocolError(f"read {self.info.url} failed: bytes [{start}, {end}) came "
                                f"back as {fetched.count} bytes", operation="read",
                                bucket=self.info.bucket, name=self.info.name)
        if extends:
            self._account(data, fetched.crc)
        self.loc = end
        return data

    def _account(self, data: bytes, crc: int | None) -> None:
        if self._verify and crc is not None:
            self._crc = crc32c_combine(self._crc, crc, len(data))
        elif self._md5 is not None:
            self._md5.update(data)
        else:
            return
        self._checked += len(data)
        if self._checked < self.info.size:
            return
        if self._md5 is not None:
            got, want = base64.b64encode(self._md5.digest()).decode(), self.info.md5
            what = "MD5"
        else:
            got, want = encode_crc32c(self._crc), encode_crc32c(self.info.crc32c or 0)
            what = "crc32c"
        if got != want:
            self._corrupt = ChecksumMismatch(
                f"read {self.info.url} failed: {what} {got} of the bytes read != {want}",
                operation="read", bucket=self.info.bucket, name=self.info.name)
            raise self._corrupt

    def seek(self, loc: int, whence: int = os.SEEK_SET) -> int:
        """Move the position.

        Args:
            loc: bytes.
            whence: ``SEEK_SET``, ``SEEK_CUR`` or ``SEEK_END``.

        Returns:
            The new position.

        Raises:
            InvalidArgument: a negative position or an unknown ``whence``.
        """
        # A seek from the end hands out the size (see size).
        end = self.size if whence == os.SEEK_END else self.info.size
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.loc, os.SEEK_END: end}.get(whence)
        loc = operator.index(loc)
        if base is None or base + loc < 0:
            raise InvalidArgument(f"seek {self.info.url}: bad offset {loc} from whence {whence}")
        self.loc = base + loc
        return self.loc

    def tell(self) -> int:
        """The position."""
        return self.loc

    async def close(self) -> None:
        """Close (reads hold nothing open between calls)."""
        self.closed = True

    async def __aenter__(self) -> AsyncReadFile:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncWriteFile:
    """A write-only async file: the object appears on ``close()``, whole.

    Args:
        writer: the streaming writer of the object.
        published: called once the object may have been published (the
            filesystem forgets what it knew of the name).
    """

    mode = "wb"

    def __init__(self, writer: AsyncObjectWriter,
                 published: Callable[[], None] | None = None) -> None:
        self.writer = writer
        self._published = published
        self.loc = 0
        self.closed = False

    async def write(self, data: Any) -> int:
        """Append bytes (parts upload as they fill, a few in flight).

        Args:
            data: bytes-like.

        Returns:
            The number of bytes taken.

        Raises:
            InvalidArgument: the file is closed.
            StorageError: a part failed (the upload is aborted).
        """
        taken = await self.writer.write(data)
        self.loc += taken
        return taken

    def tell(self) -> int:
        """Bytes written so far."""
        return self.loc

    def __reduce__(self) -> tuple[Any, ...]:
        # A local store's writer pickled: its copy published on its own.
        raise refuse_pickling(self.writer.url)

    async def close(self) -> None:
        """Publish the object; closing again does nothing.

        Raises:
            StorageError: the upload failed (nothing is published).
            ChecksumMismatch: the stored bytes differ from the written ones.
        """
        if self.closed:
            return
        self.closed = True
        try:
            await self.writer.close()
        finally:  # even a failed close may have published (a lost answer)
            if self._published is not None:
                self._published()

    async def abort(self) -> None:
        """Discard what was written; nothing is published."""
        self.closed = True
        await self.writer.abort()

    async def __aenter__(self) -> AsyncWriteFile:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.abort()
