"""``StoreBase``: the storage protocol's operations, written once.

:class:`~.protocol.ObjectStore` is what the engines call; this class is how a
backend offers it without writing its user-facing methods again. Each
operation is defined here once, with its docstring and its argument
checks, on top of a narrow set of *wire calls* that the backend
implements: the requests (or filesystem calls) themselves, handed
arguments already checked.

What a backend implements:

- ``features``: its :class:`~.protocol.StoreFeatures`, as data (a class
  attribute, or an instance's where it depends on the instance, as
  ``HttpStore``'s scheme); ``features.scheme`` names its URLs in messages,
  ``features.read_only`` refuses every write here, after its arguments
  are checked; ``_kind`` names the store in the messages of what it does
  not offer ("S3"), ``_read_only_why`` says why it is read-only.
- ``_stat``: one object's ObjectInfo, or ``NotFound``.
- ``_pages``: the listing's pages, each checked (``_core/checks/pages.py``),
  fetched as consumed; a store that cannot list refuses here (at once if
  it likes: ``list`` returns what this returns). ``fields`` is GCS's
  selector; the other stores ignore it.
- ``_fetch``: the checked read of ``[start, end)`` behind ``read`` and
  ``fetch`` (status, range, length, crc32c). The hot path: keep it direct.
- ``aclose``; unless read-only: ``_write`` (all or nothing, ``data`` a
  byte ``memoryview``), ``_start_upload`` (the writer engine's upload:
  arguments checked, the backend's own part-size range and metadata rules
  left to it), ``_delete``, ``_copy``, and ``_compose`` where
  ``features.compose``.
- The open uploads, where it has any: ``_list_uploads`` (by default none),
  ``_abort_upload`` and ``_list_parts`` (by default refused); a store with
  ``features.multipart`` also takes :class:`MultipartCalls` and its
  ``_initiate_multipart``, ``_upload_part`` and ``_complete_multipart``.
  A mixin giving them must come before this class in the method
  resolution order (``S3Store(S3Service, S3Uploads, StreamingStore)``:
  ``StreamingStore``, listed last, puts the base after it).

Their signatures are the wire calls at the end of this class.

What it may override: ``_check_object`` (a stricter rule for names, as the
local store's paths).

The operations' docstrings are :class:`~.protocol.ObjectStore`'s, written
once there (the public contract, which the docs render from the source)
and given to this class's methods at import (``_take_docs``); the docs'
griffe extension ``docs/_hooks/protocol_docs.py`` does the same for the
pages of the concrete stores.

No operation here adds more than one method call to a read: ``read`` calls
``fetch`` (which tests and wrappers may replace), ``fetch`` the backend's
``_fetch``.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import AsyncIterator, Callable, Sequence
from typing import ClassVar, NoReturn, TypeVar, overload

from ..checks.arguments import (
    check_bytes,
    check_content_type,
    check_instance,
    check_int,
    check_metadata,
    check_object,
    check_str,
    compose_args,
    delete_args,
    list_args,
    read_args,
    write_args,
)
from ..errors import InvalidArgument, InvalidRequest, NotFound, describe
from ..records.types import LIST_FIELDS, ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from ..settings.config import ClientConfig
from .protocol import (
    Buffer,
    Fetched,
    MultipartStore,
    ObjectStore,
    PartUpload,
    SourceSpec,
    StoreFeatures,
    objects_of,
)

__all__ = ["MultipartCalls", "StoreBase"]

#: A streaming upload's parts where neither the caller nor the store's
#: smallest part says otherwise.
DEFAULT_PART_SIZE = 8 * 1024 * 1024

_S = TypeVar("_S", bound="StoreBase")


class StoreBase(abc.ABC):
    """The operations of :class:`~aioflux._core.storage.protocol.ObjectStore` over a
    backend's wire calls (see the module doc for what a backend implements).

    Names are ``/``-separated; listings are sorted by name and paginated.
    Every read is checked (length, and crc32c where the object has one);
    every write is all-or-nothing. Failures are ``StorageError``
    subclasses naming the operation, bucket and object.
    """

    config: ClientConfig
    #: What the backend can do beyond the common operations: data, the
    #: class's (or an instance's of its own, as ``HttpStore``'s scheme).
    features: StoreFeatures
    #: How messages name the backend ("S3", "Azure", "the filesystem").
    _kind: ClassVar[str] = "this store"
    #: Why a ``features.read_only`` store takes no writes, for its refusals.
    _read_only_why: ClassVar[str] = "it takes no writes"

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def aclose(self) -> None:
        ...

    def _check_object(self, op: str, bucket: str, name: str, *, bucket_arg: str = "bucket",
                      name_arg: str = "name") -> None:
        """Refuse a bucket or object name the store cannot address."""
        check_object(op, bucket, name, bucket_arg=bucket_arg, name_arg=name_arg,
                     scheme=self.features.scheme)

    # -- metadata --------------------------------------------------------------

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        self._check_object("stat", bucket, name)
        return await self._stat(bucket, name)

    async def exists(self, bucket: str, name: str) -> bool:
        try:
            await self.stat(bucket, name)
        except NotFound:
            return False
        return True

    # -- listing ---------------------------------------------------------------

    def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
             start_offset: str | None = None, end_offset: str | None = None,
             page_size: int = 1000,
             fields: str | None = LIST_FIELDS) -> AsyncIterator[ListPage]:
        list_args("list", bucket, prefix, delimiter=delimiter, start_offset=start_offset,
                  end_offset=end_offset, page_size=page_size, fields=fields,
                  scheme=self.features.scheme)
        return self._pages(bucket, prefix, delimiter, start_offset, end_offset, page_size,
                           fields)

    def list_objects(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                     end_offset: str | None = None,
                     fields: str | None = LIST_FIELDS) -> AsyncIterator[ObjectInfo]:
        return objects_of(self.list(bucket, prefix, start_offset=start_offset,
                                    end_offset=end_offset, fields=fields))

    # -- reads -----------------------------------------------------------------

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: None = ..., generation: int | None = ...) -> bytes: ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: Buffer, generation: int | None = ...) -> int: ...

    async def read(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                   into: Buffer | None = None, generation: int | None = None) -> bytes | int:
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
        return await self._fetch(bucket, name, start, end, into, generation, size, crc,
                                 want_crc)

    # -- writes ----------------------------------------------------------------

    async def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
                    content_type: str = "application/octet-stream",
                    if_generation_match: int | None = None,
                    metadata: dict[str, str] | None = None,
                    resumable: bool | None = None) -> ObjectInfo:
        write_args(bucket, name, data, content_type, if_generation_match, metadata, resumable,
                   scheme=self.features.scheme)
        self._writable("write", bucket, name)
        return await self._write(bucket, name, memoryview(data).cast("B"), content_type,
                                 if_generation_match, metadata, resumable)

    def start_upload(self, bucket: str, name: str, *,
                     content_type: str = "application/octet-stream",
                     part_size: int | None = None,
                     metadata: dict[str, str] | None = None,
                     if_generation_match: int | None = None) -> PartUpload:
        op = "start_upload"
        self._check_object(op, bucket, name)
        check_content_type(op, content_type)
        if part_size is None:  # the store's smallest part, where it has one above a byte
            least = self.features.min_part_size
            part_size = least if least > 1 else DEFAULT_PART_SIZE
        check_int(op, "part_size", part_size, minimum=1)
        check_metadata(op, "metadata", metadata)
        check_int(op, "if_generation_match", if_generation_match, optional=True)
        self._writable("write", bucket, name)
        return self._start_upload(bucket, name, content_type, part_size, metadata,
                                  if_generation_match)

    # -- deletes, copies, composes ------------------------------------------------

    async def delete(self, bucket: str, name: str, *, generation: int | None = None,
                     if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        delete_args(bucket, name, generation, if_generation_match, missing_ok,
                    scheme=self.features.scheme)
        self._writable("delete", bucket, name)
        await self._delete(bucket, name, generation, if_generation_match, missing_ok)

    async def copy(self, bucket: str, name: str, dest_bucket: str,
                   dest_name: str) -> ObjectInfo:
        self._check_object("copy", bucket, name)
        self._check_object("copy", dest_bucket, dest_name, bucket_arg="dest_bucket",
                           name_arg="dest_name")
        self._writable("copy", dest_bucket, dest_name)
        return await self._copy(bucket, name, dest_bucket, dest_name)

    async def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec], *,
                      if_generation_match: int | None = None,
                      content_type: str = "application/octet-stream") -> ObjectInfo:
        most = self.features.compose
        if not most:
            raise self._unsupported("compose", bucket, destination,
                                    f"{self._kind} cannot concatenate objects server-side "
                                    "(features.compose is 0)")
        compose_args(bucket, destination, sources, if_generation_match, content_type)
        if not 1 <= len(sources) <= most:
            where = describe("compose", bucket, destination, self.features.scheme)
            raise InvalidArgument(f"{where}: needs 1-{most} sources, got {len(sources)}")
        self._writable("compose", bucket, destination)
        return await self._compose(bucket, destination, sources, if_generation_match,
                                   content_type)

    # -- open uploads ------------------------------------------------------------------

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        list_args("list multipart uploads", bucket, prefix, scheme=self.features.scheme)
        return await self._list_uploads(bucket, prefix)

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        self._upload_args("abort multipart upload", bucket, name, upload_id)
        await self._abort_upload(bucket, name, upload_id)

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        self._upload_args("list parts", bucket, name, upload_id)
        return await self._list_parts(bucket, name, upload_id)

    def _upload_args(self, op: str, bucket: str, name: str, upload_id: str) -> None:
        self._check_object(op, bucket, name)
        check_str(op, "upload_id", upload_id)

    def _unsupported(self, op: str, bucket: str, name: str, why: str) -> InvalidRequest:
        """The typed error of an operation this store does not offer."""
        return InvalidRequest(f"{describe(op, bucket, name, self.features.scheme)}: {why}",
                              operation=op, bucket=bucket, name=name, reason="unsupported")

    def _writable(self, op: str, bucket: str, name: str) -> None:
        """Refuse a write of a read-only store (its arguments checked already)."""
        if self.features.read_only:
            raise self._unsupported(op, bucket, name, f"{self.features.scheme}:// URLs are "
                                    f"read-only ({self._read_only_why})")

    # -- the wire calls --------------------------------------------------------------

    @abc.abstractmethod
    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        """One object's metadata (arguments checked)."""

    @abc.abstractmethod
    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None, page_size: int,
               fields: str | None) -> AsyncIterator[ListPage]:
        """The listing's checked pages (arguments checked; ``fields``: GCS's)."""

    @abc.abstractmethod
    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        """The checked read of ``[start, end)`` (see :meth:`fetch`)."""

    # A read-only store has none of the writes: the base never calls them.

    async def _write(self, bucket: str, name: str, data: memoryview, content_type: str,
                     if_generation_match: int | None, metadata: dict[str, str] | None,
                     resumable: bool | None) -> ObjectInfo:
        """Publish ``data`` whole, checked (arguments checked)."""
        self._missing("_write")

    def _start_upload(self, bucket: str, name: str, content_type: str, part_size: int,
                      metadata: dict[str, str] | None,
                      if_generation_match: int | None) -> PartUpload:
        """The streaming upload (arguments checked; the part-size range and
        what metadata the store keeps are the backend's to check)."""
        self._missing("_start_upload")

    async def _delete(self, bucket: str, name: str, generation: int | None,
                      if_generation_match: int | None, missing_ok: bool) -> None:
        """Delete the object (arguments checked)."""
        self._missing("_delete")

    async def _copy(self, bucket: str, name: str, dest_bucket: str,
                    dest_name: str) -> ObjectInfo:
        """Copy the object, checked (names checked)."""
        self._missing("_copy")

    async def _compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec],
                       if_generation_match: int | None, content_type: str) -> ObjectInfo:
        """Concatenate ``sources`` (only where ``features.compose``)."""
        self._missing("_compose")

    async def _list_uploads(self, bucket: str,
                            prefix: str) -> builtins.list[MultipartUploadInfo]:
        """The open uploads (arguments checked): by default none."""
        return []

    async def _abort_upload(self, bucket: str, name: str, upload_id: str) -> None:
        """Drop an open upload (arguments checked): by default refused."""
        raise self._unsupported("abort multipart upload", bucket, name,
                                f"{self._kind} has no multipart uploads "
                                "(features.multipart is False)")

    async def _list_parts(self, bucket: str, name: str,
                          upload_id: str) -> builtins.list[PartInfo]:
        """An open upload's parts (arguments checked): by default refused."""
        raise self._unsupported("list parts", bucket, name,
                                f"{self._kind} has no multipart uploads "
                                "(features.multipart is False)")

    def _missing(self, call: str) -> NoReturn:
        raise NotImplementedError(f"{type(self).__name__} is not read-only but has no {call}")


