"""What the stores whose versions are ETags (S3, Azure) do alike around a
write: an ``if_generation_match`` as the headers that carry it, and the
delete of exactly the version that came out wrong."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NoReturn

from .._core.errors import ChecksumMismatch, NotFound, PreconditionFailed, StorageError, describe
from .failures import Op

__all__ = ["discard_version", "precondition_headers"]


async def precondition_headers(op: Op, if_generation_match: int | None,
                               etag_for: Callable[[str, str, int], Awaitable[str | None]],
                               failed: Callable[[Op, int], PreconditionFailed]
                               ) -> dict[str, str]:
    """``If-None-Match: *`` for 0, ``If-Match`` on the ETag ``etag_for``
    gives another generation.

    Raises:
        PreconditionFailed: ``failed(op, generation)``, where the generation
            is not the object's (nor known).
    """
    if if_generation_match is None:
        return {}
    if if_generation_match == 0:
        return {"If-None-Match": "*"}
    etag = await etag_for(op.bucket, op.name, if_generation_match)
    if etag is None:
        raise failed(op, if_generation_match)
    return {"If-Match": etag}


async def discard_version(op: Op, what: str, why: str,
                          delete: Callable[[], Awaitable[None]]) -> NoReturn:
    """Run ``delete`` (of exactly the version written, ``If-Match``), then raise.

    Raises:
        ChecksumMismatch: always, naming ``why`` and whether the ``what``
            (object, blob) was deleted.
    """
    note = f"the {what} was deleted"
    try:
        await delete()
    except (NotFound, PreconditionFailed):
        note = "a newer version had replaced it and was left alone"
    except StorageError as exc:
        note = f"deleting it failed too ({exc})"
    raise ChecksumMismatch(f"{describe(op.operation, op.bucket, op.name, op.scheme)}: {why}; "
                           f"{note}", operation=op.operation, bucket=op.bucket, name=op.name)
