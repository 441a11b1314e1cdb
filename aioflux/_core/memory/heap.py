"""glibc's mmap threshold raised once, for the batches a DataLoader's main
process receives.

Every batch a DataLoader worker makes is unpickled in the main process
from a buffer grown to the batch's size. glibc serves an allocation at or
over its mmap threshold with fresh pages (an ``mmap``, a page fault every
4 KiB, an ``munmap`` when freed), and one below it from the heap, whose
freed memory the next batch reuses. The threshold starts at 128 KiB and
rises to the size of each larger mapped block freed, up to 32 MiB. Once a
process's history has left it between two sizes a batch's buffer grows
through (an aioflux listing in that process did), every batch takes fresh
pages again: ~8 us a 16 KiB sample of the one thread every batch crosses,
0.67x an ``open()`` loop whose process listed nothing, 1.05x with the heap
kept (perf scenario ``workers``, its ``*-loader-kept-w8`` rows).

So a dataset made in a process raises the threshold as freeing a 16 MiB
mapped block does: by glibc's own rule, so the threshold still follows the
process afterwards (up with larger blocks, never down). The block is never
touched: it costs an ``mmap`` and an ``munmap``. In exchange the heap may
keep up to 32 MiB freed (twice the threshold) instead of returning it, in
this process and in each DataLoader worker forked from it (which inherit
the threshold; a spawned worker makes no dataset, and keeps glibc's).
Off glibc nothing happens; where the threshold was set by hand (``mallopt``,
``MALLOC_MMAP_THRESHOLD_``), glibc no longer moves it and the block is
freed with no effect.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["PRIMED_THRESHOLD", "keep_batches_in_heap"]

#: The threshold a primed process has: batches up to this many bytes come
#: from the heap.
PRIMED_THRESHOLD = 16 * 1024 * 1024

_primed = False


def keep_batches_in_heap() -> None:
    """Raise glibc's mmap threshold to :data:`PRIMED_THRESHOLD`, once a
    process (see the module); nothing off glibc."""
    global _primed
    if _primed:
        return
    _primed = True
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)  # the process's own allocator
        libc.gnu_get_libc_version  # noqa: B018  # glibc alone has it
    except (OSError, AttributeError):
        return
    malloc, free = libc.malloc, libc.free
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    block = malloc(PRIMED_THRESHOLD)
    if block:
        free(block)
