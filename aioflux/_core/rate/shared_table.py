"""Request-rate controllers' states shared by the processes of a machine.

All of a user's states live in one small file, a table of
:data:`SLOTS` slots: ``/dev/shm/aioflux-rate-<uid>/rates-6`` (memory, cleared
at boot) or, where there is no ``/dev/shm``, the same under
``tempfile.gettempdir()``. A key (endpoint, bucket, kind) takes the slot
its hash names, or one of the next :data:`PROBES`; when all of those are
taken, the one unused the longest is reused. So the file never grows,
whatever number of endpoints and buckets (a test suite's emulators on new
ports each run) it has seen.

Every process maps the file (``mmap``, shared) and changes it under
``flock``: there is no server process to start or to outlive. A slot holds
numbers only (:class:`aioflux._core.rate.controller.RateState`), no lease and no
process id, so a process killed at any point leaves nothing to expire.

A slot's first byte is its "pacing on" flag, read without the lock on
every request; its third says the node owes throttles (unpaced successes
are then counted, under the lock). A forked child keeps the mapping (it is
the same memory) but opens its own file description for ``flock``: locks belong to an open
file description, which a fork shares, so the parent's and the child's
would not exclude each other. Where no file can be made (a read-only
system, no ``fcntl``), the states stay in the process.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .controller import RateState

try:
    import fcntl
except ImportError:  # Windows: no flock; each process paces alone
    fcntl = None  # type: ignore[assignment]

__all__ = ["OWED", "PROBES", "SLOTS", "Entry", "SharedRate", "Table", "entries", "reset",
           "shared_rate", "state_dir"]

log = logging.getLogger("aioflux.rate")

# pacing flag, opened flag, owed flag, magic, version, epoch, then the
# times, rates and counts (see RateState).
_STATE = struct.Struct("<BBBxIQq8dqq6d3q2dqd4d")
_MAGIC = 0xA10F1005
#: the byte of a slot that says the node owes throttles (``debt`` > 0)
OWED = 2
# Where a slot's time of the last cut is (``decreased_at``: after the
# flags, magic, version, epoch, rate, tokens and refill time).
_CUT_AT = struct.calcsize("<BBBxIQq3d")
_TIME = struct.Struct("<d")
# After the state: the key's digest (zeros: a slot never used) and when
# the slot was last used.
_DIGEST_AT = _STATE.size
_DIGEST = 16
_USED = struct.Struct("<d")
_USED_AT = _DIGEST_AT + _DIGEST
SLOT = 272
# The file's name carries its layout's version: a machine running an older
# aioflux too keeps that one's states apart (in ``rates``, ``rates-2`` to ``rates-5``).
_FILE = "rates-6"
#: slots in the table (68 KiB)
SLOTS = 256
#: slots a key may take, from the one its hash names
PROBES = 16
_EMPTY = bytes(_DIGEST)


def state_dir() -> str:
    """The folder of the shared rate table of this user.

    Returns:
        ``/dev/shm/aioflux-rate-<uid>`` if ``/dev/shm`` is writable, else
        ``aioflux-rate-<uid>`` in ``tempfile.gettempdir()``.
    """
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
        else tempfile.gettempdir()
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(base, f"aioflux-rate-{uid}")


class Table:
    """The mapped table of slots, one per process and folder.

    Args:
        directory: where the file ``rates-6`` lives (default :func:`state_dir`).
    """

    def __init__(self, directory: str | None = None) -> None:
        self.path: str | None = None
        self._fd = -1
        self._pid = os.getpid()
        self.lock = threading.Lock()
        #: the table's bytes; a bytearray when no file could be shared
        self.memory: mmap.mmap | bytearray
        try:
            self.memory = self._map(directory or state_dir())
        except OSError as exc:
            log.info("request rates kept in this process only: %s", exc)
            self.memory = bytearray(SLOT * SLOTS)

    def _map(self, directory: str) -> mmap.mmap:
        if fcntl is None:
            raise OSError("no fcntl.flock on this system")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, _FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size < SLOT * SLOTS:
                    os.ftruncate(fd, SLOT * SLOTS)  # zeros: empty slots
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            mapped = mmap.mmap(fd, SLOT * SLOTS)
        except BaseException:
            os.close(fd)
            raise
        self.path, self._fd = path, fd
        return mapped

    @property
    def shared(self) -> bool:
        """Whether the table is in a file other processes see."""
        return self.path is not None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the table (this process's threads and the other processes)."""
        if os.getpid() != self._pid:
            self._after_fork()
        with self.lock:
            if self._fd >= 0:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                if self._fd >= 0:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _after_fork(self) -> None:
        # The mapping is the same memory in the child; the lock needs a
        # file description of the child's own, and a thread lock that no
        # thread of the parent's held at the fork.
        self._pid = os.getpid()
        self.lock = threading.Lock()
        if self.path is not None:
            try:
                self._fd = os.open(self.path, os.O_RDWR)
            except OSError as exc:
                log.info("request rates kept in this process only: %s", exc)
                self.path, self._fd, self.memory = None, -1, bytearray(self.memory)

    def claim(self, digest: bytes, now: float) -> int:
        """The slot of ``digest``, taking one if it has none (table held).

        Args:
            digest: the key's hash.
            now: monotonic time.

        Returns:
            The slot's number.
        """
        memory = self.memory
        first = int.from_bytes(digest[:4], "little") % SLOTS
        oldest, oldest_at = first, float("inf")
        for probe in range(PROBES):
            slot = (first + probe) % SLOTS
            at = slot * SLOT
            found = bytes(memory[at + _DIGEST_AT:at + _DIGEST_AT + _DIGEST])
            if found == digest:
                return slot
            if found == _EMPTY:
                oldest = slot
                break  # slots are never emptied: the key is not further on
            (used,) = _USED.unpack_from(memory, at + _USED_AT)
            if used > now + 1.0:
                used = 0.0  # a time of a previous boot
            if used < oldest_at:
                oldest, oldest_at = slot, used
        at = oldest * SLOT
        memory[at:at + SLOT] = bytes(SLOT)
        memory[at + _DIGEST_AT:at + _DIGEST_AT + _DIGEST] = digest
        _USED.pack_into(memory, at + _USED_AT, now)
        return oldest

    def holds(self, slot: int, digest: bytes) -> bool:
        """Whether ``slot`` is still ``digest``'s (another key may have taken it)."""
        at = slot * SLOT + _DIGEST_AT
        return bytes(self.memory[at:at + _DIGEST]) == digest

    def read(self, slot: int, now: float) -> tuple[RateState, int]:
        """A slot's state and version (table held)."""
        (flag, opened, _owed, magic, version, epoch, rate, tokens, refilled, decreased, throttle,
         started, resume, window, ok, refused, served, anchor, peak, noise, noise_at,
         judged_at, judging, judged_ok, judged_refused, debt, owed_at,
         owed_ok, steady, window_rate, starting,
         starting_at, reached) = _STATE.unpack_from(self.memory, slot * SLOT)
        state = RateState(bool(flag), bool(opened), rate, tokens, refilled, decreased, throttle,
                          started, epoch, resume, window, ok, refused, served, anchor, peak,
                          noise, noise_at, judging, judged_at, judged_ok, judged_refused,
                          debt, owed_at, owed_ok, steady, window_rate, starting,
                          starting_at, reached)
        if magic != _MAGIC:
            # A slot never written, or garbage: none of it is a state, its
            # version and epoch included (all-ones overflowed a write's +1).
            return RateState(), 0
        if max(refilled, decreased, throttle, started, window, noise_at, judged_at, owed_at,
               starting_at) > now + 1.0:
            # Of a previous boot (a temporary folder that outlived a
            # reboot: CLOCK_MONOTONIC restarted).
            state = RateState(epoch=epoch)
        return state, version

    def write(self, slot: int, state: RateState, version: int, now: float) -> None:
        """Store a slot's state (table held)."""
        at = slot * SLOT
        _STATE.pack_into(self.memory, at, int(state.throttled), int(state.opened),
                         int(state.debt > 0.0), _MAGIC, version, state.epoch, state.rate,
                         state.tokens, state.refilled_at,
                         state.decreased_at, state.throttle_at, state.started_at, state.resume_at,
                         state.window_at, state.ok, state.refused, state.served,
                         state.anchor, state.peak, state.noise, state.noise_at,
                         state.judged_at, state.judging, state.judged_ok,
                         state.judged_refused, state.debt, state.owed_at, state.owed_ok,
                         state.steady, state.window_rate, state.starting,
                         state.starting_at, state.reached)
        _USED.pack_into(self.memory, at + _USED_AT, now)


