"""The storage protocol: what every backend offers the engines above it.

The engines (listing, download planner, writer, reader, iterables), the
datasets, checkpointing and the CLI are written against
:class:`ObjectStore`, never against one backend. A backend is the GCS
client (``aioflux.gcs``), the S3 store (``aioflux.s3``), the local
filesystem (``aioflux.local``) or the in-memory store of
``aioflux.testing``; a URL's scheme picks it. What a
backend can do beyond the common operations is declared as data in
:class:`StoreFeatures`, so an engine asks ``store.features.compose``
rather than which backend it holds. A backend implements the protocol on
:class:`~.base.StoreBase`, which defines its operations once over
the backend's wire calls.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, overload, runtime_checkable

from ..concurrency.window import gather_bounded
from ..errors import NotFound, PreconditionFailed
from ..integrity.crc import Crc32c, crc32c_combine
from ..records.types import LIST_FIELDS, ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from ..settings.config import ClientConfig

__all__ = [
    "Buffer",
    "Fetched",
    "ObjectStore",
    "PartUpload",
    "SourceSpec",
    "StoreFeatures",
    "UploadTarget",
    "BatchDelete",
    "MultipartStore",
    "PinsRevisions",
    "ReadsHere",
    "ShownEtags",
    "composite_of",
    "copy_differs",
    "delete_all",
    "arguments_state",
    "from_arguments",
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
        multipart: streaming uploads are multipart uploads that stay open
            until completed or aborted: ``list_multipart_uploads`` lists
            them, ``abort_multipart`` and ``list_parts`` take them. The
            primitives themselves are ``MultipartStore``'s, which only
            some such stores offer (GCS, the memory store; not S3).
        min_part_size: smallest part a streaming upload may send (the last
            one excepted).
        part_granularity: part sizes must be multiples of this.
        max_parts: most parts of one streaming upload.
        batch_delete: most keys one batch delete request takes (the store
            then offers ``BatchDelete``'s ``delete_many``); 0 when
            objects are deleted one by one.
        copy_limit: largest object ``copy`` copies (S3's
            CopyObject alone would be 5 GiB: S3Store copies larger ones in
            parts, so it declares none); 0 for no limit.
        start_offset: a listing starts at ``start_offset`` on the server
            (Azure's List Blobs cannot: it pages from the prefix, so
            parallel listers do not split such a store's key range).
        read_only: writes, uploads, deletes, copies and composes are
            refused (a web server, the Hub), after their arguments are checked.
        local_files: objects are this machine's files at ``/<bucket>/<name>``:
            checkpoint and DCP loads and saves open them directly
            (``local.FileReader``, ``local.FileWriter``), in the caller's thread.
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
    start_offset: bool = True
    read_only: bool = False
    local_files: bool = False


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


class UploadTarget:
    """What a store's :class:`PartUpload` keeps of the object it publishes,
    the base of the backends' uploads; ``mode`` stays empty until the first
    part or the finish decides how the bytes go up."""

    def __init__(self, bucket: str, name: str, content_type: str,
                 metadata: dict[str, str] | None = None,
                 if_generation_match: int | None = None) -> None:
        self.bucket = bucket
        self.name = name
        self.content_type = content_type
        self.metadata = metadata
        self.if_generation_match = if_generation_match
        self.mode = ""


# A store is pickled as the arguments its __init__ kept in ``_arguments``:
# its sessions, credentials and limiters belong to this process and its
# event loops (DataLoader workers build their own). A store's class sets
# ``__getstate__ = arguments_state`` and ``__setstate__ = from_arguments``.


def arguments_state(store: Any) -> dict[str, object]:
    return {"arguments": store._arguments}


def from_arguments(store: Any, state: dict[str, dict[str, object]]) -> None:
    store.__init__(**state["arguments"])


@runtime_checkable
class ObjectStore(Protocol):
    """Objects in buckets: the operations every backend offers.

    Names are ``/``-separated; listings are sorted by name and paginated.
    Every read is checked (length, and crc32c where the object has one);
    every write is all-or-nothing. Failures are ``StorageError``
    subclasses naming the operation, bucket and object.
    """

    config: ClientConfig

    @property
    def features(self) -> StoreFeatures:
        """What this store can do beyond the common operations."""
        ...

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        """Metadata of one object.

        Args:
            bucket: bucket name.
            name: object name.

        Returns:
            ObjectInfo (size, version token, crc32c where kept, metadata).

        Raises:
            InvalidURL: a malformed bucket or name.
            NotFound: no such object or bucket.
            StorageError: any other failure.
        """
        ...

    async def exists(self, bucket: str, name: str) -> bool:
        """Whether the object exists.

        Args:
            bucket: bucket name.
            name: object name.

        Returns:
            True if it exists.

        Raises:
            StorageError: the answer could not be had (not for a missing object).
        """
        ...

    def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
             start_offset: str | None = None, end_offset: str | None = None,
             page_size: int = 1000,
             fields: str | None = LIST_FIELDS) -> AsyncIterator[ListPage]:
        """Pages of objects under ``prefix``, sorted by name.

        Each page is checked: every name once, in order, under ``prefix``
        and inside the offsets, or the listing raises ``ProtocolError``.

        Args:
            bucket: bucket name.
            prefix: only names starting with it (a name prefix, not a folder).
            delimiter: group the names that continue past it (after
                ``prefix``) into the page's ``prefixes``; None: every name.
            start_offset: first name to list (inclusive); None: from the start.
            end_offset: name to stop before (exclusive); None: to the end.
            page_size: most objects a page (servers cap it: GCS and S3 at 1000).
            fields: GCS's JSON ``fields`` selector (None: all); others ignore it.

        Returns:
            An async iterator of pages, fetched as it is consumed.

        Raises:
            InvalidURL: a malformed bucket or prefix (at once).
            InvalidArgument: a setting of the wrong type (at once).
            NotFound: no such bucket (while iterating).
            ProtocolError: a page out of order, outside the prefix or offsets,
                or a listing that does not move forward.
            StorageError: any other failure (while iterating).
        """
        ...

    def list_objects(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                     end_offset: str | None = None,
                     fields: str | None = LIST_FIELDS) -> AsyncIterator[ObjectInfo]:
        """The objects of ``list``, one by one.

        Args:
            bucket: bucket name.
            prefix: only names starting with it.
            start_offset: first name to list (inclusive); None: from the start.
            end_offset: name to stop before (exclusive); None: to the end.
            fields: GCS's JSON ``fields`` selector, as for ``list``.

        Returns:
            An async iterator of the objects, sorted by name.

        Raises:
            InvalidURL: a malformed bucket or prefix (at once).
            NotFound: no such bucket (while iterating).
            StorageError: any other failure, as for ``list`` (while iterating).
        """
        ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: None = ..., generation: int | None = ...) -> bytes: ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: Buffer, generation: int | None = ...) -> int: ...

    async def read(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                   into: Buffer | None = None, generation: int | None = None) -> bytes | int:
        """Read an object, or the byte range ``[start, end)`` of it, checked
        (status, range, length; a whole object's crc32c).

        Args:
            bucket: bucket name.
            name: object name.
            start: first byte.
            end: end (exclusive); None reads to the end of the object.
            into: write the bytes into this writable buffer instead of
                returning them.
            generation: read this version only (pins it).

        Returns:
            The bytes, or the count of bytes written when ``into`` is given.

        Raises:
            InvalidURL: a malformed bucket or name.
            NotFound: no such object (or version), or it was replaced while
                it was read.
            InvalidArgument: a bad range, or ``into`` too small.
            InvalidRequest: ``start`` past the end of the object (416).
            ChecksumMismatch: the bytes differ from the object's checksum (on
                every attempt).
            ProtocolError: another range or body than asked for.
            StorageError: any other failure.
        """
        ...

    async def fetch(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                    into: memoryview | None = None, generation: int | None = None,
                    size: int | None = None, crc: int | None = None,
                    want_crc: bool = False) -> Fetched:
        """The engines' checked read: ``read`` with what the caller already knows.

        Args:
            bucket: bucket name.
            name: object name.
            start: first byte.
            end: end (exclusive); None reads to the end of the object.
            into: write the bytes into this buffer instead of returning them.
            generation: read this version only (pins it).
            size: the object's size, when known (from a listing), checked
                against the answer.
            crc: the object's crc32c, when known, checked against a whole read.
            want_crc: also compute the crc32c of the bytes read.

        Returns:
            The bytes (or their count), the crc32c when asked for, and the
            object's size when the answer stated it.

        Raises:
            NotFound: no such object (or version), or it was replaced while
                it was read.
            ChecksumMismatch: the bytes differ from ``crc`` or the stored checksum.
            ProtocolError: the answer is not the object ``size`` says (on
                HTTP stores: another size stated, or a range starting below
                ``size`` refused as past the end, HTTP 416), named with that
                size; a file or memory store raises ChecksumMismatch for it.
            InvalidRequest: ``start`` at or past the end of the object (416),
                at or past ``size`` when it is given.
            StorageError: any other failure.
        """
        ...

    async def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
                    content_type: str = "application/octet-stream",
                    if_generation_match: int | None = None,
                    metadata: dict[str, str] | None = None,
                    resumable: bool | None = None) -> ObjectInfo:
        """Store ``data`` as the object, all or nothing, checked by crc32c.

        Args:
            bucket: bucket name.
            name: object name.
            data: the object's bytes (S3 takes 5 GiB at once: ``start_upload``
                beyond).
            content_type: its content type.
            if_generation_match: write only if the object's version is this;
                ``0`` means "only if it does not exist".
            metadata: custom metadata (string keys and values; files take none).
            resumable: force a resumable upload (True) or a single request
                (False) where the store has both (GCS; S3 and Azure have
                none); None: by size.

        Returns:
            The stored object's metadata.

        Raises:
            InvalidArgument: ``resumable=True`` where there are none, or
                ``metadata`` the store cannot keep.
            PreconditionFailed: ``if_generation_match`` did not hold.
            ChecksumMismatch: the stored object differs from ``data`` (it is
                deleted first).
            StorageError: any other failure (nothing is published).
        """
        ...

    def start_upload(self, bucket: str, name: str, *, content_type: str,
                     part_size: int, metadata: dict[str, str] | None = None,
                     if_generation_match: int | None = None) -> PartUpload:
        """A streaming upload in parts, as the writer engine drives it.

        Args:
            bucket: bucket name.
            name: object name.
            content_type: the object's content type.
            part_size: bytes per part (every part but the last).
            metadata: custom metadata the object is published with.
            if_generation_match: publish only if the object is then this
                generation (``0``: absent); None: unconditionally.

        Returns:
            The upload; nothing is sent before its first part.

        Raises:
            InvalidArgument: a bad argument, or one the store cannot take.
            InvalidRequest: the store is read-only.
        """
        ...

    async def delete(self, bucket: str, name: str, *, generation: int | None = None,
                     if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        """Delete an object.

        Args:
            bucket: bucket name.
            name: object name.
            generation: delete this version only (another is NotFound).
            if_generation_match: delete only if the object's version is this.
            missing_ok: an object already gone (or that generation replaced)
                is not an error.

        Raises:
            InvalidURL: a malformed bucket or name.
            NotFound: no such object or generation (unless ``missing_ok``).
            PreconditionFailed: ``if_generation_match`` did not hold.
            StorageError: any other failure.
        """
        ...

    async def copy(self, bucket: str, name: str, dest_bucket: str,
                   dest_name: str) -> ObjectInfo:
        """Copy an object within the store (server-side where it can).

        The copy is of the version a stat saw, and must have its size and
        checksums, else it is deleted and the copy fails.

        Args:
            bucket: source bucket.
            name: source object.
            dest_bucket: destination bucket.
            dest_name: destination object.

        Returns:
            The copy's metadata.

        Raises:
            InvalidURL: a malformed bucket or name.
            NotFound: no such source object.
            PreconditionFailed: the source was replaced while it was copied.
            ChecksumMismatch: the copy differs from its source (it was deleted).
            StorageError: any other failure.
        """
        ...

    async def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec], *,
                      if_generation_match: int | None = None,
                      content_type: str = "application/octet-stream") -> ObjectInfo:
        """Concatenate sources into ``destination`` (only where ``features.compose``).

        Args:
            bucket: bucket of the sources and the destination.
            destination: the composed object's name.
            sources: object names, ``(name, generation)`` pairs or ObjectInfo
                (whose generation is pinned), at most ``features.compose``.
            if_generation_match: write only if the destination's version is
                this (``0``: only if it does not exist).
            content_type: the composed object's content type.

        Returns:
            The composed object's metadata.

        Raises:
            InvalidRequest: the store has no compose.
            InvalidArgument: no sources, or more than ``features.compose``.
            PreconditionFailed: a source or the destination changed.
            ChecksumMismatch: the composite is not the sources' concatenation.
            StorageError: any other failure.
        """
        ...

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """Open streaming uploads (multipart uploads, a file store's
        temporary files): what ``aioflux clean`` may abort.

        Args:
            bucket: bucket name.
            prefix: only uploads of names starting with it.

        Returns:
            The open uploads.

        Raises:
            StorageError: listing failed.
        """
        ...

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Drop an open multipart upload (``features.multipart`` only).

        Args:
            bucket: bucket name.
            name: object name of the upload.
            upload_id: the upload's ID.

        Raises:
            InvalidRequest: the store has no multipart uploads.
            NotFound: no such upload.
            StorageError: any other failure.
        """
        ...

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """Parts of an open multipart upload (``features.multipart`` only).

        Args:
            bucket: bucket name.
            name: object name of the upload.
            upload_id: the upload's ID.

        Returns:
            The uploaded parts, by part number.

        Raises:
            InvalidRequest: the store has no multipart uploads.
            NotFound: no such upload.
            StorageError: any other failure.
        """
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


