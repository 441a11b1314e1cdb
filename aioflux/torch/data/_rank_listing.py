"""One listing for every DDP rank: rank 0's, handed to the others, or checked.

An epoch's global order is a pure function of ``(seed, epoch)`` and the
dataset's object (or shard) list, so the ranks split one order only if
they hold the same list. By default (``listing="each"``) every rank lists
on its own and no collective runs in a constructor, so a dataset made on
one rank alone works; but a folder written to (or deleted from) while the
ranks list can give them different lists, and then different orders
(samples repeated or skipped in silence) and, when their batch counts
differ, a DDP all-reduce that never returns.

``listing="rank0"``: rank 0 lists (for shards: stats and indexes too), and
one ``broadcast_object_list`` hands what it made to the other ranks, which
make no request for it. ``listing="check"``: every rank lists, then one
``all_gather_object`` of (count, crc32c of the names, versions and sizes)
compares the lists, and on a difference every rank raises
:class:`~aioflux.Conflict` naming it.

Both are collectives of the default process group: every rank must make
the dataset, with the same settings, or the ranks that did wait for the
others until the group's timeout. A failure is a result too: the exception
of rank 0 (or, checked, of any rank) is sent in place of the listing, so
every rank raises it (its type, with a note naming the rank) instead of
waiting. Without an initialized process group, or in a world of one, both
just list.
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeVar

import torch.distributed as dist

from ..._core.errors import Conflict, InvalidArgument, InvalidURL, StorageError, add_note
from ..._core.integrity.crc import crc32c
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import format_url, parse_url

__all__ = ["LISTINGS", "Listing", "agreed", "check_listing", "gathered", "objects_summary",
           "objects_target", "shards_summary", "world"]

T = TypeVar("T")

Listing = Literal["each", "rank0", "check"]
LISTINGS: tuple[str, ...] = ("each", "rank0", "check")

_OK, _FAILED = "ok", "failed"
# Characters of a failure's text sent beside it (the message of an
# exception that does not pickle); a listing error's message is short.
_MAX_TEXT = 2000
# Entries summed into one crc32c call (a few hundred KiB of names).
_CHUNK = 4096
# Groups of ranks a mismatch names (the rest are counted).
_MAX_GROUPS = 4

Summary = tuple[int, int]


def check_listing(op: str, listing: object) -> None:
    """Refuse a ``listing=`` that is not one of :data:`LISTINGS` (before any request).

    Args:
        op: the dataset class or constructor, for the message.
        listing: the value given.

    Raises:
        InvalidArgument: another value.
    """
    if not isinstance(listing, str) or listing not in LISTINGS:
        raise InvalidArgument(f"{op}: listing must be 'each', 'rank0' or 'check', "
                              f"got {listing!r:.60}")


def agreed(op: str, listing: str, target: str, make: Callable[[], T],
           summary: Callable[[T], Summary], noun: str = "objects",
           operation: str = "list") -> T:
    """``make()`` (a listing), made to agree across the DDP ranks as ``listing`` says.

    Args:
        op: the dataset class or constructor, for messages.
        listing: ``"each"`` (every rank calls ``make``), ``"rank0"`` (rank
            0 calls it and broadcasts its result or its exception) or
            ``"check"`` (every rank calls it, then the ranks compare
            ``summary`` of their results).
        target: what is listed (a URL or pattern), for messages.
        make: makes the listing; its result must pickle (``"rank0"``).
        summary: ``(count, crc32c)`` of a result (``"check"``).
        noun: what ``count`` counts, for messages.
        operation: what ``make`` does (``"list"``, or ``"stat"`` for given
            objects), the operation the errors raised here name.

    Returns:
        The listing: this rank's, or rank 0's with ``"rank0"``.

    Raises:
        InvalidArgument: ``listing`` is none of the three.
        Conflict: (``"check"``) the ranks' listings differ.
        Exception: what ``make`` raised, on this rank or (shared) on rank 0
            or, checked, on any rank; one that did not pickle arrives as a
            :class:`~aioflux.StorageError` naming its type and message.
    """
    check_listing(op, listing)
    if listing == "each" or _world(op, listing) <= 1:
        return make()
    if listing == "rank0":
        return _from_rank0(op, operation, target, make)
    return _checked(op, operation, target, make, summary, noun)


def world(op: str, listing: str) -> int:
    """The ranks ``listing`` spans: the process group's size, else 1 (with a
    warning where the environment names a world but no group was made)."""
    return _world(op, listing, stacklevel=5)


def gathered(op: str, operation: str, target: str, make: Callable[[], T]) -> list[T]:
    """Every rank's ``make()``, in rank order (an all-gather); a failure on
    any rank is raised on every rank (its type, with a note naming the rank).

    Args:
        op: the dataset class, for messages.
        operation: what ``make`` does, for messages.
        target: what it works on (a URL or pattern), for messages.
        make: this rank's share of the work; its result must pickle.

    Returns:
        The results, by rank.

    Raises:
        Exception: what ``make`` raised, here or on another rank.
    """
    results: list[Any] = [None] * dist.get_world_size()
    try:
        mine: tuple[Any, ...] = (_OK, make())
    except BaseException as exc:
        dist.all_gather_object(results, _failure(exc))
        raise
    dist.all_gather_object(results, mine)
    for rank, (kind, *rest) in enumerate(results):
        if kind == _FAILED:
            raise _shared(op, operation, target, rank, rest[0], rest[1])
    return [rest[0] for _, *rest in results]


def _world(op: str, listing: str, stacklevel: int = 4) -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    env = os.environ.get("WORLD_SIZE", "")
    if env.isdigit() and int(env) > 1:
        # torchrun set the world up, but the process group is made after the
        # dataset: the option cannot work here, and silence would let the
        # caller believe it did.
        warnings.warn(f"{op}: listing={listing!r} needs torch.distributed initialized "
                      f"(init_process_group) before the dataset is made; WORLD_SIZE is "
                      f"{env} but there is no process group, so this rank lists on its own",
                      RuntimeWarning, stacklevel=stacklevel)
    return 1


def _from_rank0(op: str, operation: str, target: str, make: Callable[[], T]) -> T:
    if dist.get_rank() != 0:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        kind, *rest = box[0]
        if kind == _OK:
            return rest[0]  # type: ignore[no-any-return]
        raise _shared(op, operation, target, 0, rest[0], rest[1])
    try:
        result = make()
    except BaseException as exc:
        # The others wait in the broadcast: send them the failure, then raise it here.
        dist.broadcast_object_list([_failure(exc)], src=0)
        raise
    dist.broadcast_object_list([(_OK, result)], src=0)
    return result


def _checked(op: str, operation: str, target: str, make: Callable[[], T],
             summary: Callable[[T], Summary], noun: str) -> T:
    world = dist.get_world_size()
    gathered: list[Any] = [None] * world
    try:
        result = make()
        mine: tuple[Any, ...] = (_OK, summary(result))
    except BaseException as exc:
        dist.all_gather_object(gathered, _failure(exc))
        raise
    dist.all_gather_object(gathered, mine)
    for rank, (kind, *rest) in enumerate(gathered):
        if kind == _FAILED:
            raise _shared(op, operation, target, rank, rest[0], rest[1])
    summaries: list[Summary] = [rest[0] for _, *rest in gathered]
    if any(s != summaries[0] for s in summaries):
        raise _mismatch(op, target, summaries, noun, operation)
    return result


def _failure(exc: BaseException) -> tuple[str, bytes | None, str]:
    """What a rank sends in place of its listing: the pickled exception
    (pickled here, so that one that does not pickle cannot fail the
    collective on this rank alone and leave the others waiting) and its text."""
    text = f"{type(exc).__name__}: {exc}"[:_MAX_TEXT]
    blob = None
    if isinstance(exc, Exception):  # an interrupt of rank 0 is not the others' to raise
        try:
            blob = pickle.dumps(exc)
            pickle.loads(blob)  # it must come back too (its class importable, its args)
        except Exception:
            blob = None
    return _FAILED, blob, text


def _shared(op: str, operation: str, target: str, rank: int, blob: bytes | None,
            text: str) -> BaseException:
    """The exception a rank raises for ``rank``'s failure."""
    if blob is not None:
        try:
            exc = pickle.loads(blob)
        except Exception:
            exc = None
        if isinstance(exc, Exception):
            did = "listed" if operation == "list" else f"{operation}-ed the objects"
            add_note(exc, f"{op}: raised on rank {rank}, which {did} for every rank")
            return exc
    bucket, name = _where(target)
    did = "listed" if operation == "list" else f"{operation}-ed the objects"
    return StorageError(f"{operation} {target}: {op} failed on rank {rank}, which {did} for "
                        f"every rank: {text}", operation=operation, bucket=bucket, name=name)


