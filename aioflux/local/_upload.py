"""``LocalUpload``: the writer engine's streaming upload into one file.

Parts land at their offsets (``(number - 1) * part_size``) of a temporary
file next to the target, so they may arrive in any order and concurrently;
:meth:`LocalUpload.finish` checks the whole file against the writer's
running crc32c and renames it into place (links it, when it must not
replace a file), :meth:`LocalUpload.abort` removes
it. Nothing is visible under the target's name before the rename.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .._core.concurrency.cleanup import to_the_end
from .._core.concurrency.window import shared_task
from .._core.errors import InvalidArgument
from .._core.integrity.crc import Crc32c
from .._core.records.types import ObjectInfo
from .._core.records.urls import format_url
from . import _files, _writes

if TYPE_CHECKING:
    from ._store import LocalStore

__all__ = ["PARTS_IN_FLIGHT", "LocalUpload"]

# A file's parts in flight: more only wait, each in a part buffer of fresh
# memory (ckpt_file, 256 MiB to /dev/shm in 8 MiB parts: 16 in flight
# faulted ~22k pages, 4 ~10k, 2 ~6k).
PARTS_IN_FLIGHT = 4

T = TypeVar("T")


class LocalUpload:
    """A streaming write into a temporary file, renamed on :meth:`finish`.

    Args:
        store: the store whose worker threads do the writing.
        bucket: the first directory of the path.
        name: the rest of the path.
        part_size: size of every part but the last.
        if_generation_match: publish only if the file is then this
            generation (0: absent).
    """

    mode = "file"
    #: Parts the writer engine keeps in flight at most (fewer if asked): a
    #: part is a copy into the page cache, done before the next is filled,
    #: and writes of one file go one at a time through its inode lock.
    parts_in_flight = PARTS_IN_FLIGHT

    def __init__(self, store: LocalStore, bucket: str, name: str, part_size: int,
                 if_generation_match: int | None = None) -> None:
        self._store = store
        self.bucket = bucket
        self.name = name
        self.part_size = part_size
        self.if_generation_match = if_generation_match
        self._temp: str | None = None
        self._creating: asyncio.Future[str] | None = None
        self._closed = False

    async def _run(self, work: Callable[[], T], stop: threading.Event | None = None) -> T:
        return await self._store._run("write", self.bucket, self.name, work, stop=stop)

    async def _temp_path(self) -> str:
        """The temporary file, created by the first part."""
        self._check_open()
        if self._creating is None:
            # Awaited by every part: see shared_task.
            self._creating = shared_task(self._create())
        # Shielded: a part cancelled while the file is being created (the
        # writer aborting) must not lose its name, or abort() could not
        # remove it.
        return await asyncio.shield(self._creating)

    async def _create(self) -> str:
        temp, fd = await self._run(lambda: _writes.open_temp(self.bucket, self.name))
        os.close(fd)  # each part opens it anew (see _writes.write_at)
        if self._closed:  # aborted while it was being created
            _writes.unlink_quietly(temp)
            self._check_open()
        self._temp = temp
        return temp

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument(f"write {format_url('file', self.bucket, self.name)}: the "
                                  "upload was finished or aborted")

    async def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Write part ``number`` at its offset.

        Args:
            number: 1-based part number.
            data: the part.
            checksum: unused (the whole file is checked on finish).

        Raises:
            InvalidArgument: the upload was finished or aborted.
        """
        temp = await self._temp_path()
        offset = (number - 1) * self.part_size
        await self._run(lambda: _writes.write_at(temp, data, offset))

    async def finish(self, last_number: int, tail: memoryview | None, expected: Crc32c,
                     tail_checksum: int | None = None) -> ObjectInfo:
        """Write the tail, check the whole file's crc32c, fsync, rename.

        Args:
            last_number: the tail's part number.
            tail: the last bytes (may be empty).
            expected: crc32c and length of everything written.
            tail_checksum: unused.

        Returns:
            ObjectInfo of the published file.

        Raises:
            ChecksumMismatch: the file read back differs (nothing published).
            PreconditionFailed: the file is not ``if_generation_match``
                (nothing published).
            InvalidArgument: the upload was finished or aborted.
        """
        temp = await self._temp_path()
        self._closed = True
        self._temp = None
        offset = (last_number - 1) * self.part_size
        # Cancelled (Ctrl-C in close()) before the rename: nothing published.
        stop = threading.Event()
        return await self._run(lambda: _writes.finish_temp(temp, self.bucket, self.name, tail,
                                                           offset, expected,
                                                           self.if_generation_match, stop),
                               stop)

    async def abort(self) -> None:
        """Remove the temporary file. Safe to call twice.

        A file still being created (its part cancelled by the writer) is
        waited for, so none is left when this returns.
        """
        self._closed = True
        creating = self._creating
        if creating is not None and not creating.done():
            await asyncio.wait([creating])  # it removes the file itself, seeing _closed
        temp, self._temp = self._temp, None
        if temp is None:
            return
        # A part still being written holds its own descriptor: its bytes go
        # to the unlinked file and vanish with it. Removed in a worker
        # thread: unlinking a large file frees its extents (1 GiB on ext4:
        # 0.2 s, every transfer on the loop stalled), and an NFS remove is a
        # round trip. Not behind the store's limiter: an abort waits for no
        # one, and a cancelled one still waits for the removal.
        loop = asyncio.get_running_loop()
        try:
            removing = loop.run_in_executor(self._store._executor(), _writes.unlink_quietly, temp)
        except RuntimeError:
            # At interpreter exit (a writer discarded by the exit hook) the
            # thread pools take no more work: here, then.
            _writes.unlink_quietly(temp)
            return
        try:
            await to_the_end(removing)
        except OSError as exc:
            raise _files.mapped(exc, "abort upload", self.bucket, self.name) from exc
