"""Files kept open across reads in the calling thread, by one reader.

A read of a few ranges of a file in memory costs about as much in its
``open``, ``fstat`` and ``close`` and in finding the file (its name checked,
its filesystem looked up) as in the reads (perf scenario workers: a
DataLoader worker of 16 reads ~3 samples a read). A reader that reads the
same files again and again (a shard dataset's iterator) keeps the last
:data:`_HELD` of them open. Each is pinned to the file it opened: after
every read, one ``stat`` checks that its path still names that file, same
device, inode, size and modification time, so a file replaced, deleted or
written in place since it was opened is read as such (``NotFound``), never
as its old bytes.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._core.errors import ChecksumMismatch, NotFound, describe
from ._files import bytes_nowait, check_generation, generation_of, open_file, pread_spans
from ._inline import INLINE_MAX, WouldWait

if TYPE_CHECKING:
    from ._store import LocalStore

__all__ = ["HeldFiles"]

# Files one reader keeps open (a shard dataset reads ~10 shards at a time:
# those of a shuffle window).
_HELD = 16


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class _Held:
    """One open file, its stat when opened, and how it is read here."""

    def __init__(self, bucket: str, name: str, here: tuple[str, str, int],
                 generation: int | None) -> None:
        path, kind, device = here
        fd, st = open_file("read", bucket, name, path=path, restore=False)
        try:
            if st.st_dev != device:
                raise WouldWait  # a mount on the file itself
            check_generation(describe("read", bucket, name, "file"), bucket, name, st,
                             generation)
        except BaseException:
            os.close(fd)
            raise
        self.path, self.fd, self.st, self.identity = path, fd, st, _identity(st)
        self.pread = os.pread if kind == "memory" else bytes_nowait

    def read(self, bucket: str, name: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        if sum(end - start for start, end in ranges) > INLINE_MAX:
            raise WouldWait
        try:
            out = pread_spans(self.fd, self.st.st_size, ranges, self.pread, bucket, name)
        except ChecksumMismatch:
            self._check(bucket, name)  # cut short since it was opened: NotFound
            raise
        self._check(bucket, name)
        return out

    def _check(self, bucket: str, name: str) -> None:
        """The path still names the file opened, as it was opened (see the
        module). One ``stat`` after the reads, not one before and an
        ``fstat`` after: it sees all that they would (a file replaced,
        deleted or written before or while it was read) for a syscall less
        a read, and a worker of 16 reads a run every 3-4 samples."""
        now = os.stat(self.path)
        if _identity(now) != self.identity:
            raise NotFound(f"{describe('read', bucket, name, 'file')} failed: generation "
                           f"{generation_of(self.st)} is gone: the file was replaced or "
                           f"written since it was opened (now {generation_of(now)})",
                           operation="read", bucket=bucket, name=name)

    def close(self) -> None:
        os.close(self.fd)


class HeldFiles:
    """The files one reader, in one thread, keeps open (see the module);
    :meth:`close` when done (they are closed when collected too).

    Args:
        store: the store whose reads these are (its placement, its stats).
    """

    def __init__(self, store: LocalStore) -> None:
        self._store = store
        self._files: collections.OrderedDict[tuple[str, str, int | None], _Held] = \
            collections.OrderedDict()

    def read_ranges(self, bucket: str, name: str, ranges: Sequence[tuple[int, int]], *,
                    generation: int | None = None) -> list[bytes] | None:
        """``LocalStore.read_ranges`` in this thread, through a file kept open:
        the ranges' bytes, or None where the read could wait (then read it
        in a thread).

        Raises:
            As ``LocalStore.read_ranges`` does.
        """
        spans = [(int(start), int(end)) for start, end in ranges]
        key = (bucket, name, generation)
        held = self._files.get(key)
        if held is not None:
            self._files.move_to_end(key)
            return self._store._read_held(bucket, name, lambda: self._read(key, held, spans),
                                          _total)

        def first(here: tuple[str, str, int]) -> list[bytes]:
            opened = _Held(bucket, name, here, generation)
            self._files[key] = opened
            if len(self._files) > _HELD:
                self._files.popitem(last=False)[1].close()
            return self._read(key, opened, spans)

        return self._store._here(bucket, name, first, _total)

    def _read(self, key: tuple[str, str, int | None], held: _Held,
              spans: list[tuple[int, int]]) -> list[bytes]:
        try:
            return held.read(key[0], key[1], spans)
        except WouldWait:
            raise
        except BaseException:
            # Replaced, deleted, rewritten: opened again (and checked) next time.
            if self._files.get(key) is held:
                del self._files[key]
                held.close()
            raise

    def close(self) -> None:
        """Close the files held."""
        while self._files:
            self._files.popitem()[1].close()

    def __del__(self) -> None:
        self.close()


def _total(datas: list[bytes]) -> int:
    return sum(len(data) for data in datas)
