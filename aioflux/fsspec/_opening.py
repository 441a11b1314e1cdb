"""How the filesystem opens files: ``open`` and ``_open`` (a
:class:`~._read_file.ReadFile` for ``rb``; a :class:`~._write_file.WriteFile`
for ``wb`` and ``xb``, compressed or as text, staged in a transaction) and
``open_async`` (the files of ``_async_file``).

A read file starts from what a recent listing or stat said of the object
when it knows, and reads the current version if that one is gone.
"""

from __future__ import annotations

import functools
import io
from typing import Any

import fsspec.asyn
import fsspec.compression
import fsspec.core

from .._api.open import TextWriter
from .._core.concurrency.portal import get_portal
from .._engines.async_writer import AsyncObjectWriter
from ._async_file import AsyncReadFile, AsyncWriteFile
from ._base import FileSystemBase
from ._listing import recent_object
from ._paths import join
from ._read_file import FileReader, ReadFile
from ._write_file import CompressedWriteFile, WriteFile

__all__ = ["OpenMethods"]


def _unsupported(mode: str) -> ValueError:
    return ValueError(f"aioflux: mode {mode!r} is not supported (rb, wb, xb; objects "
                      "cannot be appended to or updated in place)")


class OpenMethods(FileSystemBase):
    """fsspec's ``open``, and ``open_async``, of ``AiofluxFileSystem``."""

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None,
              autocommit: bool = True, cache_options: dict[str, Any] | None = None,
              **kwargs: Any) -> Any:
        self._refuse_pins("open", path, kwargs)
        bucket, name = self._split(path)
        if mode in ("rb", "br"):
            known = join(self.scheme, bucket, name)
            return ReadFile(self._reader(bucket, name, known), self, known,
                            block_size or io.DEFAULT_BUFFER_SIZE)
        if mode in ("wb", "bw", "xb", "bx"):
            create = "x" in mode
            known = join(self.scheme, bucket, name)
            if create:
                self.recent.forget(known)  # asked of the store, not of a listing
                # On the portal loop, also for an asynchronous filesystem (its
                # own loop is the caller's, which open() must not block).
                if fsspec.asyn.sync(get_portal().loop, self._taken, path, bucket, name):
                    # Said at once, as fsspec's tests want; the publishing
                    # request checks it again (another writer may come first).
                    raise FileExistsError(f"{self.unstrip_protocol(path)}: exists (mode "
                                          "'xb' creates only)")
            return WriteFile(self.store, bucket, name, create=create, autocommit=autocommit,
                             content_type=kwargs.get("content_type",
                                                     "application/octet-stream"),
                             metadata=kwargs.get("metadata"),
                             published=functools.partial(self.recent.forget, known),
                             fs=self, path=known)
        raise _unsupported(mode)

    async def _taken(self, path: str, bucket: str, name: str) -> bool:
        """Whether ``"xb"`` of ``path`` is refused at open: an object has the
        name (a folder there is only a prefix of other objects' names, which
        the publishing precondition, pipe_file's and put_file's create, and
        gcsfs's and s3fs's "xb" all pass over), or on ``file://`` anything
        does (no file can be made where a folder is)."""
        if self.scheme == "file":
            return bool(await self._exists(path))
        return await self.store.exists(bucket, name)

    def _reader(self, bucket: str, name: str, known: str) -> FileReader:
        """A reader of the object (fsspec path ``known``), at the version a
        recent entry names if one does; found gone, the entry is forgotten.
        An entry without a crc32c (an S3 listing's) still saves the open its
        round trip: the stat that gives the checksum runs beside the first
        GET."""
        info = recent_object(self.recent, self.scheme, bucket, name, checksummed=False)
        return FileReader(self.store, bucket, name, info=info, recent=info is not None,
                          stat_beside=info is not None and info.crc32c is None,
                          stale=functools.partial(self.recent.forget, known))

    def open(self, path: str, mode: str = "rb", block_size: int | None = None,
             cache_options: dict[str, Any] | None = None, compression: str | None = None,
             **kwargs: Any) -> Any:
        """A file object, as ``fsspec``'s ``open``; text writes keep all-or-nothing.

        An exception inside ``with fs.open(path, "w")`` publishes nothing
        (fsspec's own text wrapper would close, so publish, the object).

        Args:
            path: the object (``bucket/key``, or a URL of this filesystem).
            mode: ``rb``, ``wb``, ``xb`` or their text forms (``r``, ``w``);
                no appends.
            block_size: the read buffer's size (reads); None: Python's
                default buffer size.
            cache_options: fsspec's read cache settings.
            compression: fsspec's compression name (``"infer"``: by the
                path's suffix), or None. A compressed write is closed with
                its file: ``close()`` ends the stream and publishes.
            **kwargs: ``encoding``, ``errors``, ``newline`` for text;
                ``content_type`` and ``metadata`` (custom, ``str`` to ``str``)
                of a written object; ``autocommit=False`` (inside
                ``fs.transaction``) stages the file until the commit.

        Returns:
            The file object.

        Raises:
            NotFound: reading a missing object (also ``FileNotFoundError``).
            FileExistsError: ``xb`` of an object that exists.
            InvalidArgument: ``generation=``, ``version_id=`` (not read), or a file's ``metadata``.
            ValueError: an append or update mode.
        """
        if "+" in mode:
            # Refused, text and compressed "w+" too: a write file cannot read.
            raise _unsupported(mode)
        if mode[:1] in ("w", "x") and compression is not None:
            compression = fsspec.core.get_compression(path, compression)  # "infer": by suffix
        if mode[:1] in ("w", "x") and ("b" not in mode or compression is not None):
            autocommit = kwargs.pop("autocommit", not self._intrans)
            raw = self._open(self._strip_protocol(path), mode=mode[0] + "b",
                             block_size=block_size, autocommit=autocommit,
                             **{k: v for k, v in kwargs.items()
                                if k not in ("encoding", "errors", "newline")})
            if not autocommit:
                self.transaction.files.append(raw)  # as fsspec's open() does
            out = raw if compression is None else CompressedWriteFile(
                raw, fsspec.compression.compr[compression])
            if "b" in mode:
                return out
            return TextWriter(out, encoding=kwargs.get("encoding") or "utf-8",
                              errors=kwargs.get("errors"), newline=kwargs.get("newline"))
        return super().open(path, mode=mode, block_size=block_size,
                            cache_options=cache_options, compression=compression, **kwargs)

    async def open_async(self, path: str, mode: str = "rb",
                         **kwargs: Any) -> AsyncReadFile | AsyncWriteFile:
        """An async file (``await f.read()``, ``await f.write()``, ``await f.close()``).

        Args:
            path: the object.
            mode: ``rb`` (ranged reads pinned to the version found at open,
                or a recent listing named, checked against its crc32c when
                read front to back) or ``wb``
                (published whole by ``close()``; an exception inside
                ``async with`` publishes nothing).
            **kwargs: ``content_type`` and ``metadata`` of a written object.

        Returns:
            The file.

        Raises:
            ValueError: a text mode, compression, or a mode other than rb and wb.
            InvalidArgument: gcsfs's ``generation=`` or s3fs's ``version_id=`` (not read).
            NotImplementedError: ``autocommit=False`` (a transaction's files are
                ``fs.open``'s: its commit is sync).
            NotFound: ``rb`` of a missing object.
        """
        if "b" not in mode or kwargs.get("compression"):
            raise ValueError(f"aioflux: open_async takes binary modes without compression, "
                             f"not {mode!r}")
        self._refuse_pins("open_async", path, kwargs)
        bucket, name = self._split(path)
        if mode in ("rb", "br"):
            # From a recent entry with the crc32c it is checked against (else
            # a stat says): pinned to the entry's version, read anew if gone.
            listed = recent_object(self.recent, self.scheme, bucket, name, checksummed=False)
            stale = functools.partial(self.recent.forget, join(self.scheme, bucket, name))
            if listed is not None and listed.crc32c is not None:
                return AsyncReadFile(self.store, listed, recent=True, stale=stale)
            info = await self.store.stat(bucket, name)
            if listed is not None and (listed.generation, listed.size) != (info.generation,
                                                                           info.size):
                stale()  # the entry without a crc32c (an S3 listing's) named another version
            return AsyncReadFile(self.store, info, stale=stale)
        if mode in ("wb", "bw"):
            if not kwargs.get("autocommit", True):
                raise NotImplementedError("aioflux: open_async files are published on close; "
                                          "a transaction's files are fs.open's")
            return AsyncWriteFile(AsyncObjectWriter(
                self.store, bucket, name,
                content_type=kwargs.get("content_type", "application/octet-stream"),
                metadata=kwargs.get("metadata")),
                published=functools.partial(self.recent.forget, join(self.scheme, bucket, name)))
        raise ValueError(f"aioflux: open_async mode {mode!r} is not supported (rb, wb)")