@runtime_checkable
class ReadsHere(Protocol):
    """What a store whose small reads may end in the calling thread offers
    besides :class:`ObjectStore` (files whose bytes are in memory): a map
    dataset reads a batch of them in its own thread, no hand-off a file
    (``isinstance(store, ReadsHere)``)."""

    def _reads_here(self, bucket: str, name: str) -> bool:
        """Whether :meth:`_read_small_many` may read this object (else it
        always answers None: a network filesystem)."""
        ...

    def _read_small_many(self, bucket: str, names: Sequence[str],
                         listed: Sequence[tuple[int, int | None, int | None]] | None = None
                         ) -> list[bytes | None]:
        """The objects ``names``, in order, each read whole in this thread
        and checked as ``read`` checks it; None for one whose read could
        wait: download that one instead. ``listed``: each one's ``(size,
        generation, crc32c)`` as its listing gave them, which the store may
        check against where the object is still that version."""
        ...


@runtime_checkable
class PinsRevisions(Protocol):
    """What a store that pins a bucket's named revision to one version for
    its life offers besides :class:`ObjectStore` (the Hub's: a branch
    resolved to a commit): the pins it holds, and pins another store of the
    same dataset made, so that a dataset resolves each revision once and
    every store that reads it (a DataLoader worker's too) reads that version
    (``isinstance(store, PinsRevisions)``)."""

    def _pins(self) -> dict[tuple[str, str], str]:
        """The pins this store holds: ``(store's endpoint, bucket) -> version``."""
        ...

    def _adopt_pins(self, pins: Mapping[tuple[str, str], str]) -> None:
        """Read the buckets ``pins`` names at those versions (those of
        another endpoint, or already pinned here, are left alone)."""
        ...


