"""The filesystem's reads of whole objects and ranges: ``cat_file``, ``cat``,
``cat_ranges`` and ``get_file``.

A whole read is checked against the object's crc32c; a range cannot be.
Ranges slice as Python's do (negative offsets count from the end, a range
past the end is empty), as fsspec specifies; a range counted from the end
is read at the version whose size placed it. ``get_file`` from a recent
entry found stale reads the current version and forgets the entry, as the
read file does.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from fsspec.callbacks import DEFAULT_CALLBACK, Callback

from .._core.concurrency.window import gather_bounded
from .._core.errors import (
    ChecksumMismatch,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    ProtocolError,
)
from ._base import FileSystemBase
from ._listing import recent_object
from ._paths import join
from ._ranges import cat_ranges
from ._transfers import get_file

__all__ = ["ReadMethods"]


class ReadMethods(FileSystemBase):
    """fsspec's read methods of ``AiofluxFileSystem``."""

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None,
                        **kwargs: Any) -> bytes:
        self._refuse_pins("cat_file", path, kwargs)
        bucket, name = self._split(path)
        if (start is None or start == 0) and end is None:
            return await self.store.read(bucket, name)  # whole: crc32c checked
        if (start is not None and start < 0) or (end is not None and end < 0):
            return await self._cat_from_end(bucket, name, start, end)
        start = start or 0
        if end is not None and end <= start:
            return b""
        try:
            return await self.store.read(bucket, name, start=start, end=end)
        except InvalidRequest:
            # A range starting at or past the end (a server's 416, a file's
            # refusal): fsspec's ranges slice like Python's, so it is empty.
            if (await self.store.stat(bucket, name)).size <= start:
                return b""
            raise

    async def _cat_from_end(self, bucket: str, name: str, start: int | None,
                            end: int | None) -> bytes:
        """A range with a bound counted from the end: placed by the size of
        the version a stat finds, and read at that version only (a range of
        one version's size applied to another's bytes is other bytes).

        Raises:
            PreconditionFailed: the object was replaced between the stat and
                the read.
            NotFound: it was deleted.
        """
        info = await self.store.stat(bucket, name)
        size = info.size
        lo = 0 if start is None else start if start >= 0 else max(0, size + start)
        hi = size if end is None else min(size, end if end >= 0 else max(0, size + end))
        if hi <= lo:
            return b""
        try:
            # The size too: a store without versions (generation 0) cannot
            # pin one, and a file rewritten keeping its time keeps its own.
            fetched = await self.store.fetch(bucket, name, start=lo, end=hi,
                                             generation=info.generation or None, size=size)
        except (NotFound, PreconditionFailed, ProtocolError, ChecksumMismatch) as exc:
            current = await self.store.stat(bucket, name)  # NotFound: deleted meanwhile
            if (current.generation, current.size) == (info.generation, size):
                raise  # the same version: the read's own error
            raise PreconditionFailed(
                f"cat_file {info.url} failed: the object changed between the stat that "
                f"placed bytes [{lo}, {hi}) by its size ({size} bytes, version "
                f"{info.version}) and their read (now {current.size} bytes, version "
                f"{current.version}); nothing was read: read it again",
                operation="read", bucket=bucket, name=name, status=412,
                reason="conditionNotMet") from exc
        assert fetched.data is not None  # no buffer was given
        return fetched.data

    async def _cat(self, path: str | list[str], recursive: bool = False,
                   on_error: str = "raise", batch_size: int | None = None,
                   **kwargs: Any) -> Any:
        # fsspec's own _cat wraps every read in wait_for and calls
        # asyncio.wait on up to 1,280 of them after each completion: a
        # quarter of the CPU of cat of 2,000 small objects (perf scenario
        # fsspec, op=cat). The store's semaphore bounds the requests anyway.
        paths = await self._expand_path(path, recursive=recursive)

        async def one(p: str) -> Any:
            try:
                return await self._cat_file(p, **kwargs)
            except Exception as exc:
                if on_error == "raise":
                    raise
                return exc

        limit = batch_size or self.batch_size or self.store.config.max_concurrency
        out = await gather_bounded((one(p) for p in paths), limit)
        if len(paths) > 1 or isinstance(path, list) or paths[0] != self._strip_protocol(path):
            return {k: v for k, v in zip(paths, out, strict=True)
                    if on_error != "omit" or not isinstance(v, Exception)}
        return out[0]

    async def _cat_ranges(self, paths: Sequence[str], starts: Sequence[int] | int,
                          ends: Sequence[int] | int, max_gap: int | None = None,
                          batch_size: int | None = None, on_error: str = "return",
                          **kwargs: Any) -> list[Any]:
        # As many at once as the store's semaphore lets through: a Parquet
        # reader asks for all its column chunks at once, and each wave of a
        # smaller batch waits a round trip (perf/scenarios/fsspec.py).
        return await cat_ranges(self._cat_file, [self._strip_protocol(p) for p in paths],
                                starts, ends, gap=max_gap, on_error=on_error,
                                limit=batch_size or self.store.config.max_concurrency)

    async def _get_file(self, rpath: str, lpath: str, callback: Callback = DEFAULT_CALLBACK,
                        **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            return
        bucket, name = self._split(rpath)
        info = recent_object(self.recent, self.scheme, bucket, name)
        recent = info is not None
        if info is None:
            info = await self.store.stat(bucket, name)
        # A stale entry is forgotten once found so, as the read file forgets it.
        await get_file(self.store, info, lpath, recent=recent, budget=self._blocks,
                       callback=callback,
                       stale=functools.partial(self.recent.forget, join(self.scheme, bucket,
                                                                        name)))
