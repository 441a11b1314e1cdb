"""A process's share of the machine, and the size of a thread pool in it.

A pool sized for a process that has the machine to itself (asyncio's
default executor: ``min(32, cpus + 4)``; the local store's 32 file
threads; the disk cache's 16) is that size in every process that makes
one. A DataLoader worker is one of ``num_workers`` such processes: 16
workers with 20 to 35 threads each hold hundreds of threads on 16 cores
(perf scenario ``workers``). The torch layer says, in a worker, how many
processes share the machine (:func:`set_sharers`); pools made after that
take their share of their whole size, and no more than two threads a CPU
of the worker's share of the CPUs (:func:`pool_threads`): a worker's
threads are its turn's work and a blocking call's wait, while the
workers themselves are the parallelism.
"""

from __future__ import annotations

import os

__all__ = ["cpus", "default_executor_threads", "pool_threads", "set_sharers", "sharers"]

_sharers = 1


def set_sharers(count: int) -> None:
    """Say how many processes (this one included) share the machine's pools' work.

    Pools made afterwards in this process take their share
    (:func:`pool_threads`); a pool already made keeps its size.

    Args:
        count: the processes, at least 1 (a DataLoader worker: ``num_workers``).

    Raises:
        ValueError: ``count`` is below 1.
    """
    global _sharers
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"set_sharers: count must be an int >= 1, got {count!r}")
    _sharers = count


def sharers() -> int:
    """The processes this one shares the machine with, itself included (1 by default)."""
    return _sharers


def cpus() -> int:
    """The CPUs this process may run on (its affinity, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def pool_threads(whole: int, least: int = 2) -> int:
    """Threads of a pool that would have ``whole`` in a process owning the machine.

    Args:
        whole: the pool's size in a process alone on the machine.
        least: the fewest it gets (never more than ``whole``): two let one
            blocking call wait while another runs.

    Returns:
        ``whole`` in a process alone; in one of several, its share of
        ``whole`` and at most two threads a CPU of its share of the CPUs
        (rounded up), at least ``least``.
    """
    if _sharers == 1:
        return whole
    share = min(-(-whole // _sharers), -(-2 * cpus() // _sharers))
    return max(min(least, whole), share)


def default_executor_threads() -> int:
    """Threads of an event loop's default executor (``asyncio.to_thread``):
    asyncio's ``min(32, cpus + 4)``, this process's share of it."""
    return pool_threads(min(32, cpus() + 4))
