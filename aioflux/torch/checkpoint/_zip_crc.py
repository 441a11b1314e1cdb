"""torch.save without its zip CRC32 while aioflux checksums the same bytes.

``torch.save`` writes a zip archive and, by default, computes a CRC32 of
every record in it (miniz, one thread): about 0.65 s of CPU per GiB on the
perf machine, more than the rest of aioflux's streaming upload of the same
GiB. The CRC32 guards nothing an aioflux save does not already guard: the
writer checksums every byte it publishes with crc32c, the store verifies
it, and aioflux's readers check it again; ``torch.load`` itself never reads
the zip's CRC32 (``torch.serialization.set_crc32_options``: "torch.load
will be able to load the file").

torch's switch is configuration, read once per ``torch.save`` as it opens
its zip writer. Recent torch keeps it per thread (a ``ContextVar``): a save
turns it off in its own thread and back when it ends, and nothing else in
the process sees it. Older torch keeps it process-wide, and aioflux's saves
may overlap (background saves, DCP), so there the switch is
reference-counted: the first save in turns it off, the last one out
restores what it was, and a ``torch.save`` elsewhere in the process while
an aioflux save runs skips the CRC32 too (its file still loads with
``torch.load``; other zip tools report a CRC mismatch on it). Which of the
two torch does is seen, once, from a second thread.

A torch without the switch (``set_crc32_options``) saves with the CRC32 as
always.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["without_zip_crc32"]

_lock = threading.Lock()
_per_thread: bool | None = None  # learned on the first save
_holders = 0  # saves in flight (process-wide torch only)
_before = True  # the setting the first of them found


def _seen_from_another_thread() -> bool:
    seen: list[bool] = []
    probe = threading.Thread(target=lambda: seen.append(torch.serialization.get_crc32_options()),
                             name="aioflux-crc32-scope")
    probe.start()
    probe.join()
    return seen[0]


@contextmanager
def without_zip_crc32() -> Iterator[None]:
    """Within the block, ``torch.save`` in this thread writes its zip records
    without CRC32.

    Yields:
        Nothing; leaving the block restores torch's setting (on a torch that
        keeps it process-wide, once the last block ends).
    """
    global _per_thread, _holders, _before
    serialization = torch.serialization
    if not hasattr(serialization, "set_crc32_options"):
        yield
        return
    if _per_thread:
        prior = serialization.get_crc32_options()
        serialization.set_crc32_options(False)
        try:
            yield
        finally:
            serialization.set_crc32_options(prior)
        return
    with _lock:
        if _holders == 0:
            _before = serialization.get_crc32_options()
            serialization.set_crc32_options(False)
            if _per_thread is None:
                # Another thread still sees it on: torch keeps it per thread.
                _per_thread = _seen_from_another_thread()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                serialization.set_crc32_options(_before)


def _after_fork_in_child() -> None:
    # A save in flight at the fork never ends in the child (its thread did
    # not survive), so it would keep the CRC32 off there for good.
    global _lock, _holders
    _lock = threading.Lock()
    if _holders and hasattr(torch.serialization, "set_crc32_options"):
        torch.serialization.set_crc32_options(_before)
    _holders = 0


os.register_at_fork(after_in_child=_after_fork_in_child)
