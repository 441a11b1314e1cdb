"""Clean-up that runs to its end, however often its caller is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["to_the_end"]

T = TypeVar("T")


async def to_the_end(work: Awaitable[T]) -> T:
    """``work``'s result, waited for however often the caller is cancelled
    meanwhile; then that cancellation is raised.

    For clean-up that must not be cut short (an upload's abort): under a
    shield the work would go on, but its caller would return before it
    ended, with the upload still open and a permit still held.

    Args:
        work: the clean-up.

    Returns:
        What ``work`` returned, if the caller was not cancelled.

    Raises:
        asyncio.CancelledError: the caller was cancelled while it waited.
        Exception: what ``work`` raised.
    """
    task = asyncio.ensure_future(work)
    interrupted: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError as exc:
            interrupted = exc
    if interrupted is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation wins
        raise interrupted
    return task.result()
