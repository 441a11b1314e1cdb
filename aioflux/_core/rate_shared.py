"""A request-rate controller's state shared by the processes of a machine.

Each (endpoint, bucket, kind) has one small file, named by a hash of the
key, in ``/dev/shm/aioflux-rate-<uid>/`` (memory, cleared at boot) or, where
there is no ``/dev/shm``, in the same folder under ``tempfile.gettempdir()``.
Every process maps it (``mmap``, shared) and changes it under ``flock``:
there is no server process to start or to outlive. The file holds numbers
only (:class:`aioflux._core.rate.RateState`, 104 bytes), no lease and no
process id, so a process killed at any point leaves nothing to expire.
Files are reused by every later process of the same user and key.

The first byte is the "pacing on" flag, read without the lock on every
request (one byte of shared memory). A forked child keeps the mapping (it
is the same memory) but opens its own file description for ``flock``:
locks belong to an open file description, which a fork shares, so the
parent's and the child's would not exclude each other. Where no file can
be made (a read-only system, no ``fcntl``), the state stays in the process.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mmap
import os
import struct
import tempfile
import threading
import time
from collections.abc import Iterator

from .rate import RateState

try:
    import fcntl
except ImportError:  # Windows: no flock; each process paces alone
    fcntl = None  # type: ignore[assignment]

__all__ = ["SharedRate", "shared_rate", "state_dir"]

log = logging.getLogger("aioflux.rate")

# flag, magic, version, epoch, then the times and rates (see RateState).
_LAYOUT = struct.Struct("<B3xIQq8dqq")
_MAGIC = 0xA10F1002
SIZE = _LAYOUT.size


def state_dir() -> str:
    """The folder of the shared rate files of this user.

    Returns:
        ``/dev/shm/aioflux-rate-<uid>`` if ``/dev/shm`` is writable, else
        ``aioflux-rate-<uid>`` in ``tempfile.gettempdir()``.
    """
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
        else tempfile.gettempdir()
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(base, f"aioflux-rate-{uid}")


class SharedRate:
    """One key's :class:`RateState`, in a mapped file every process shares.

    Args:
        key: names the file (hashed): endpoint, bucket and kind.
        directory: where the file lives (default :func:`state_dir`).
    """

    def __init__(self, key: str, directory: str | None = None) -> None:
        self.key = key
        self.path: str | None = None
        self._fd = -1
        self._pid = os.getpid()
        self._thread_lock = threading.Lock()
        #: the mapped bytes (``flag[0]`` is the pacing flag); a bytearray
        #: when no file could be shared
        self.flag: mmap.mmap | bytearray
        try:
            self.flag = self._map(directory or state_dir())
        except OSError as exc:
            log.info("request rate of %s kept in this process only: %s", key, exc)
            self.flag = bytearray(SIZE)

    def _map(self, directory: str) -> mmap.mmap:
        if fcntl is None:
            raise OSError("no fcntl.flock on this system")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        digest = hashlib.sha256(self.key.encode()).hexdigest()[:32]
        path = os.path.join(directory, f"{digest}.rate")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size < SIZE:
                    os.ftruncate(fd, SIZE)  # zeros: a fresh, unpaced state
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            mapped = mmap.mmap(fd, SIZE)
        except BaseException:
            os.close(fd)
            raise
        self.path, self._fd = path, fd
        return mapped

    @property
    def shared(self) -> bool:
        """Whether the state is in a file other processes see."""
        return self.path is not None

    @contextlib.contextmanager
    def locked(self) -> Iterator[RateState]:
        """The state, to read and change; written back on exit.

        Yields:
            The current state (a copy; changes to it are stored).
        """
        if os.getpid() != self._pid:
            self._after_fork()
        with self._thread_lock:
            if self._fd >= 0:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                state, version = self._read()
                yield state
                self._write(state, version + 1)
            finally:
                if self._fd >= 0:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _after_fork(self) -> None:
        # The mapping is the same memory in the child; the lock needs a
        # file description of the child's own, and a thread lock that no
        # thread of the parent's held at the fork.
        self._pid = os.getpid()
        self._thread_lock = threading.Lock()
        if self.path is not None:
            try:
                self._fd = os.open(self.path, os.O_RDWR)
            except OSError as exc:
                log.info("request rate of %s kept in this process only: %s", self.key, exc)
                self.path, self._fd, self.flag = None, -1, bytearray(self.flag[:SIZE])

    def _read(self) -> tuple[RateState, int]:
        (flag, magic, version, epoch, rate, tokens, refilled, decreased, throttle, started,
         resume, window, sent, refused) = _LAYOUT.unpack_from(self.flag)
        state = RateState(bool(flag), rate, tokens, refilled, decreased, throttle, started,
                          epoch, resume, window, sent, refused)
        now = time.monotonic()
        if magic != _MAGIC or max(refilled, decreased, throttle, started, window) > now + 1.0:
            # A file of another layout, or times of a previous boot (a
            # temporary folder that outlived a reboot: CLOCK_MONOTONIC restarted).
            state = RateState(epoch=epoch)
        return state, version

    def _write(self, state: RateState, version: int) -> None:
        _LAYOUT.pack_into(self.flag, 0, int(state.throttled), _MAGIC, version, state.epoch,
                          state.rate, state.tokens, state.refilled_at, state.decreased_at,
                          state.throttle_at, state.started_at, state.resume_at,
                          state.window_at, state.sent, state.refused)

    def close(self) -> None:
        """Unmap and close (the file stays, for the next process)."""
        if isinstance(self.flag, mmap.mmap):
            self.flag.close()
        if self._fd >= 0 and os.getpid() == self._pid:
            os.close(self._fd)
        self._fd = -1


_OPEN: dict[str, SharedRate] = {}
_OPEN_LOCK = threading.Lock()


def shared_rate(key: str) -> SharedRate:
    """The process's one :class:`SharedRate` of ``key`` (opened on first use).

    Clients of one process share it, as their processes do.

    Args:
        key: endpoint, bucket and kind.

    Returns:
        The shared state.
    """
    found = _OPEN.get(key)
    if found is None:
        with _OPEN_LOCK:
            found = _OPEN.get(key)
            if found is None:
                found = _OPEN[key] = SharedRate(key)
    return found
