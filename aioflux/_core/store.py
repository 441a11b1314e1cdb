"""The storage protocol: what every backend offers the engines above it.

The engines (listing, download planner, writer, reader, iterables), the
datasets, checkpointing and the CLI are written against
:class:`ObjectStore`, never against one backend. A backend is the GCS
client (``aioflux.gcs``), the S3 store (``aioflux.s3``), the local
filesystem (``aioflux.local``) or the in-memory store of
``aioflux.testing``; a URL's scheme picks it. What a
backend can do beyond the common operations is declared as data in
:class:`StoreFeatures`, so an engine asks ``store.features.compose``
rather than which backend it holds.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, cast, overload, runtime_checkable

from .config import ClientConfig
from .crc import Crc32c, crc32c_combine
from .errors import NotFound, PreconditionFailed
from .types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from .window import gather_bounded

__all__ = [
    "Buffer",
    "Fetched",
    "ObjectStore",
    "PartUpload",
    "SourceSpec",
    "StoreFeatures",
    "BatchDelete",
    "composite_of",
    "copy_differs",
    "delete_all",
    "objects_of",
    "published_before",
    "source_of",
]

Buffer = bytearray | memoryview
# A compose source: a name, a (name, generation) pair, or a listed object.
SourceSpec = str | ObjectInfo | tuple[str, int]


@dataclass(frozen=True, slots=True)
class StoreFeatures:
    """What a backend can do beyond the common operations.

    Attributes:
        scheme: the URL scheme it serves (``gs``, ``s3``, ``file``, ``memory``).
        compose: most sources of one server-side compose; 0 when the store
            cannot concatenate objects (the download planner then reads
            every object directly).
        end_offset: a listing stops at ``end_offset`` on the server (else
            parallel listers stop themselves at their range's end).
        multipart: the XML-multipart primitives (``initiate_multipart``,
            ``upload_part``, ``complete_multipart``, ``abort_multipart``,
            ``list_parts``, ``list_multipart_uploads``) are offered.
        min_part_size: smallest part a streaming upload may send (the last
            one excepted).
        part_granularity: part sizes must be multiples of this.
        max_parts: most parts of one streaming upload.
        batch_delete: most keys one batch delete request takes (the store
            then offers :class:`BatchDelete`'s ``delete_many``); 0 when
            objects are deleted one by one.
        copy_limit: largest object :meth:`ObjectStore.copy` copies (S3's
            CopyObject: 5 GiB); 0 for no limit.
    """

    scheme: str
    compose: int = 0
    end_offset: bool = False
    multipart: bool = False
    min_part_size: int = 1
    part_granularity: int = 1
    max_parts: int = 10_000
    batch_delete: int = 0
    copy_limit: int = 0


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a checked read produced.

    Args:
        data: the bytes, when no ``into`` buffer was given.
        count: bytes read.
        crc: crc32c of the bytes read, when asked for (``want_crc``).
        size: the object's size, when a response reported it.
    """

    data: bytes | None
    count: int
    crc: int | None
    size: int | None


class PartUpload(Protocol):
    """One streaming upload, as the writer engine drives it.

    Parts arrive numbered from 1, possibly concurrently; nothing is visible
    until :meth:`finish` publishes the whole object, checked against the
    running crc32c and length; :meth:`abort` drops it.
    """

    @property
    def mode(self) -> str:
        """How it uploads: ``single``, ``multipart``, ``resumable``, ``file``..."""
        ...

    async def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Store part ``number``; ``checksum`` is its crc32c if known."""
        ...

    async def finish(self, last_number: int, tail: memoryview | None, expected: Crc32c,
                     tail_checksum: int | None = None) -> ObjectInfo:
        """Publish: ``tail`` as part ``last_number`` (the whole object if no
        part was put), then check the result against ``expected``."""
        ...

    async def abort(self) -> None:
        """Drop the upload; nothing is published. Safe to call twice."""
        ...


@runtime_checkable
class ObjectStore(Protocol):
    """Objects in buckets: the operations every backend offers.

    Names are ``/``-separated; listings are sorted by name and paginated.
    Every read is checked (length, and crc32c where the object has one);
    every write is all-or-nothing. Failures are :class:`StorageError`
    subclasses naming the operation, bucket and object.
    """

    config: ClientConfig

    @property
    def features(self) -> StoreFeatures:
        """What this store can do beyond the common operations."""
        ...

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        """Metadata of one object (``NotFound`` if absent)."""
        ...

    async def exists(self, bucket: str, name: str) -> bool:
        """Whether the object exists."""
        ...

    def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
             start_offset: str | None = None, end_offset: str | None = None,
             page_size: int = 1000) -> AsyncIterator[ListPage]:
        """Pages of objects under ``prefix``, sorted by name, in
        ``[start_offset, end_offset)``; with ``delimiter``, the names that
        continue past it are grouped into ``prefixes``."""
        ...

    def list_objects(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                     end_offset: str | None = None) -> AsyncIterator[ObjectInfo]:
        """The objects of :meth:`list`, one by one."""
        ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: None = ..., generation: int | None = ...) -> bytes: ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: Buffer, generation: int | None = ...) -> int: ...

    async def read(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                   into: Buffer | None = None, generation: int | None = None) -> bytes | int:
        """The object's bytes ``[start, end)``, or their count when written ``into``."""
        ...

    async def fetch(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                    into: memoryview | None = None, generation: int | None = None,
                    size: int | None = None, crc: int | None = None,
                    want_crc: bool = False) -> Fetched:
        """The engines' read: like :meth:`read`, with the object's ``size``
        and ``crc`` when the caller knows them (from a listing) so they are
        checked, and the crc32c of the bytes read when ``want_crc``."""
        ...

    async def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
                    content_type: str = "application/octet-stream",
                    if_generation_match: int | None = None,
                    metadata: dict[str, str] | None = None,
                    resumable: bool | None = None) -> ObjectInfo:
        """Store ``data`` as the object, all or nothing, checked by crc32c;
        ``if_generation_match=0`` means "only if it does not exist"."""
        ...

    def start_upload(self, bucket: str, name: str, *, content_type: str,
                     part_size: int, metadata: dict[str, str] | None = None,
                     if_generation_match: int | None = None) -> PartUpload:
        """A streaming upload in parts of ``part_size`` (the writer engine's),
        published with ``metadata`` as its custom metadata, only if the
        object is then ``if_generation_match`` (``0``: absent), checked
        by the publishing request itself."""
        ...

    async def delete(self, bucket: str, name: str, *, generation: int | None = None,
                     if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        """Delete the object (that generation only, if given)."""
        ...

    async def copy(self, bucket: str, name: str, dest_bucket: str,
                   dest_name: str) -> ObjectInfo:
        """Copy an object within the store."""
        ...

    async def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec], *,
                      if_generation_match: int | None = None,
                      content_type: str = "application/octet-stream") -> ObjectInfo:
        """Concatenate sources into ``destination`` (only where
        ``features.compose``; ``InvalidRequest`` elsewhere)."""
        ...

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """Open streaming uploads: XML multipart uploads where
        ``features.multipart``, else the store's own leftovers of writes that
        never finished (the local store's temporary files), or none."""
        ...

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Drop an open multipart upload (``features.multipart`` only)."""
        ...

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """Parts of an open multipart upload (``features.multipart`` only)."""
        ...

    async def aclose(self) -> None:
        """Release connections and handles of the current event loop."""
        ...


class BatchDelete(Protocol):
    """What a store with ``features.batch_delete`` offers besides
    :class:`ObjectStore`: many deletes in one request."""

    async def delete_many(self, bucket: str, names: Sequence[str]) -> None:
        """Delete ``names`` (those already gone count as deleted)."""
        ...


# -- helpers every store's compose, listing and deletes share --------------------


async def delete_all(store: ObjectStore, bucket: str, names: Sequence[str], *,
                     concurrency: int) -> None:
    """Delete ``names``; those already gone count as deleted.

    One request per ``features.batch_delete`` keys where the store declares
    batch deletes (S3: 1000 per request), else one delete per object,
    ``concurrency`` at once. Batch deletes check no generation: callers that
    pin generations delete one by one.

    Args:
        store: the store.
        bucket: bucket name.
        names: object names.
        concurrency: deletes in flight when they go one by one.

    Raises:
        StorageError: a delete failed (the first failure; the rest are
            cancelled).
    """
    if not names:
        return
    if store.features.batch_delete:
        # Declared by the store's features: it offers delete_many.
        await cast(BatchDelete, store).delete_many(bucket, names)
        return
    await gather_bounded((store.delete(bucket, name, missing_ok=True) for name in names),
                         concurrency)




def source_of(src: SourceSpec) -> tuple[str, int | None]:
    """``(name, generation or None)`` of a compose source.

    Args:
        src: a name, a ``(name, generation)`` pair, or an ObjectInfo.

    Returns:
        The name and the generation to pin, if any.
    """
    if isinstance(src, str):
        return src, None
    if isinstance(src, ObjectInfo):
        return src.name, src.generation or None
    return src[0], src[1]


def composite_of(sources: Sequence[SourceSpec]) -> tuple[int, int] | None:
    """``(size, crc32c)`` a composite of ``sources`` must have, when every
    source is an ObjectInfo that knows its crc32c; None when that is unknown.

    Args:
        sources: the compose sources.

    Returns:
        The expected size and crc32c, or None.
    """
    size = crc = 0
    for src in sources:
        if not isinstance(src, ObjectInfo) or src.crc32c is None:
            return None
        crc = crc32c_combine(crc, src.crc32c, src.size)
        size += src.size
    return size, crc


async def objects_of(pages: AsyncIterator[ListPage]) -> AsyncIterator[ObjectInfo]:
    """The objects of a listing's pages, one by one.

    Args:
        pages: what ``ObjectStore.list`` returned.

    Yields:
        ObjectInfo.
    """
    async for page in pages:
        for obj in page.objects:
            yield obj


def copy_differs(source: ObjectInfo, copy: ObjectInfo) -> list[str]:
    """What a server-side copy has that its source has not (``size``,
    ``crc32c``, ``MD5``: each where both state one); empty when none."""
    return [what for what, a, b in (("size", source.size, copy.size),
                                    ("crc32c", source.crc32c, copy.crc32c),
                                    ("MD5", source.md5, copy.md5))
            if a is not None and b is not None and a != b]


async def published_before(store: ObjectStore, bucket: str, name: str,
                           exc: NotFound | PreconditionFailed,
                           expected: Crc32c) -> ObjectInfo:
    """A retried multipart completion answered "no such upload", or failed
    its own precondition: the first attempt may have published and its
    answer been lost. That is success only if the object now holds exactly
    the bytes written.

    Args:
        store: the store.
        bucket: bucket name.
        name: the object.
        exc: the error of the retried completion.
        expected: crc32c and length of what was written.

    Returns:
        The object's metadata.

    Raises:
        NotFound: ``exc``, when the first attempt was the only one, or the
            object is absent or holds other bytes.
        PreconditionFailed: likewise.
    """
    if exc.attempts < 2:
        raise exc
    try:
        info = await store.stat(bucket, name)
    except NotFound:
        raise exc from None
    if info.size != expected.length or info.crc32c != expected.value:
        raise exc
    return info
