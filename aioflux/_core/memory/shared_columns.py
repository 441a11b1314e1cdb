"""One block of read-only bytes that a node's processes share by descriptor.

An :class:`~aioflux._core.memory.object_index.ObjectIndex` keeps its columns in one
:class:`Block`. A small block is a plain ``bytearray``. From :data:`SHARE_MIN`
bytes on, it is an anonymous memory file (``memfd_create``, Linux): pages
that belong to no file name, mapped ``MAP_SHARED``.

How a process reaches it:

- **forked** workers inherit the mapping itself: nothing is copied, not
  even on write (PyTorch issue 13246 copies Python objects page by page,
  but these pages hold no object and no reference count);
- **spawned** (and forkserver) workers get the descriptor: pickled by
  :mod:`multiprocessing`'s ``ForkingPickler`` (which starts those
  processes, and sends over its queues), a block is a ``DupFd`` and its
  length, so a pickled dataset does not grow with its objects; the child
  maps the same pages read-only;
- any **other pickle** (``pickle.dumps``, a DDP broadcast to other nodes)
  carries the bytes themselves.

Why a descriptor and no name: whatever has a name (``/dev/shm/...``, a
temporary file) is left behind when every process that knew it is killed
(``SIGKILL``, the out-of-memory killer), and then stays until someone reaps
it. An anonymous file has no name to leave: the kernel frees its pages when
the last descriptor and the last mapping are gone, however each process
ended. Without ``memfd_create`` (not Linux) the block is a temporary file
unlinked as it is made (``tempfile.TemporaryFile``: ``O_TMPFILE`` where it
exists), in ``/dev/shm`` where that exists, the default temporary
directory otherwise; only a process killed inside that call leaves a name.
Nor is a memory file bound by the size of ``/dev/shm`` (64 MiB in a
default Docker container).

Cost: the block's bytes once per node, whatever the number of processes
(each process's resident size counts the pages it touched, as shared
memory), plus per process one descriptor and one mapping (no copy).
"""

from __future__ import annotations

import mmap
import os
import tempfile
import weakref
from typing import Any

from ..errors import StorageError

__all__ = ["SHARE_MIN", "TEMP_DIR", "Block", "new_block"]

# Below this a block is bytes, pickled by value: a descriptor and a mapping
# per index would cost more than a spawn worker's copy of a few hundred KiB.
SHARE_MIN = 1 << 20
_MEMFD_NAME = "aioflux-index"
# Where a block goes without memfd_create: None is /dev/shm where it
# exists, else the default temporary directory.
TEMP_DIR: str | None = None
_registered = False


class Block:
    """Bytes, in memory of this process or shared (see the module doc).

    Attributes:
        data: the bytes (a ``bytearray``, or an ``mmap``).
        view: a memoryview of them.
        fd: the memory file's descriptor (None for plain bytes).
    """

    def __init__(self, data: bytearray | mmap.mmap, fd: int | None) -> None:
        self.data = data
        self.view = memoryview(data)
        self.fd = fd
        if fd is not None:
            _register()
            # The descriptor lives as long as the block; the pages as long
            # as any descriptor or mapping of them in any process.
            weakref.finalize(self, os.close, fd)

    def __len__(self) -> int:
        return len(self.view)

    @property
    def shared(self) -> bool:
        """Whether the bytes are a memory file that other processes map."""
        return self.fd is not None

    def __reduce__(self) -> tuple[Any, ...]:
        # A plain pickle may travel to another machine: the bytes themselves.
        return _from_bytes, (bytes(self.view),)


def _from_bytes(data: bytes) -> Block:
    block = new_block(len(data))
    block.view[:] = data
    return block


def _reduce_shared(block: Block) -> tuple[Any, ...]:
    """ForkingPickler's form: the descriptor, for a process of this node."""
    if block.fd is None:
        return block.__reduce__()
    from multiprocessing.reduction import DupFd

    return _attach, (DupFd(block.fd), len(block))


def _attach(dup: Any, nbytes: int) -> Block:
    fd = dup.detach()
    try:
        found = os.fstat(fd).st_size
        if found != nbytes:
            raise StorageError(f"attach a shared object index: its memory file holds {found} "
                               f"bytes, {nbytes} were sent")
        data = mmap.mmap(fd, nbytes, prot=mmap.PROT_READ)  # a worker never writes it
    except BaseException:
        os.close(fd)
        raise
    return Block(data, fd)


def _register() -> None:
    # On first use, not at import: ``import aioflux`` stays free of
    # multiprocessing. A block is only ever pickled after one was made in
    # (or attached by) this process, which registered it then.
    global _registered
    if not _registered:
        from multiprocessing.reduction import ForkingPickler

        ForkingPickler.register(Block, _reduce_shared)
        _registered = True


def _memory_file(nbytes: int) -> int:
    """A descriptor of an anonymous file of ``nbytes`` zero bytes."""
    if hasattr(os, "memfd_create"):
        try:
            fd = os.memfd_create(_MEMFD_NAME, os.MFD_CLOEXEC)
        except OSError:
            fd = -1  # a kernel or sandbox without it: the temporary file below
    else:
        fd = -1
    if fd < 0:
        where = TEMP_DIR or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
        with tempfile.TemporaryFile(dir=where) as f:
            fd = os.dup(f.fileno())
    try:
        os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


def new_block(nbytes: int) -> Block:
    """A block of ``nbytes`` zero bytes for its maker to fill through
    ``block.view``: shared from :data:`SHARE_MIN` bytes on.

    Args:
        nbytes: its size.

    Returns:
        The block.
    """
    if nbytes < SHARE_MIN:
        return Block(bytearray(nbytes), None)
    fd = _memory_file(nbytes)
    try:
        data = mmap.mmap(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return Block(data, fd)