class SharedRate:
    """One key's :class:`RateState`, in a slot of a :class:`Table`.

    Args:
        key: endpoint, bucket and kind.
        table: the table (default: the process's one in :func:`state_dir`).
    """

    def __init__(self, key: str, table: Table | None = None) -> None:
        self.key = key
        self.table = table or _table()
        self._digest = hashlib.sha256(key.encode()).digest()[:_DIGEST]
        with self.table.locked():
            self._slot = self.table.claim(self._digest, time.monotonic())
        #: the table's bytes and where this key's slot starts: ``memory[at]``
        #: is its pacing flag, read without the lock on every request
        self.memory = self.table.memory
        self.at = self._slot * SLOT

    @property
    def paced(self) -> bool:
        """The slot's pacing flag (``memory[at]``), read without the lock."""
        return self.memory[self.at] != 0

    @property
    def opened(self) -> bool:
        """The slot's opened flag (``memory[at + 1]``), read without the lock."""
        return self.memory[self.at + 1] != 0

    @property
    def owed(self) -> bool:
        """The slot's owed flag (``memory[at + OWED]``), read without the lock."""
        return self.memory[self.at + OWED] != 0

    @property
    def cut_at(self) -> float:
        """When the rate was last cut or pacing started (monotonic), read
        without the lock: a request that reserved its token before then
        reserves again at the new rate."""
        return float(_TIME.unpack_from(self.memory, self.at + _CUT_AT)[0])

    @property
    def shared(self) -> bool:
        """Whether the state is in a file other processes see."""
        return self.table.shared

    @contextlib.contextmanager
    def locked(self) -> Iterator[RateState]:
        """The state, to read and change; written back on exit.

        Yields:
            The current state (a copy; changes to it are stored).
        """
        table = self.table
        with table.locked():
            now = time.monotonic()
            if not table.holds(self._slot, self._digest):
                # Reused for another key while this one was idle: this
                # key's slot is found again, or taken afresh.
                self._slot = table.claim(self._digest, now)
                self.at = self._slot * SLOT
            self.memory = table.memory  # a bytearray if a fork could not reopen it
            state, version = table.read(self._slot, now)
            yield state
            table.write(self._slot, state, version + 1, now)


