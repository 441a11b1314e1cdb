"""The file of ``fs.open(path, "wb" | "xb")``: aioflux's streaming writer,
with fsspec's transactions and its create-only mode.

Parts upload while the caller writes, in bounded memory, and the object
is published whole by ``close()``; an exception inside ``with`` publishes
nothing. ``"xb"`` publishes only if no object has the name by then: the
publishing request itself carries the store's create-only precondition
(see ``ObjectStore.start_upload``). Inside ``fs.transaction``
(``autocommit=False``) ``close()`` only waits for the parts in flight and
keeps the tail; ``commit()`` publishes, ``discard()`` drops the upload.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from .._core.errors import PreconditionFailed
from .._core.store import ObjectStore
from .._engines.writer import Bytes, ObjectWriter

__all__ = ["WriteFile"]


class WriteFile(ObjectWriter):
    """A write-only file published on ``close()``, or on ``commit()`` in a transaction.

    Args:
        store: the store.
        bucket: bucket name.
        name: object name.
        content_type: Content-Type of the object.
        create: publish only a new object (``"xb"``): ``FileExistsError``
            otherwise, and nothing is published.
        autocommit: publish on ``close()``; False (a transaction's file):
            on ``commit()``.
        published: called once the object may have been published (the
            filesystem forgets what it knew of the name).
    """

    def __init__(self, store: ObjectStore, bucket: str, name: str, *, content_type: str,
                 create: bool, autocommit: bool,
                 published: Callable[[], None] | None = None) -> None:
        super().__init__(store, bucket, name, content_type=content_type,
                         if_generation_match=0 if create else None)
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
