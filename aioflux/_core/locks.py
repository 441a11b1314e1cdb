"""What every ``flock`` taker of aioflux does (the disk cache's entry locks,
the local store's replaced files).

A lock lives on an inode, while takers find it by path: a holder may unlink
or replace the file between a taker's ``open`` and its ``flock``, so a
taker checks that the file it locked is still the one at the path
(:func:`held_at`) and otherwise takes the new one. Release is
``LOCK_UN`` before ``close`` (:func:`unlock`): a child forked meanwhile
holds a copy of the descriptor, and closing ours alone would leave the lock
held.
"""

from __future__ import annotations

import fcntl
import os

__all__ = ["held_at", "unlock"]


def held_at(path: str, fd: int) -> bool:
    """Whether the file locked through ``fd`` is still the one at ``path``.

    Args:
        path: where takers find the lock.
        fd: the locked descriptor.

    Returns:
        False if the path is gone or names another file now.
    """
    try:
        here = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (here.st_ino, here.st_dev) == (mine.st_ino, mine.st_dev)


def unlock(fd: int) -> None:
    """Release the lock and close ``fd``.

    Args:
        fd: the locked descriptor.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
