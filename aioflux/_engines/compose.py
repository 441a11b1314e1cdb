"""Composed batches: fetch many small objects as one temporary composite.

A batch of up to 32 small objects of one bucket is composed server-side
(source generations pinned by preconditions), the composite's size and
crc32c are checked against what the listing predicts, it is read once (its
bytes held to that size and crc32c, not to whatever hash the GET answer
carries), split by the listed sizes, and deleted in a ``finally``. Every live
composite is also held in a process-wide registry that deletes leftovers at
interpreter exit and at multiprocessing-worker exit (DataLoader workers end
through ``os._exit`` and skip ``atexit``). Composites a killed process left
behind are named ``<COMPOSED_PREFIX><pid>-<uuid>`` so ``aioflux clean``
recognises them.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import multiprocessing.util
import os
import re
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from .._core.concurrency.portal import get_portal
from .._core.concurrency.window import shared_task
from .._core.errors import ChecksumMismatch, PermissionDenied, ProtocolError, StorageError
from .._core.integrity.crc import crc32c_combine
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import ObjectStore

__all__ = [
    "COMPOSED_PREFIX",
    "MAX_COMPOSE_SOURCES",
    "ComposeMismatch",
    "composite_name",
    "delete_leftovers",
    "expected_crc32c",
    "fetch_composed",
    "is_composite",
    "leftover_composites",
    "plan_batches",
]

# Composites made by the download planner live here (bucket root); listings
# skip them so a dataset never contains another reader's temporary objects.
COMPOSED_PREFIX = "aioflux-composed/"

T = TypeVar("T")

MAX_COMPOSE_SOURCES = 32  # the GCS compose limit
_EXIT_CLEANUP_TIMEOUT = 10.0
# What composite_name puts after the prefix: the pid, a dash, a uuid4's hex.
_COMPOSITE_TAIL = re.compile(r"[0-9]+-[0-9a-f]{32}")


class ComposeMismatch(Exception):
    """The composite's size or crc32c differs from the listed sources'.

    Internal signal: the caller falls back to direct reads for the batch.
    """


def composite_name(prefix: str = COMPOSED_PREFIX) -> str:
    """A fresh, recognisable composite name: ``<prefix><pid>-<uuid>``.

    Args:
        prefix: the composed-object prefix.

    Returns:
        The object name.
    """
    return f"{prefix}{os.getpid()}-{uuid.uuid4().hex}"


def is_composite(name: str, prefix: str = COMPOSED_PREFIX) -> bool:
    """Whether ``name`` has the shape :func:`composite_name` gives under ``prefix``.

    Args:
        name: an object name.
        prefix: the composed-object prefix.

    Returns:
        True for ``<prefix><pid>-<32 hex digits>`` only: anything else under
        the prefix (a user's object, a folder's contents) is not ours.
    """
    return name.startswith(prefix) and _COMPOSITE_TAIL.fullmatch(name, len(prefix)) is not None


def plan_batches(objects: Sequence[ObjectInfo], max_sources: int = MAX_COMPOSE_SOURCES,
                 max_bytes: int = 0) -> list[list[int]]:
    """Group consecutive objects into compose batches.

    Args:
        objects: candidates, in the order they are wanted.
        max_sources: most sources per batch (capped at 32).
        max_bytes: most bytes per batch (0 = no cap).

    Returns:
        Lists of indices into ``objects``; each batch has 1..32 sources of
        one bucket and at most ``max_bytes`` bytes (a single object larger
        than that forms a batch of its own).
    """
    most = max(1, min(max_sources, MAX_COMPOSE_SOURCES))
    # As many batches as the count needs, evenly filled: 100 objects are 4 of
    # 25, not 3 of 32 and a tail of 4 too short to be worth composing.
    limit = -(-len(objects) // -(-len(objects) // most)) if objects else most
    batches: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, obj in enumerate(objects):
        full = len(current) >= limit or (max_bytes and total + obj.size > max_bytes)
        other_bucket = bool(current) and objects[current[0]].bucket != obj.bucket
        if current and (full or other_bucket):
            batches.append(current)
            current, total = [], 0
        current.append(i)
        total += obj.size
    if current:
        batches.append(current)
    return batches


def expected_crc32c(objects: Sequence[ObjectInfo]) -> int | None:
    """crc32c of the concatenation of ``objects``, from their listed crc32c.

    Args:
        objects: the sources in compose order.

    Returns:
        The predicted crc32c, or ``None`` if a source's crc32c is unknown.
    """
    value = 0
    for obj in objects:
        if obj.crc32c is None:
            return None
        value = crc32c_combine(value, obj.crc32c, obj.size)
    return value


@dataclass(frozen=True)
class _Live:
    client: ObjectStore
    bucket: str
    name: str
    task: asyncio.Task[object] | None


_lock = threading.Lock()
_live: dict[tuple[int, str, str], _Live] = {}


def _register(client: ObjectStore, bucket: str, name: str) -> None:
    with _lock:
        _live[(id(client), bucket, name)] = _Live(client, bucket, name, asyncio.current_task())


def _unregister(client: ObjectStore, bucket: str, name: str) -> None:
    with _lock:
        _live.pop((id(client), bucket, name), None)


def leftover_composites() -> list[str]:
    """URLs of composites this process created and has not deleted yet.

    Returns:
        ``gs://bucket/name`` strings.
    """
    with _lock:
        return [f"gs://{live.bucket}/{live.name}" for live in _live.values()]


async def _delete(client: ObjectStore, bucket: str, name: str) -> StorageError | None:
    """Delete a composite; its delete's error, if it failed."""
    try:
        await client.delete(bucket, name, missing_ok=True)
    except StorageError as exc:
        return exc  # left registered: the exit cleanup (or `aioflux clean`) retries
    _unregister(client, bucket, name)
    return None


