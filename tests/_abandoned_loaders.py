"""DataLoader iterators a test left to the garbage collector, shut down when it ends.

An iterator a test abandons with workers running (a test that expects an
error from a worker, or takes a few batches) sits in a reference cycle with
its frames until the collector runs, often in a later test. The collector
closes the iterator's index queues before its ``__del__`` asks the workers
to stop (the queues are in the same cycle), so no worker hears it: torch
then waits 5 s (``MP_STATUS_CHECK_INTERVAL``) a worker before it terminates
them. Measured: 5-25 s idle a time, in ~10 places of the suite. Shut down
at the end of the test that made it, the same iterator stops in ~20 ms.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

_iterators: weakref.WeakSet[Any] = weakref.WeakSet()


def track() -> None:
    """Remember every DataLoader iterator made from now on (if torch is imported)."""
    dataloader = sys.modules.get("torch.utils.data.dataloader")
    if dataloader is None:
        return
    base = dataloader._BaseDataLoaderIter
    if getattr(base.__init__, "_tracked", False):
        return
    init = base.__init__

    def tracked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        _iterators.add(self)
        init(self, *args, **kwargs)

    tracked_init._tracked = True  # type: ignore[attr-defined]
    base.__init__ = tracked_init


def shut_down_the_abandoned() -> None:
    """Stop the workers of every iterator not shut down yet, as its ``__del__`` would."""
    for iterator in list(_iterators):
        if hasattr(iterator, "_workers") and not getattr(iterator, "_shutdown", True):
            iterator._shutdown_workers()
    _iterators.clear()