def _mismatch(op: str, target: str, summaries: Sequence[Summary], noun: str,
              operation: str = "list") -> Conflict:
    groups: dict[Summary, list[int]] = {}
    for rank, summary in enumerate(summaries):
        groups.setdefault(summary, []).append(rank)
    parts = [f"{_ranks(ranks)}: {count} {noun} (crc32c {crc:08x})"
             for (count, crc), ranks in list(groups.items())[:_MAX_GROUPS]]
    if len(groups) > _MAX_GROUPS:
        parts.append(f"{len(groups) - _MAX_GROUPS} more lists")
    bucket, name = _where(target)
    if operation == "list":
        found, cause, keep = f"listed different {noun}", "it changed while they listed", \
            "the folder"
    else:
        # Given objects, looked up on every rank: one was replaced or deleted
        # between two ranks' stats, and they would read different versions.
        found = f"found different versions or sizes of the {noun} they {operation}-ed"
        cause, keep = "one was replaced or deleted while they looked", "the objects"
    option = "reads=ShardReads(listing='rank0')" if op.startswith("Shard") \
        else "listing='rank0'"
    return Conflict(
        f"{operation} {target}: {op}: the ranks {found} ({'; '.join(parts)}): {cause}, "
        "and their epoch orders would differ (samples repeated or skipped, a DDP all-reduce "
        f"waiting at the epoch's end). Make the dataset with {option} (rank 0 "
        f"{operation}s and hands what it found to the others), or keep {keep} unchanged "
        "while the ranks start", operation=operation, bucket=bucket, name=name)