class MultipartCalls(abc.ABC):
    """:class:`~.protocol.MultipartStore`'s primitives, checked once, over a
    backend's ``_initiate_multipart``, ``_upload_part`` and
    ``_complete_multipart``; for a store with ``features.multipart``,
    listed before :class:`StoreBase`."""

    # StoreBase's, which comes after this class in a store's bases.
    _check_object: Callable[..., None]

    async def initiate_multipart(self, bucket: str, name: str, *,
                                 content_type: str = "application/octet-stream",
                                 metadata: dict[str, str] | None = None) -> str:
        op = "initiate multipart upload"
        self._check_object(op, bucket, name)
        check_content_type(op, content_type)
        check_metadata(op, "metadata", metadata)
        return await self._initiate_multipart(bucket, name, content_type, metadata)

    async def upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                          data: bytes | bytearray | memoryview,
                          checksum: int | None = None) -> PartInfo:
        op = "upload part"
        self._check_object(op, bucket, name)
        check_str(op, "upload_id", upload_id)
        check_int(op, "part_number", part_number, minimum=None)  # the range: the backend's
        check_bytes(op, "data", data)
        check_int(op, "checksum", checksum, optional=True)
        return await self._upload_part(bucket, name, upload_id, part_number,
                                       memoryview(data).cast("B"), checksum)

    async def complete_multipart(self, bucket: str, name: str, upload_id: str,
                                 parts: Sequence[PartInfo]) -> dict[str, str]:
        op = "complete multipart upload"
        self._check_object(op, bucket, name)
        check_str(op, "upload_id", upload_id)
        check_instance(op, "parts", parts, (list, tuple))
        for part in parts:
            check_instance(op, "parts[...]", part, PartInfo)
        return await self._complete_multipart(bucket, name, upload_id, parts)

    @abc.abstractmethod
    async def _initiate_multipart(self, bucket: str, name: str, content_type: str,
                                  metadata: dict[str, str] | None) -> str:
        """Start the upload (arguments checked); its id."""

    @abc.abstractmethod
    async def _upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                           data: memoryview, checksum: int | None) -> PartInfo:
        """Send one part (types checked; its number's range is the backend's)."""

    @abc.abstractmethod
    async def _complete_multipart(self, bucket: str, name: str, upload_id: str,
                                  parts: Sequence[PartInfo]) -> dict[str, str]:
        """Publish the parts (arguments checked); the answer's headers of interest."""


