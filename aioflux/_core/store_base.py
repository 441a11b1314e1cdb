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

The operations' docstrings are :class:`~.store.ObjectStore`'s, written
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
from collections.abc import AsyncIterator, Sequence
from typing import ClassVar, TypeVar, overload

from .config import ClientConfig
from .errors import InvalidArgument, InvalidRequest, NotFound, describe
from .store import (
    Buffer,
    Fetched,
    ObjectStore,
    PartUpload,
    SourceSpec,
    StoreFeatures,
    objects_of,
)
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
        return self._features

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
             page_size: int = 1000) -> AsyncIterator[ListPage]:
        list_args("list", bucket, prefix, delimiter=delimiter, start_offset=start_offset,
                  end_offset=end_offset, page_size=page_size, scheme=self.features.scheme)
        return self._pages(bucket, prefix, delimiter, start_offset, end_offset, page_size)

    def list_objects(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                     end_offset: str | None = None) -> AsyncIterator[ObjectInfo]:
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
        return await self._write(bucket, name, memoryview(data).cast("B"), content_type,
                                 if_generation_match, metadata, resumable)

    @abc.abstractmethod
    def start_upload(self, bucket: str, name: str, *,
                     content_type: str = "application/octet-stream",
                     part_size: int = 8 * 1024 * 1024,
                     metadata: dict[str, str] | None = None,
                     if_generation_match: int | None = None) -> PartUpload:
        ...

    # -- deletes, copies, composes ------------------------------------------------

    async def delete(self, bucket: str, name: str, *, generation: int | None = None,
                     if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        delete_args(bucket, name, generation, if_generation_match, missing_ok,
                    scheme=self.features.scheme)
        await self._delete(bucket, name, generation, if_generation_match, missing_ok)

    async def copy(self, bucket: str, name: str, dest_bucket: str,
                   dest_name: str) -> ObjectInfo:
        self._check_object("copy", bucket, name)
        self._check_object("copy", dest_bucket, dest_name, bucket_arg="dest_bucket",
                           name_arg="dest_name")
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
        return await self._compose(bucket, destination, sources, if_generation_match,
                                   content_type)

    # -- open uploads: by default none --------------------------------------------

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        validate_bucket(bucket, scheme=self.features.scheme)
        return []

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        raise self._unsupported("abort multipart upload", bucket, name,
                                f"{self._kind} has no multipart uploads "
                                "(features.multipart is False)")

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
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


#: The operations whose docstrings are the protocol's (``_take_docs``).
DOCUMENTED = ("features", "aclose", "stat", "exists", "list", "list_objects", "read", "fetch",
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
