"""Which small reads of files are done in the calling thread.

A thread's hand-off costs more than a small read of a file whose bytes are
in memory (a worker thread's wake-up, the loop's wake-up, futures on both
sides: ~190 Python calls against ~10 syscalls; perf/scenarios/workers.py).
A read is done where it is asked for when it cannot wait:

- on a memory filesystem (tmpfs, ramfs): its bytes are memory;
- on a local disk's filesystem (ext4, xfs, btrfs, f2fs, overlay) when its
  bytes are in the page cache: the read asks with ``RWF_NOWAIT`` and a read
  that would wait for the disk goes to a thread instead (:class:`WouldWait`).

Anything else (NFS, Lustre, FUSE, SMB...) can wait on a server in its
``open`` alone, and is always read in a thread. The filesystem is known by
the device number of the file's folder, looked up in
``/proc/self/mountinfo`` (none there, as off Linux: no read is done in the
caller).
"""

from __future__ import annotations

import errno
import os

__all__ = [
    "INLINE_MAX",
    "MEMORY",
    "NOWAIT",
    "Placement",
    "WouldWait",
    "filesystems",
    "on_disk",
    "pread_nowait",
]

# Most bytes a read done in the calling thread may take: a memory copy of
# this size is ~0.1 ms, as long as a thread's hand-off on a loaded machine;
# longer reads go to a thread so the event loop is not held.
INLINE_MAX = 1024 * 1024
MEMORY = frozenset({"tmpfs", "ramfs"})
# Local filesystems whose page-cache reads honour RWF_NOWAIT.
NOWAIT = frozenset({"ext4", "ext3", "ext2", "xfs", "btrfs", "f2fs", "overlay"})
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
# Folders a Placement remembers before it starts over.
_FOLDERS = 4096
# Device number -> whether it is a local disk's filesystem (see on_disk).
_disk_devices: dict[int, bool] = {}


class WouldWait(Exception):
    """The read would wait (a disk, a large file): do it in a thread."""


def filesystems(mountinfo: str) -> dict[int, str]:
    """Device number -> filesystem type, from ``/proc/self/mountinfo``'s text."""
    kinds: dict[int, str] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 3:
            continue
        major, _, minor = fields[2].partition(":")
        after = line.split(" - ", 1)[1].split()
        if after and major.isdecimal() and minor.isdecimal():
            kinds[os.makedev(int(major), int(minor))] = after[0]
    return kinds


def _mounted() -> dict[int, str]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            return filesystems(fh.read())
    except OSError:
        return {}


def on_disk(st: os.stat_result) -> bool:
    """Whether the file of ``st`` is on a local disk's filesystem (one of
    :data:`NOWAIT`'s), not memory or a network's (or one unknown)."""
    found = _disk_devices.get(st.st_dev)
    if found is None:
        if len(_disk_devices) > _FOLDERS:
            _disk_devices.clear()
        found = _disk_devices[st.st_dev] = _mounted().get(st.st_dev, "") in NOWAIT
    return found


class Placement:
    """How a store's small reads of each folder's files are done, looked up
    once a folder (at most :data:`_FOLDERS` remembered)."""

    def __init__(self, mounts: dict[int, str] | None = None) -> None:
        self._mounts = mounts
        self._folders: dict[str, tuple[str, int]] = {}

    def of(self, path: str) -> tuple[str, int]:
        """``(kind, device)`` of the file at ``path``: kind ``"memory"``,
        ``"nowait"`` or ``"thread"`` (also for a folder that is not there)."""
        folder = path.rpartition("/")[0] or "/"
        found = self._folders.get(folder)
        if found is None:
            found = self._folders[folder] = self._look(folder)
            if len(self._folders) > _FOLDERS:
                self._folders.clear()
        return found

    def _look(self, folder: str) -> tuple[str, int]:
        if not _RWF_NOWAIT:
            return "thread", -1
        try:
            device = os.stat(folder).st_dev
        except OSError:
            return "thread", -1
        if self._mounts is None:
            self._mounts = _mounted()
        fstype = self._mounts.get(device, "")
        if fstype in MEMORY:
            return "memory", device
        return ("nowait" if fstype in NOWAIT else "thread"), device


def pread_nowait(fd: int, view: memoryview, at: int) -> int:
    """``os.preadv`` that raises :class:`WouldWait` where the bytes are not
    in the page cache."""
    try:
        return os.preadv(fd, [view], at, _RWF_NOWAIT)
    except BlockingIOError:
        raise WouldWait from None
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:  # this filesystem has no RWF_NOWAIT
            raise WouldWait from None
        raise
