"""Row groups decoded once for the processes of a node that read them together.

DataLoader workers take the global batches in turn, so a row group of more
rows than a batch holds rows of several workers' batches, which want it at
about the same time: read by each, it is fetched and decoded once a worker.
Shared, the first worker to ask for it takes its lock (a file lock, let go
if the process dies), reads it as ever (fetched, lengths and page CRCs
checked, decoded) and writes the decoded table into the directory as an
Arrow IPC file, its crc32c after it, renamed into place whole; the others
wait for the lock and map the file (its crc32c checked: a damaged one is
removed and the row group read again), so their tables are its pages.

The directory (on ``/dev/shm`` where there is one) holds the latest
``keep`` row groups within ``max_bytes``, the oldest removed as new ones
come: a worker that comes to a row group after it went reads it again.
Where a write fails (a full ``/dev/shm``), the row group is used unshared.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..._core.integrity.crc import crc32c

__all__ = ["SharedGroups", "shared_base"]

# A waiter's first look at a lock held by another process, and its longest wait between.
_FIRST_WAIT_S = 0.001
_LONGEST_WAIT_S = 0.016
_SUFFIX = ".arrow"


def shared_base() -> str:
    """Where shared row groups go: ``/dev/shm`` (memory) where there is one."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


class SharedGroups:
    """Decoded row groups shared through a directory (see the module).

    Args:
        directory: the directory (created on first use).
        keep: most row groups it holds.
        max_bytes: most bytes it holds (the newest row group always stays).
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep: int, max_bytes: int) -> None:
        self.directory = Path(directory)
        self.keep, self.max_bytes = max(1, keep), max_bytes

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return self.directory / f"{digest}{_SUFFIX}"

    async def get(self, key: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """The table ``key`` names: another process's, else ``make()``'s (then shared).

        Args:
            key: what identifies the row group (file, version, row group, columns).
            make: reads it.

        Returns:
            A pyarrow Table.

        Raises:
            Exception: what ``make`` raises.
        """
        path = self._path(key)
        look = asyncio.ensure_future(asyncio.to_thread(self._look, path))
        try:
            found, lock, held = await asyncio.shield(look)
        except asyncio.CancelledError:
            look.add_done_callback(_let_go)  # the lock it may have taken
            raise
        if found is not None:
            return found
        try:
            if lock is not None and not held:
                await self._hold(lock)
                found = await asyncio.to_thread(_load, path)
                if found is not None:
                    return found
            table = await make()
            if lock is not None:
                await asyncio.to_thread(self._store, path, table)
            return table
        finally:
            if lock is not None:
                os.close(lock)  # lets the lock go

    def _look(self, path: Path) -> tuple[Any, int | None, bool]:
        """``(table, lock, held)``: the table if it is there; else its lock's
        descriptor (None: nowhere to share) and whether it was free and is
        now held, the table looked for again under it. One hand-off to a
        thread for what a reader first does."""
        found = _load(path)
        if found is not None:
            return found, None, False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None, None, False  # nowhere to share: read alone
        try:
            if not _try_lock(lock):
                return None, lock, False
            found = _load(path)  # made while this reader opened the lock
        except BaseException:
            os.close(lock)
            raise
        if found is not None:
            os.close(lock)
            return found, None, False
        return None, lock, True

    @staticmethod
    async def _hold(fd: int) -> None:
        # Polled, not a blocking flock in a thread: a thread pool full of
        # waiters would leave the holder no thread to decode with.
        wait = _FIRST_WAIT_S
        while not _try_lock(fd):
            await asyncio.sleep(wait)
            wait = min(_LONGEST_WAIT_S, wait * 2)

    def _store(self, path: Path, table: Any) -> None:
        import pyarrow as pa

        # Made in memory (the pool's pages, reused from row group to row
        # group), checksummed there, then written whole: writing it a buffer
        # at a time and reading it back for its checksum costs a third more CPU.
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        body = sink.getvalue()
        crc = crc32c(memoryview(body))
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(memoryview(body))
                out.write(crc.to_bytes(4, "little"))
            os.replace(tmp, path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            return  # a full /dev/shm: this row group goes unshared
        self._evict(path)

    def _evict(self, newest: Path) -> None:
        entries = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(_SUFFIX) and entry.path != str(newest):
                with contextlib.suppress(OSError):
                    stat = entry.stat()
                    entries.append((stat.st_mtime_ns, stat.st_size, Path(entry.path)))
        entries.sort(reverse=True)  # newest first
        held = newest.stat().st_size if newest.exists() else 0
        for k, (_, size, path) in enumerate(entries):
            held += size
            if k + 1 >= self.keep or held > self.max_bytes:
                path.unlink(missing_ok=True)
                path.with_suffix(".lock").unlink(missing_ok=True)


def _try_lock(fd: int) -> bool:
    """Take the lock on ``fd`` if no other process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False


def _let_go(look: asyncio.Future[tuple[Any, int | None, bool]]) -> None:
    """Close the lock a look whose reader was cancelled opened (and may hold)."""
    if not look.cancelled() and look.exception() is None:
        lock = look.result()[1]
        if lock is not None:
            os.close(lock)


def _load(path: Path) -> Any:
    """The table in ``path``, or None (none there, or damaged: then removed).

    Mapped, not read: the workers' tables are the same pages of the file (a
    read would copy the row group into fresh pages in each of them); the
    mapping outlives the file's removal, and a file is replaced, never
    written over.
    """
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as mapped:
            data = mapped.read_buffer()
    except OSError:
        return None
    body = data.slice(0, max(0, data.size - 4))
    if data.size < 4 or crc32c(memoryview(body)).to_bytes(4, "little") != data[-4:].to_pybytes():
        path.unlink(missing_ok=True)
        return None
    try:
        return pa.ipc.open_file(body).read_all()
    except (OSError, ValueError):
        path.unlink(missing_ok=True)
        return None