async def delete_leftovers(client: ObjectStore) -> None:
    """Delete the composites ``client`` made and could not delete yet (a
    delete that failed), at its close: the exit clean-up runs after an
    ``async with`` client closed, and a closed client deletes nothing (they
    stayed in the bucket until ``aioflux clean``).

    Args:
        client: the closing client.
    """
    with _lock:
        mine = [live for live in _live.values() if live.client is client]
    await asyncio.gather(*(_delete(live.client, live.bucket, live.name) for live in mine),
                         return_exceptions=True)


async def _exit_cleanup(items: list[_Live]) -> None:
    # Cancel the portal's fetches first: their finally blocks delete what they
    # made, and none can create a composite after the deletes below ran.
    loop = asyncio.get_running_loop()
    tasks = [i.task for i in items if i.task is not None and i.task.get_loop() is loop
             and not i.task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=_EXIT_CLEANUP_TIMEOUT / 2)
    with _lock:
        rest = list(_live.values())
    await asyncio.gather(*(_delete(i.client, i.bucket, i.name) for i in rest),
                         return_exceptions=True)


def _cleanup_at_exit() -> None:
    with _lock:
        items = list(_live.values())
    if not items or os.environ.get("AIOFLUX_NO_EXIT_CLEANUP"):
        return
    try:
        # The portal still runs here: atexit is LIFO and this module registers
        # after the bridge; worker finalizers run before os._exit.
        get_portal().submit(_exit_cleanup(items)).result(_EXIT_CLEANUP_TIMEOUT)
    except (concurrent.futures.TimeoutError, RuntimeError, StorageError):
        pass  # best effort: `aioflux clean` removes what is left


atexit.register(_cleanup_at_exit)
# exitpriority makes multiprocessing run it in worker processes on exit.
multiprocessing.util.Finalize(None, _cleanup_at_exit, exitpriority=100)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    # The parent's composites are the parent's to delete.
    _live.clear()
    multiprocessing.util.Finalize(None, _cleanup_at_exit, exitpriority=100)


os.register_at_fork(after_in_child=_after_fork_in_child)


