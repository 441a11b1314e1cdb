"""The writer threads of a DCP save, ended with it when it fails.

torch's ``FileSystemWriter`` writes a rank's files from ``thread_count``
threads, the calling one among them, and joins the others only when the
calling one's files were written. One that fails (a full disk, a failed
upload, a planner raising) raises at once, while the others go on: they
take the rest of the queue's files and publish them after ``dcp.save``
raised, over the files of a retry into the same checkpoint that had
reported success (its items' crc32c then fail every load of it).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ended_on_failure"]

# The name CPython gives a thread: "Thread-N (<its target's name>)".
_WRITER = "(_write_files_from_queue)"


@contextmanager
def ended_on_failure(file_queue: queue.Queue[Any]) -> Iterator[None]:
    """Around torch's ``_write_data``: on failure, the files not yet taken
    are dropped from ``file_queue`` (no thread starts another), and the
    writer threads taking from it are waited for before the error goes on."""
    try:
        yield
    except BaseException:
        try:
            while True:
                file_queue.get_nowait()
        except queue.Empty:
            pass
        for thread in threading.enumerate():
            if thread.name.endswith(_WRITER) and _takes_from(thread, file_queue):
                thread.join()
        raise


def _takes_from(thread: threading.Thread, file_queue: queue.Queue[Any]) -> bool:
    """Whether ``thread`` writes this save's files (torch passes the queue
    to its target): another save's writer threads (an ``async_save`` in
    its executor) are that save's to wait for. A thread that has ended
    holds its arguments no more, and needs no waiting for."""
    return any(arg is file_queue for arg in getattr(thread, "_args", ()))
