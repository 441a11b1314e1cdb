"""``StoreBase``: the storage protocol's operations, written once.

:class:`~.store.ObjectStore` is what the engines call; this class is how a
backend offers it without writing its user-facing methods again. Each
operation is defined here once, with its docstring and its argument
checks, on top of a narrow set of *wire calls* that the backend
implements: the requests (or filesystem calls) themselves, handed
arguments already checked.

What a backend implements:

- ``_features``: its :class:`~.store.StoreFeatures` (capabilities are
  data), or a ``features`` property of its own; ``features.scheme`` names
  its URLs in messages; ``_kind`` names the store in the messages of what
  it does not offer ("S3").
- ``_stat``: one object's ObjectInfo, or ``NotFound``.
- ``_pages``: the listing's pages, each checked (``_core/pages.py``),
  fetched as consumed; a store that cannot list refuses here (at once if
  it likes: ``list`` returns what this returns).
- ``_fetch``: the checked read of ``[start, end)`` behind ``read`` and
  ``fetch`` (status, range, length, crc32c). The hot path: keep it direct.
- ``_write``: all or nothing, ``data`` a byte ``memoryview``.
- ``start_upload``: the writer engine's upload, with the backend's own
  part-size rules, default and checks (abstract here).
- ``_delete``, ``_copy``, ``_compose`` (only where ``features.compose``)
  and ``aclose``.

Their signatures are the abstract methods at the end of this class.

What it may override: ``_check_object`` (a stricter rule for names, as the
local store's paths), and the open-upload calls (``list_multipart_uploads``,
``abort_multipart``, ``list_parts``), which by default report none and
refuse the rest; a mixin offering them must come before this class in the
method resolution order (``S3Store(S3Service, MultipartCalls,
StreamingStore)``: ``StreamingStore``, listed last, puts the base after it).

No operation here adds more than one method call to a read: ``read`` calls
``fetch`` (which tests and wrappers may replace), ``fetch`` the backend's
``_fetch``.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import AsyncIterator, Sequence
from typing import ClassVar, TypeVar, overload

from .config import ClientConfig
from .errors import InvalidArgument, InvalidRequest, NotFound, describe
from .store import Buffer, Fetched, PartUpload, SourceSpec, StoreFeatures, objects_of
from .types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from .urls import validate_bucket
from .validate import (
    check_object,
    compose_args,
    delete_args,
    list_args,
    read_args,
    write_args,
)

__all__ = ["StoreBase"]

_S = TypeVar("_S", bound="StoreBase")


class StoreBase(abc.ABC):
    """The operations of :class:`~aioflux._core.store.ObjectStore` over a
    backend's wire calls (see the module doc for what a backend implements).

    Names are ``/``-separated; listings are sorted by name and paginated.
    Every read is checked (length, and crc32c where the object has one);
    every write is all-or-nothing. Failures are ``StorageError``
    subclasses naming the operation, bucket and object.
    """

    config: ClientConfig
    #: What the backend can do beyond the common operations, unless it
    #: overrides :attr:`features`.
    _features: ClassVar[StoreFeatures]
    #: How messages name the backend ("S3", "Azure", "the filesystem").
    _kind: ClassVar[str] = "this store"

    @property
    def features(self) -> StoreFeatures:
        """What this store can do beyond the common operations
        (:class:`~aioflux._core.store.StoreFeatures`)."""
        return self._features

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections and handles of the current event loop."""

    def _check_object(self, op: str, bucket: str, name: str, *, bucket_arg: str = "bucket",
                      name_arg: str = "name") -> None:
        """Refuse a bucket or object name the store cannot address."""
        check_object(op, bucket, name, bucket_arg=bucket_arg, name_arg=name_arg,
                     scheme=self.features.scheme)

    # -- metadata --------------------------------------------------------------

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        """Metadata of one object.

        Args:
            bucket: bucket name.
            name: object name.

        Returns:
            ObjectInfo (size, version token, crc32c where kept, metadata).

        Raises:
            NotFound: no such object or bucket.
            StorageError: any other failure.
        """
        self._check_object("stat", bucket, name)
        return await self._stat(bucket, name)

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
        try:
            await self.stat(bucket, name)
        except NotFound:
            return False
        return True

    # -- listing ---------------------------------------------------------------

    def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
             start_offset: str | None = None, end_offset: str | None = None,
             page_size: int = 1000) -> AsyncIterator[ListPage]:
        """List objects page by page, sorted by name, each page checked.

        Args:
            bucket: bucket name.
            prefix: only names starting with this (a name prefix, not a folder).
            delimiter: group names by this (``"/"``), reported as prefixes.
            start_offset: first name (inclusive) of a half-open range.
            end_offset: end (exclusive) of the range.
            page_size: most entries a page (servers cap it: GCS and S3 at 1000).

        Returns:
            An async iterator of ListPage, fetched as it is consumed.

        Raises:
            InvalidURL: a malformed bucket or prefix (at once).
            InvalidArgument: a setting of the wrong type (at once).
            NotFound: no such bucket (while iterating).
            ProtocolError: a page out of order, outside the prefix or offsets.
            StorageError: any other failure (while iterating).
        """
        list_args("list", bucket, prefix, delimiter=delimiter, start_offset=start_offset,
                  end_offset=end_offset, page_size=page_size, scheme=self.features.scheme)
        return self._pages(bucket, prefix, delimiter, start_offset, end_offset, page_size)

    def list_objects(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                     end_offset: str | None = None) -> AsyncIterator[ObjectInfo]:
        """List objects one by one (every page of :meth:`list`, no delimiter).

        Args:
            bucket: bucket name.
            prefix: only names starting with this.
            start_offset: first name (inclusive).
            end_offset: end (exclusive).

        Returns:
            An async iterator of ObjectInfo in the listing's order.

        Raises:
            InvalidURL: a malformed bucket or prefix (at once).
            StorageError: listing failed (while iterating).
        """
        return objects_of(self.list(bucket, prefix, start_offset=start_offset,
                                    end_offset=end_offset))

    # -- reads -----------------------------------------------------------------

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
            end: end (exclusive); ``None`` reads to the end of the object.
            into: write the bytes into this writable buffer instead.
            generation: read this version only (pins it).

        Returns:
            The bytes, or the count of bytes written when ``into`` is given.

        Raises:
            NotFound: no such object, or it is no longer that generation.
            InvalidArgument: a bad range, or ``into`` too small.
            InvalidRequest: ``start`` past the end (416).
            ChecksumMismatch: the body was corrupt on every attempt.
            ProtocolError: another range or body than asked for.
            StorageError: any other failure.
        """
        read_args(bucket, name, start, end, into, generation, scheme=self.features.scheme)
        if end is not None and end == start:
            return b"" if into is None else 0
        dest = None if into is None else memoryview(into).cast("B")
        fetched = await self.fetch(bucket, name, start=start, end=end, into=dest,
                                   generation=generation)
        return fetched.count if fetched.data is None else fetched.data

    async def fetch(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                    into: memoryview | None = None, generation: int | None = None,
                    size: int | None = None, crc: int | None = None,
                    want_crc: bool = False) -> Fetched:
        """The engines' checked read: ``read`` with what the caller knows.

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
            NotFound: no such object (or version), or replaced while read.
            ChecksumMismatch: the bytes differ from ``crc`` or the stored
                checksum (a file or memory object not ``size`` bytes too).
            ProtocolError: another range or body than announced, or a range
                below ``size`` refused as past the end (the message names it).
            InvalidRequest: ``start`` past the end (416), or past ``size``.
            StorageError: any other failure.
        """
        return await self._fetch(bucket, name, start, end, into, generation, size, crc,
                                 want_crc)

    # -- writes ----------------------------------------------------------------

    async def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
                    content_type: str = "application/octet-stream",
                    if_generation_match: int | None = None,
                    metadata: dict[str, str] | None = None,
                    resumable: bool | None = None) -> ObjectInfo:
        """Store ``data`` as the object, all or nothing, checked.

        Args:
            bucket: bucket name.
            name: object name.
            data: the content (S3 takes 5 GiB at once: ``start_upload`` beyond).
            content_type: Content-Type to store.
            if_generation_match: precondition; 0 means "must not exist yet".
            metadata: custom metadata (files take none).
            resumable: force (True) or forbid (False) a resumable upload
                (GCS; S3 and Azure have none); None: by size.

        Returns:
            ObjectInfo of the new object.

        Raises:
            InvalidArgument: ``resumable=True`` where there are none, or
                ``metadata`` the store cannot keep.
            PreconditionFailed: ``if_generation_match`` did not hold.
            ChecksumMismatch: the stored object differs (it was deleted).
            StorageError: any other failure (nothing is published).
        """
        write_args(bucket, name, data, content_type, if_generation_match, metadata, resumable,
                   scheme=self.features.scheme)
        return await self._write(bucket, name, memoryview(data).cast("B"), content_type,
                                 if_generation_match, metadata, resumable)

    @abc.abstractmethod
    def start_upload(self, bucket: str, name: str, *,
                     content_type: str = "application/octet-stream",
                     part_size: int = 8 * 1024 * 1024,
                     metadata: dict[str, str] | None = None,
                     if_generation_match: int | None = None) -> PartUpload:
        """A streaming upload in parts, for the writer engine.

        Args:
            bucket: bucket name.
            name: object name.
            content_type: Content-Type of the final object.
            part_size: size of every part but the last.
            metadata: custom metadata of the final object.
            if_generation_match: publish only if the object is then this
                generation (``0``: absent), checked by the publishing request.

        Returns:
            The upload; nothing is sent before its first part.
        """

    # -- deletes, copies, composes ------------------------------------------------

    async def delete(self, bucket: str, name: str, *, generation: int | None = None,
                     if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        """Delete an object (that generation only, if given).

        Args:
            bucket: bucket name.
            name: object name.
            generation: delete only this version (another is NotFound).
            if_generation_match: delete only if the object's version is this.
            missing_ok: treat "already gone" (or that generation replaced)
                as success.

        Raises:
            NotFound: no such object or generation (unless ``missing_ok``).
            PreconditionFailed: ``if_generation_match`` did not hold.
            StorageError: any other failure.
        """
        delete_args(bucket, name, generation, if_generation_match, missing_ok,
                    scheme=self.features.scheme)
        await self._delete(bucket, name, generation, if_generation_match, missing_ok)

    async def copy(self, bucket: str, name: str, dest_bucket: str,
                   dest_name: str) -> ObjectInfo:
        """Copy an object within the store (server-side where it can), checked.

        Args:
            bucket: source bucket.
            name: source object.
            dest_bucket: destination bucket.
            dest_name: destination object.

        Returns:
            ObjectInfo of the copy.

        Raises:
            NotFound: the source is missing.
            PreconditionFailed: the source was replaced while it was copied.
            ChecksumMismatch: the copy differs from the source (it was deleted).
            StorageError: any other failure.
        """
        self._check_object("copy", bucket, name)
        self._check_object("copy", dest_bucket, dest_name, bucket_arg="dest_bucket",
                           name_arg="dest_name")
        return await self._copy(bucket, name, dest_bucket, dest_name)

    async def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec], *,
                      if_generation_match: int | None = None,
                      content_type: str = "application/octet-stream") -> ObjectInfo:
        """Concatenate up to ``features.compose`` objects into ``destination``.

        Args:
            bucket: bucket name.
            destination: name of the composite.
            sources: names, ``(name, generation)`` pairs or ObjectInfo (a
                known generation is a precondition).
            if_generation_match: precondition on the destination.
            content_type: Content-Type of the composite.

        Returns:
            ObjectInfo of the composite.

        Raises:
            InvalidRequest: the store has no compose.
            InvalidArgument: zero sources, or more than ``features.compose``.
            PreconditionFailed: a source or the destination changed.
            ChecksumMismatch: the composite is not the sources' concatenation.
            StorageError: any other failure.
        """
        most = self.features.compose
        if not most:
            raise self._unsupported("compose", bucket, destination,
                                    f"{self._kind} cannot concatenate objects server-side "
                                    "(features.compose is 0)")
        compose_args(bucket, destination, sources, if_generation_match, content_type)
        if not 1 <= len(sources) <= most:
            where = describe("compose", bucket, destination, self.features.scheme)
            raise InvalidArgument(f"{where}: needs 1-{most} sources, got {len(sources)}")
        return await self._compose(bucket, destination, sources, if_generation_match,
                                   content_type)

    # -- open uploads: by default none --------------------------------------------

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """Open streaming uploads: what ``aioflux clean`` may abort.

        Args:
            bucket: bucket name.
            prefix: only uploads of names starting with this.

        Returns:
            MultipartUploadInfo of each open upload (by default none).

        Raises:
            StorageError: the listing failed.
        """
        validate_bucket(bucket, scheme=self.features.scheme)
        return []

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Drop an open multipart upload (``features.multipart`` only).

        Args:
            bucket: bucket name.
            name: object name of the upload.
            upload_id: the upload's ID.

        Raises:
            InvalidRequest: the store has no multipart uploads.
            NotFound: no such upload.
        """
        raise self._unsupported("abort multipart upload", bucket, name,
                                f"{self._kind} has no multipart uploads "
                                "(features.multipart is False)")

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
        """
        raise self._unsupported("list parts", bucket, name,
                                f"{self._kind} has no multipart uploads "
                                "(features.multipart is False)")

    def _unsupported(self, op: str, bucket: str, name: str, why: str) -> InvalidRequest:
        """The typed error of an operation this store does not offer."""
        return InvalidRequest(f"{describe(op, bucket, name, self.features.scheme)}: {why}",
                              operation=op, bucket=bucket, name=name, reason="unsupported")

    # -- the wire calls --------------------------------------------------------------

    @abc.abstractmethod
    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        """One object's metadata (arguments checked)."""

    @abc.abstractmethod
    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None,
               page_size: int) -> AsyncIterator[ListPage]:
        """The listing's checked pages (arguments checked)."""

    @abc.abstractmethod
    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        """The checked read of ``[start, end)`` (see :meth:`fetch`)."""

    @abc.abstractmethod
    async def _write(self, bucket: str, name: str, data: memoryview, content_type: str,
                     if_generation_match: int | None, metadata: dict[str, str] | None,
                     resumable: bool | None) -> ObjectInfo:
        """Publish ``data`` whole, checked (arguments checked)."""

    @abc.abstractmethod
    async def _delete(self, bucket: str, name: str, generation: int | None,
                      if_generation_match: int | None, missing_ok: bool) -> None:
        """Delete the object (arguments checked)."""

    @abc.abstractmethod
    async def _copy(self, bucket: str, name: str, dest_bucket: str,
                    dest_name: str) -> ObjectInfo:
        """Copy the object, checked (names checked)."""

    async def _compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec],
                       if_generation_match: int | None, content_type: str) -> ObjectInfo:
        """Concatenate ``sources`` (only where ``features.compose``)."""
        raise NotImplementedError(f"{type(self).__name__} declares compose but has no _compose")