@runtime_checkable
class ShownEtags(Protocol):
    """What a store whose generations stand for ETags (S3's) offers besides
    :class:`ObjectStore`: the ETag a generation names, as the store sent it
    (``isinstance(store, ShownEtags)``; ``aioflux ls`` shows them)."""

    def _known_etag(self, generation: int) -> str | None:
        """The ETag behind ``generation``; None if it is not known."""
        ...


@runtime_checkable
class MultipartStore(Protocol):
    """The multipart primitives themselves, beside :class:`ObjectStore`
    (GCS's XML API, the memory store: ``isinstance(store, MultipartStore)``).
    Nothing is visible before ``complete_multipart``; ``abort_multipart``
    drops the upload."""

    async def initiate_multipart(self, bucket: str, name: str, *,
                                 content_type: str = "application/octet-stream",
                                 metadata: dict[str, str] | None = None) -> str:
        """Start a multipart upload; nothing is visible until completion.

        Args:
            bucket: bucket name.
            name: object name.
            content_type: Content-Type of the final object.
            metadata: custom metadata of the final object.

        Returns:
            The upload id.

        Raises:
            InvalidArgument: a content type or metadata the store cannot carry.
            StorageError: the server refused.
        """
        ...

    async def upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                          data: bytes | bytearray | memoryview,
                          checksum: int | None = None) -> PartInfo:
        """Upload one part, its crc32c checked by the server.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: from ``initiate_multipart``.
            part_number: 1..``features.max_parts``.
            data: the part (>= ``features.min_part_size`` unless the last).
            checksum: its crc32c if known (else computed).

        Returns:
            PartInfo with the part's ETag.

        Raises:
            InvalidArgument: part number out of range, or an argument of
                the wrong type.
            ChecksumMismatch: the server reports storing other bytes, on
                every attempt.
            StorageError: the upload failed.
        """
        ...

    async def complete_multipart(self, bucket: str, name: str, upload_id: str,
                                 parts: Sequence[PartInfo]) -> dict[str, str]:
        """Publish the object from its parts, in part-number order.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: the upload.
            parts: every uploaded part.

        Returns:
            Response headers of interest (``x-goog-hash``, ``x-goog-generation``
            when the server sends them).

        Raises:
            InvalidArgument: ``parts`` is not a list of PartInfo.
            InvalidRequest: parts missing, out of order, or too small.
            StorageError: any other failure.
        """
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
                           exc: NotFound | PreconditionFailed, size: int,
                           crc: int) -> ObjectInfo:
    """A retried write or multipart completion answered "no such upload", or
    failed its own precondition: the first attempt may have published and
    its answer been lost. That is success only if the object now holds
    exactly the bytes written.

    Args:
        store: the store.
        bucket: bucket name.
        name: the object.
        exc: the error of the retried request.
        size: length of what was written.
        crc: its crc32c.

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
    if info.size != size or info.crc32c != crc:
        raise exc
    return info
