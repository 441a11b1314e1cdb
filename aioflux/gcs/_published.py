"""Checks of a just-published object against what was written.

Shared by every write path (``AsyncClient.write`` and ``compose``, the
resumable session, the streaming writer): a published object whose size or
crc32c differs from what was sent is deleted, exactly that generation, and
the write fails; an answer that cannot be checked is never a success. An
answer that names no generation proves no object ours: a stat can then
only confirm that the name holds the bytes written, and nothing is deleted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from .._core.errors import ChecksumMismatch, NotFound, PreconditionFailed, StorageError, describe
from .._core.integrity.crc import encode_crc32c
from .._core.records.types import ObjectInfo
from .._net.transport import Op

if TYPE_CHECKING:
    from ._client import AsyncClient

__all__ = ["confirm_published", "discard_published", "verify_published"]


async def verify_published(client: AsyncClient, op: Op, info: ObjectInfo, size: int,
                           checksum: int | None) -> ObjectInfo:
    """Check a just-published object against what was written; if it
    differs, delete exactly that generation and raise.

    A server that does not check the crc32c we send (fake-gcs-server)
    stores whatever arrived; the object must not stay published. The
    delete carries ``ifGenerationMatch`` so a concurrent newer write
    under the same name is never removed.

    Args:
        client: the client that wrote (stat, delete).
        op: the operation and the object it published.
        info: the server's answer to the publishing request.
        size: bytes written.
        checksum: their crc32c; ``None`` checks the size only.

    Returns:
        ``info`` (with the crc32c from a stat if the answer lacked it), or
        the stat's object when an answer with no generation had to be
        confirmed.

    Raises:
        ChecksumMismatch: the stored size or crc32c differs, or cannot be
            learned; the generation was deleted, or left alone when the
            answer named none.
        StorageError: the answer names another object (left alone).
    """
    _check_same_object(op, info)
    if not info.generation and not _holds(info, size, checksum):
        return await confirm_published(client, op, size, checksum)
    if checksum is not None and info.crc32c is None and info.size == size:
        # The answer lacked the crc32c: ask for it rather than trust it.
        try:
            stored = await client.stat(info.bucket, info.name)
        except NotFound:
            stored = info
        if stored.generation == info.generation:
            info = stored
    if _holds(info, size, checksum):
        return info
    shown = "none" if info.crc32c is None else encode_crc32c(info.crc32c)
    sent = "" if checksum is None else f", crc32c {encode_crc32c(checksum)}"
    await discard_published(
        client, op, info, f"the server stored {info.size} bytes, crc32c {shown}; "
        f"sent {size} bytes{sent}")


async def confirm_published(client: AsyncClient, op: Op, size: int, checksum: int | None, *,
                            why: str = "the answer names no generation") -> ObjectInfo:
    """The write's answer proves nothing (it names no generation, or was
    lost): succeed only if a stat finds the name holding exactly the bytes
    written. Whatever it finds otherwise may be another writer's object, so
    it is never deleted.

    Args:
        client: the client that wrote (stat).
        op: the operation and the object it wrote.
        size: bytes written.
        checksum: their crc32c; ``None`` checks the size only.
        why: what left the write unproven, for the message.

    Returns:
        The object's metadata, from the stat.

    Raises:
        ChecksumMismatch: the name holds no object or other bytes; the write
            is not verified and nothing was deleted.
    """
    try:
        found: ObjectInfo | None = await client.stat(op.bucket, op.name)
    except NotFound:
        found = None
    if found is not None and _holds(found, size, checksum):
        return found
    what = ("no object" if found is None else
            f"{found.size} bytes, crc32c "
            f"{'none' if found.crc32c is None else encode_crc32c(found.crc32c)}")
    raise ChecksumMismatch(
        f"{describe(op.operation, op.bucket, op.name)}: {why} and "
        f"the name holds {what}, not the {size} bytes written; the write is not verified "
        "and the object was left alone", operation=op.operation, bucket=op.bucket,
        name=op.name)


async def discard_published(client: AsyncClient, op: Op, info: ObjectInfo,
                            why: str) -> NoReturn:
    """Delete exactly the generation ``info`` names (``ifGenerationMatch``,
    so a concurrent newer write survives), then raise ChecksumMismatch. An
    ``info`` with no generation is left alone.

    Args:
        client: the client that wrote (delete).
        op: the operation and the object it published.
        info: the object that must not stay published.
        why: what was wrong with it, for the message.

    Raises:
        ChecksumMismatch: always, saying whether the delete happened.
        StorageError: ``info`` names another object (left alone).
    """
    _check_same_object(op, info)
    operation = op.operation
    if not info.generation:
        # A delete without a generation removes whatever is live, perhaps a
        # concurrent writer's good object: only a generation the answer
        # named is known to be this write's.
        raise ChecksumMismatch(
            f"{operation} gs://{info.bucket}/{info.name}: {why}; the write is not verified "
            "and, with no generation in the answer, the object was left alone",
            operation=operation, bucket=info.bucket, name=info.name)
    note = "the object was deleted"
    try:
        await client.delete(info.bucket, info.name, generation=info.generation,
                            if_generation_match=info.generation)
    except NotFound:
        note = "that generation was already gone"
    except PreconditionFailed:
        note = "a newer generation had replaced it and was left alone"
    except StorageError as exc:
        note = f"deleting it failed too ({exc})"
    raise ChecksumMismatch(
        f"{operation} gs://{info.bucket}/{info.name}: {why} (generation "
        f"{info.generation}); {note}", operation=operation, bucket=info.bucket,
        name=info.name)


def _holds(info: ObjectInfo, size: int, checksum: int | None) -> bool:
    return info.size == size and (checksum is None or info.crc32c == checksum)


def _check_same_object(op: Op, info: ObjectInfo) -> None:
    # An answer about another object verifies nothing, and that object is
    # not ours to delete.
    if (info.bucket, info.name) != (op.bucket, op.name):
        raise StorageError(
            f"{describe(op.operation, op.bucket, op.name)}: the server answered with "
            f"gs://{info.bucket}/{info.name}; the write is not verified",
            operation=op.operation, bucket=op.bucket, name=op.name)
