"""What every ``flock`` taker of aioflux does (the disk cache's entry locks,
the local store's replaced files).

A lock lives on an inode, while takers find it by path: a holder may unlink
or replace the file between a taker's ``open`` and its ``flock``, so a
taker checks that the file it locked is still the one at the path
(:func:`held_at`) and otherwise takes the new one, a bounded number of
times. Only a path that names no file is a file gone from it: a stat of
the path failing otherwise (ESTALE for good on NFS, EIO) says nothing of
which file it names and fails the taker at once, and a path that keeps
naming another file fails it after its attempts, never spins it. Release is
``LOCK_UN`` before ``close`` (:func:`unlock`): a child forked meanwhile
holds a copy of the descriptor, and closing ours alone would leave the lock
held.
"""

from __future__ import annotations

import errno
import fcntl
import os

__all__ = ["held_at", "kept", "unlock"]

# A path that names no file (it, or a directory of it, was removed): the
# file locked is gone from it.
_GONE = (errno.ENOENT, errno.ENOTDIR)


def held_at(path: str, fd: int) -> bool:
    """Whether the file locked through ``fd`` is still the one at ``path``.

    Only a path that names no file (``ENOENT``, ``ENOTDIR``: the file, or a
    directory of it, was removed) is gone. Any other failure of its stat
    (``ESTALE`` on NFS, which the kernel has already retried, ``EIO``,
    ``EACCES``) is raised: it does not say which file the path names, and
    taken for a file replaced meanwhile it was tried again without end
    (or, bounded, until the attempts ran out, hiding the error).

    Args:
        path: where takers find the lock.
        fd: the locked descriptor.

    Returns:
        False if the path is gone or names another file now.

    Raises:
        OSError: the stat of ``fd`` failed, or the path's failed otherwise
            than by naming no file. The lock is still held: the caller
            releases it.
    """
    try:
        here = os.stat(path)
    except OSError as exc:
        if exc.errno not in _GONE:
            raise
        return False
    mine = os.fstat(fd)
    return (here.st_ino, here.st_dev) == (mine.st_ino, mine.st_dev)


def kept(path: str, fd: int) -> bool:
    """:func:`held_at`, the lock released unless it is kept (the file at
    ``path``): a taker takes the new file at the path next, or fails.

    Args:
        path: where takers find the lock.
        fd: the locked descriptor.

    Returns:
        True: the lock is held on the file at ``path``. False: released
        (the path is gone or names another file now).

    Raises:
        OSError: as :func:`held_at`, once the lock is released (left
            locked, the file stayed held for the life of the process, and
            every later taker, here or in another process, waited for it).
    """
    try:
        mine = held_at(path, fd)
    except BaseException:
        unlock(fd)
        raise
    if not mine:
        unlock(fd)
    return mine


def unlock(fd: int) -> None:
    """Release the lock and close ``fd``.

    Args:
        fd: the locked descriptor.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