_TABLE: Table | None = None
_OPEN: dict[str, SharedRate] = {}
_OPEN_LOCK = threading.Lock()


def _table() -> Table:
    global _TABLE
    if _TABLE is None:
        with _OPEN_LOCK:
            if _TABLE is None:
                _TABLE = Table()
    return _TABLE


def shared_rate(key: str) -> SharedRate:
    """The process's one :class:`SharedRate` of ``key`` (taken on first use).

    Clients of one process share it, as their processes do.

    Args:
        key: endpoint, bucket and kind.

    Returns:
        The shared state.
    """
    found = _OPEN.get(key)
    if found is None:
        table = _table()
        with _OPEN_LOCK:
            found = _OPEN.get(key)
            if found is None:
                found = _OPEN[key] = SharedRate(key, table)
                _name(found)
    return found


# For ``aioflux rate show|reset``. The table holds a key's digest only: its
# text is kept beside it, in ``names-5``, one record of _NAME bytes a slot
# (digest, length, key), written and read under the table's lock.
_NAMES = "names-5"
_NAME = 512
_NAME_HEAD = struct.Struct("<16sH")


@dataclass(frozen=True)
class Entry:
    """A slot in use.

    Attributes:
        slot: its number.
        key: endpoint, bucket and kind (``endpoint|bucket|read``), or None
            where no process recorded it.
        state: the key's state.
        used_at: when a process last used it (monotonic).
    """

    slot: int
    key: str | None
    state: RateState
    used_at: float


def _name(shared: SharedRate) -> None:
    table, text = shared.table, shared.key.encode()
    if table.path is None or len(text) > _NAME - _NAME_HEAD.size:
        return
    record = (_NAME_HEAD.pack(shared._digest, len(text)) + text).ljust(_NAME, b"\0")
    try:
        with table.locked():
            fd = os.open(os.path.join(os.path.dirname(table.path), _NAMES),
                         os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.pwrite(fd, record, shared._slot * _NAME)
            finally:
                os.close(fd)
    except OSError as exc:
        log.info("%s: key not recorded for `aioflux rate show`: %s", shared.key, exc)


def _entries(table: Table, now: float) -> list[Entry]:
    """The slots in use (table held)."""
    named: dict[bytes, str] = {}
    if table.path is not None:
        try:
            with open(os.path.join(os.path.dirname(table.path), _NAMES), "rb") as file:
                data = file.read(_NAME * SLOTS)
        except FileNotFoundError:
            data = b""
        for at in range(0, len(data) - _NAME_HEAD.size + 1, _NAME):
            digest, length = _NAME_HEAD.unpack_from(data, at)
            start = at + _NAME_HEAD.size
            named[digest] = data[start:start + length].decode(errors="replace")
    found = []
    for slot in range(SLOTS):
        at = slot * SLOT
        digest = bytes(table.memory[at + _DIGEST_AT:at + _DIGEST_AT + _DIGEST])
        if digest != _EMPTY:
            (used,) = _USED.unpack_from(table.memory, at + _USED_AT)
            found.append(Entry(slot, named.get(digest), table.read(slot, now)[0], used))
    return found


def entries(table: Table | None = None) -> list[Entry]:
    """The keys of the table and their states, read under its lock.

    Args:
        table: the table (default: the process's one in :func:`state_dir`).

    Returns:
        An entry per slot in use, in the order of the slots.
    """
    table = table or _table()
    with table.locked():
        return _entries(table, time.monotonic())


def reset(chosen: Callable[[Entry], bool], table: Table | None = None) -> list[Entry]:
    """Forget the states ``chosen`` picks, under the table's lock: each key
    is then as one never throttled (not paced, no throttles owed, a slow
    start for the next process), ``epoch`` counting on.

    Args:
        chosen: whether to reset an entry (called with the table held).
        table: the table (default: the process's one in :func:`state_dir`).

    Returns:
        The entries reset, as they were.
    """
    table = table or _table()
    with table.locked():
        now = time.monotonic()
        done = [entry for entry in _entries(table, now) if chosen(entry)]
        for entry in done:
            version = table.read(entry.slot, now)[1]
            table.write(entry.slot, RateState(epoch=entry.state.epoch), version + 1, now)
    return done