async def fetch_composed(client: ObjectStore, objects: Sequence[ObjectInfo], *,
                         prefix: str = COMPOSED_PREFIX) -> list[bytes]:
    """Compose ``objects`` (one bucket, 2-32 of them), read once, split.

    Args:
        client: the client.
        objects: the sources; their listed size, generation and crc32c are
            what the composite is checked against.
        prefix: where the composite is created.

    Returns:
        Each source's bytes, in order.

    Raises:
        ComposeMismatch: the composite's size or crc32c, or the size or
            crc32c of the bytes read back, differs from the prediction
            (nothing was split).
        PermissionDenied: compose or delete is not allowed on the bucket.
        PreconditionFailed: a source changed since it was listed.
        StorageError: any other failure.
    """
    bucket = objects[0].bucket
    name = composite_name(prefix)
    want_size = sum(o.size for o in objects)
    want_crc = expected_crc32c(objects)
    _register(client, bucket, name)
    refused = False
    failed: StorageError | None = None  # the composite's delete
    try:
        try:
            # Awaited to its answer even when cancelled: the server may apply
            # a compose whose caller stopped waiting after a delete sent at
            # once, and the composite (unregistered, the delete had found
            # nothing) stayed for good.
            info = await _past_one_cancel(
                shared_task(client.compose(bucket, name, list(objects), if_generation_match=0)))
        except ChecksumMismatch as exc:
            # compose() checked the composite against these sources (and
            # deleted it): the caller's fallback signal.
            raise ComposeMismatch(str(exc)) from exc
        except StorageError as exc:
            # A 4xx at the only attempt is the server saying no: nothing was
            # created. A 5xx (or 408) may come after the compose was applied,
            # and after a retry the first attempt may have landed (its answer
            # lost, then 503s): the composite is deleted like any other.
            refused = (exc.attempts < 2 and exc.status is not None
                       and 400 <= exc.status < 500 and exc.status != 408)
            raise
        if info.size != want_size or (want_crc is not None and info.crc32c != want_crc):
            raise ComposeMismatch(f"compose gs://{bucket}/{name}: got size {info.size} "
                                  f"crc32c {info.crc32c}, expected {want_size} {want_crc}")
        data = await _read_composite(client, bucket, name, info, want_size, want_crc)
    finally:
        if refused:
            _unregister(client, bucket, name)
        else:
            # Shielded: a cancellation must not skip the delete; the exit
            # registry still covers a delete that never finished.
            # Cancelled while deleting (a stream left early): still waited
            # for, or the composite outlives the call that made it, listed in
            # the bucket after the stream was closed.
            failed = await _past_one_cancel(shared_task(_delete(client, bucket, name)))
    if isinstance(failed, PermissionDenied):
        # Composing where composites cannot be deleted leaves one behind
        # per batch: the caller's signal to read directly from now on.
        raise failed
    out: list[bytes] = []
    pos = 0
    for obj in objects:
        out.append(data[pos:pos + obj.size])
        pos += obj.size
    return out


async def _past_one_cancel(task: asyncio.Future[T]) -> T:
    """``task``'s result; if the caller is cancelled meanwhile, it still
    waits for the task to end, then re-raises. A second cancellation ends
    the wait, not the task (the exit registry covers what it leaves): a
    Ctrl-C pressed twice stops at once."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


async def _read_composite(client: ObjectStore, bucket: str, name: str, info: ObjectInfo,
                          want_size: int, want_crc: int | None) -> bytes:
    """The composite's bytes, checked against the predicted size and crc32c
    (the compose answer's crc32c where a source's is unknown): the answer's
    own ``x-goog-hash`` may be missing or recomputed over altered bytes."""
    crc = want_crc if want_crc is not None else info.crc32c
    try:
        fetched = await client.fetch(bucket, name, generation=info.generation or None,
                                     size=want_size, crc=crc)
    except (ChecksumMismatch, ProtocolError) as exc:
        # The composite disagrees with its sources: direct reads, each held
        # to its own crc32c, still get the right bytes.
        raise ComposeMismatch(f"read gs://{bucket}/{name}: {exc}") from exc
    data = fetched.data or b""
    if len(data) != want_size:
        raise ComposeMismatch(f"read gs://{bucket}/{name}: {len(data)} != {want_size}")
    return data