#: The operations whose docstrings are the protocol's (``_take_docs``).
DOCUMENTED = ("aclose", "stat", "exists", "list", "list_objects", "read", "fetch",
              "write", "start_upload", "delete", "copy", "compose", "list_multipart_uploads",
              "abort_multipart", "list_parts")


def _take_docs(cls: type, protocol: type, names: Sequence[str]) -> None:
    """Give ``cls``'s methods ``names`` the docstrings of ``protocol``'s.

    Each docstring is written once, on the protocol; a method here that
    has one of its own would be a second copy to keep in step.

    Raises:
        TypeError: a name missing from either class, without a docstring
            on the protocol, or with one of its own on ``cls`` (at import).
    """
    for name in names:
        ours, theirs = cls.__dict__.get(name), protocol.__dict__.get(name)
        if ours is None or theirs is None or not getattr(theirs, "__doc__", None):
            raise TypeError(f"{cls.__name__}.{name}: no such operation on both "
                            f"{cls.__name__} and {protocol.__name__}, documented on the latter")
        if ours.__doc__:
            raise TypeError(f"{cls.__name__}.{name} has a docstring of its own: it is "
                            f"{protocol.__name__}.{name}'s, written once there")
        ours.__doc__ = theirs.__doc__


_take_docs(StoreBase, ObjectStore, DOCUMENTED)
_take_docs(MultipartCalls, MultipartStore,
           ("initiate_multipart", "upload_part", "complete_multipart"))