def _ranks(ranks: Sequence[int]) -> str:
    """``rank 1`` or ``ranks 0-3, 5``."""
    spans: list[list[int]] = []
    for r in ranks:
        if spans and spans[-1][1] == r - 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text}"


def objects_target(scheme: str, places: Sequence[tuple[str, str]]) -> str:
    """What messages call a list of given objects: the URL of the one object,
    else of the folder all of them are in, else a count.

    Args:
        scheme: the objects' URL scheme.
        places: ``(bucket, name)`` of each object.

    Returns:
        A URL (an error then names its bucket and object, or folder) or,
        for objects in several buckets (or none), ``"gs:// (<n> objects in
        <k> buckets)"``, which names neither.
    """
    buckets = {bucket for bucket, _ in places}
    if len(buckets) != 1:
        return f"{scheme}:// ({len(places)} objects in {len(buckets)} buckets)"
    names = [name for _, name in places]
    if len(set(names)) == 1:
        return format_url(scheme, places[0][0], names[0])
    # The names' shared characters, cut back to a folder (never part of a name).
    first, last = min(names), max(names)
    shared = next((i for i, (a, b) in enumerate(zip(first, last, strict=False))
                   if a != b), len(first))
    return format_url(scheme, places[0][0], first[:first.rfind("/", 0, shared) + 1])


def _where(target: str) -> tuple[str, str]:
    """The bucket and name of a target that is one URL, else empty."""
    try:
        parsed = parse_url(target)
    except (InvalidURL, InvalidArgument):
        return "", ""
    return parsed.bucket, parsed.name


def _digest(lines: Iterable[str]) -> int:
    crc, chunk = 0, []
    for line in lines:
        chunk.append(line)
        if len(chunk) == _CHUNK:
            crc = crc32c("".join(chunk).encode("utf-8", "surrogatepass"), crc)
            chunk.clear()
    return crc32c("".join(chunk).encode("utf-8", "surrogatepass"), crc)


def objects_summary(objects: Sequence[ObjectInfo]) -> Summary:
    """``(count, crc32c)`` over the objects' names, versions and sizes, in order.

    Args:
        objects: a listing.

    Returns:
        The summary two ranks compare.
    """
    return len(objects), _digest(f"{o.name}\0{o.generation}\0{o.size}\n" for o in objects)


def shards_summary(shards: tuple[Sequence[ObjectInfo], Sequence[tuple[int, int] | None]]
                   ) -> Summary:
    """``(count, crc32c)`` over the shards' URLs, versions, sizes and sample counts.

    Args:
        shards: the shards and their ``(samples, data bytes)`` (None: not counted).

    Returns:
        The summary two ranks compare.
    """
    infos, counts = shards
    return len(infos), _digest(
        f"{info.url}\0{info.generation}\0{info.size}\0{None if c is None else c[0]}\n"
        for info, c in zip(infos, counts, strict=True))
