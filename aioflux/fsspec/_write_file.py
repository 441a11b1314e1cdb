"""The file of ``fs.open(path, "wb" | "xb")``: aioflux's streaming writer,
with fsspec's transactions and its create-only mode.

Parts upload while the caller writes, in bounded memory, and the object
is published whole by ``close()``; an exception inside ``with`` publishes
nothing. ``"xb"`` publishes only if no object has the name by then: the
publishing request itself carries the store's create-only precondition
(see ``ObjectStore.start_upload``). Inside ``fs.transaction``
(``autocommit=False``) ``close()`` only waits for the parts in flight and
keeps the tail; ``commit()`` publishes, ``discard()`` drops the upload.

A write file does not pickle (as fsspec's do not): its upload is the
opening process's, and a copy in another process would publish on its own.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from typing import Any

from .._core.errors import PreconditionFailed
from .._core.storage.protocol import ObjectStore
from .._engines.writer import Bytes, ObjectWriter, PublishOnExit

__all__ = ["CompressedWriteFile", "WriteFile", "refuse_pickling"]


def refuse_pickling(url: str) -> TypeError:
    """The error of pickling a file open for writing ``url``."""
    return TypeError(f"cannot pickle the file writing {url}: its upload is this process's "
                     "(a copy elsewhere would publish on its own); pickle a file opened "
                     "for reading, or the filesystem and the path")


class WriteFile(ObjectWriter):
    """A write-only file published on ``close()``, or on ``commit()`` in a transaction.

    Args:
        store: the store.
        bucket: bucket name.
        name: object name.
        content_type: Content-Type of the object.
        metadata: custom metadata of the object (files have none).
        create: publish only a new object (``"xb"``): ``FileExistsError``
            otherwise, and nothing is published.
        autocommit: publish on ``close()``; False (a transaction's file):
            on ``commit()``.
        published: called once the object may have been published (the
            filesystem forgets what it knew of the name).
        fs: the filesystem that opened it (``f.fs``, as fsspec's files have).
        path: its fsspec path (``f.path``).
    """

    def __init__(self, store: ObjectStore, bucket: str, name: str, *, content_type: str,
                 create: bool, autocommit: bool, metadata: dict[str, str] | None = None,
                 published: Callable[[], None] | None = None, fs: Any = None,
                 path: str = "") -> None:
        super().__init__(store, bucket, name, content_type=content_type, metadata=metadata,
                         if_generation_match=0 if create else None)
        self.fs, self.path = fs, path
        # As LocalFileSystem's files are named (a file's absolute path), not
        # the object's name in its bucket.
        self.name = path
        self.autocommit = autocommit
        self._staged = False
        self._published = published

    @contextlib.contextmanager
    def _publishing(self) -> Iterator[None]:
        try:
            with self._create_only():
                yield
        finally:  # even a failed publish may have published (a lost answer)
            if self._published is not None:
                self._published()

    @contextlib.contextmanager
    def _create_only(self) -> Iterator[None]:
        try:
            yield
        except PreconditionFailed as exc:
            raise FileExistsError(f"{self.url}: exists (mode 'xb' creates only); nothing "
                                  "was written") from exc

    def write(self, data: Bytes) -> int:  # type: ignore[override]
        """Append bytes (see ``ObjectWriter.write``).

        Raises:
            ValueError: the file is closed (a transaction's too, before its commit).
            FileExistsError: ``"xb"`` and the object exists.
        """
        if self._staged:
            raise ValueError(f"write to closed file {self.url}")
        with self._create_only():
            return super().write(data)

    def close(self) -> None:
        """Publish (see ``ObjectWriter.close``); in a transaction, only hold
        what was written for :meth:`commit`.

        Raises:
            FileExistsError: ``"xb"`` and the object exists (nothing published).
            StorageError: the upload failed (nothing published).
        """
        if self.autocommit or self._done:
            with self._publishing():
                super().close()
            return
        if not self._staged:
            with self._create_only():
                self.settle()
            self._staged = True

    @property
    def closed(self) -> bool:
        return self._staged or super().closed

    def __reduce__(self) -> tuple[Any, ...]:
        raise refuse_pickling(self.url)

    def commit(self) -> None:
        """Publish a transaction's file (nothing, if it was discarded or
        its ``with`` block failed).

        Raises:
            FileExistsError: ``"xb"`` and the object exists (nothing published).
            StorageError: the upload failed (nothing published).
        """
        with self._publishing():
            super().close()

    def discard(self) -> None:
        """Drop a transaction's file: nothing is published."""
        self.abort()


class CompressedWriteFile(PublishOnExit, io.BufferedIOBase):
    """``fs.open(path, "wb", compression=...)``: fsspec's compressor over a
    :class:`WriteFile`, closed with it.

    fsspec's own ``open`` hands back the compressor alone (a ``GzipFile``
    over the file), whose ``close()`` leaves the file under it open: the
    object was never published, and dropped unclosed it was discarded. Here
    ``close()`` finishes the compressed stream, then publishes (or, in a
    transaction, stages) the file; an exception inside ``with`` publishes
    nothing.

    Args:
        raw: the file the compressed bytes go to.
        compress: fsspec's compressor for the name (``fsspec.compression.compr``).
    """

    def __init__(self, raw: WriteFile, compress: Callable[..., Any]) -> None:
        self._done = False
        self._track()
        self._raw = raw
        super().__init__()
        self._packer = compress(raw, mode="wb")

    @property
    def fs(self) -> Any:
        """The filesystem that opened it."""
        return self._raw.fs

    @property
    def path(self) -> str:
        """Its fsspec path."""
        return self._raw.path

    def writable(self) -> bool:
        return True

    def write(self, data: Bytes) -> int:  # type: ignore[override]
        """Compress and append bytes."""
        if self._done:
            raise ValueError(f"write to closed file {self._raw.url}")
        return int(self._packer.write(data))

    def flush(self) -> None:
        """Nothing to do: the object is published whole by ``close()`` (a
        compressor's own flush would cut its stream into blocks)."""

    def close(self) -> None:
        """Finish the compressed stream and publish the object (see :class:`WriteFile`).

        Raises:
            FileExistsError: ``"xb"`` and the object exists (nothing published).
            StorageError: the upload failed (nothing published).
        """
        if self._done:
            return
        self._done = True
        try:
            self._packer.close()
        except BaseException:
            self._raw.abort()
            raise
        finally:
            super().close()
        self._raw.close()

    def abort(self) -> None:
        """Discard everything written; nothing is published."""
        self._done = True
        super().close()
        self._raw.abort()

    def __reduce__(self) -> tuple[Any, ...]:
        raise refuse_pickling(self._raw.url)

    def _unpublished(self) -> tuple[str, int, str]:
        return self._raw._unpublished()

    def _inner(self) -> PublishOnExit:
        return self._raw
