"""``MemoryStore``: an in-memory :class:`~aioflux._core.storage.protocol.ObjectStore` for tests.

Objects are bytes in a dict, with what a GCS bucket keeps beside them:

- a generation per write, from one counter of the store (so it grows, and
  never repeats, across objects), and the crc32c computed on write;
- preconditions: ``if_generation_match`` (``0``: "must not exist"), and
  ``generation=`` pins a read or delete to one version (another is 404);
- listings sorted by name, paginated by an opaque token, with ``prefix``,
  ``delimiter`` (grouped names reported once as ``prefixes``) and the
  half-open ``[start_offset, end_offset)`` range, applied by the store
  (``features.end_offset``);
- checked reads: ranges, ``into=``, and the size and crc32c a caller knows
  from a listing compared with the object's;
- compose of up to 32 sources (a source's generation is a precondition),
  copy, and the XML-multipart primitives (initiate, upload part, complete,
  abort, list parts, list uploads, in :mod:`._memory_multipart`), which
  :meth:`MemoryStore.start_upload` uses: an open streaming upload is
  listed like one on GCS, and nothing is visible until it is published,
  after its bytes are checked against the writer's running crc32c and
  length.

Every operation runs in one step of the event loop, so each is atomic; a
bucket exists once :meth:`MemoryStore.create_bucket` made it (or it was
named to the constructor). Failures are the typed errors of the GCS client
(``NotFound``, ``PreconditionFailed``, ``InvalidRequest``, ``ChecksumMismatch``),
naming the operation and ``memory://bucket/name``.
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
from bisect import bisect_left, insort
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aioflux._core.checks.arguments import check_instance
from aioflux._core.errors import (
    ChecksumMismatch,
    Conflict,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    describe,
)
from aioflux._core.integrity.crc import crc32c, crc32c_combine, encode_crc32c
from aioflux._core.records.types import NO_METADATA, ListPage, ObjectInfo
from aioflux._core.records.urls import validate_bucket
from aioflux._core.settings.config import ClientConfig
from aioflux._core.storage.base import StoreBase
from aioflux._core.storage.protocol import (
    Fetched,
    ObjectStore,
    PartUpload,
    SourceSpec,
    StoreFeatures,
    composite_of,
    source_of,
)

from ._memory_multipart import MAX_PARTS, SCHEME, MemoryMultipart, MemoryUpload, now

__all__ = ["FEATURES", "MemoryStore"]

MAX_COMPOSE_SOURCES = 32
# Parts of any size: bytes in memory have no transfer unit to respect.
FEATURES = StoreFeatures(scheme=SCHEME, compose=MAX_COMPOSE_SOURCES, end_offset=True,
                         multipart=True, min_part_size=1, part_granularity=1,
                         max_parts=MAX_PARTS)


@dataclass(frozen=True, slots=True)
class _Object:
    data: bytes
    generation: int
    crc: int
    content_type: str
    metadata: dict[str, str]
    updated: str


@dataclass(slots=True)
class _Bucket:
    objects: dict[str, _Object] = field(default_factory=dict)
    names: builtins.list[str] = field(default_factory=list)  # sorted


class MemoryStore(MemoryMultipart, StoreBase):
    """Objects in memory, behaving as a GCS bucket does (see the module doc).

    Args:
        config: settings (``verify_crc32c`` governs the read checks).
        buckets: buckets that exist from the start.

    Raises:
        InvalidArgument: ``config`` is not a ClientConfig.
        InvalidURL: a bucket name is not a valid one.
    """

    _kind = "the memory store"
    features = FEATURES

    def __init__(self, config: ClientConfig | None = None, *,
                 buckets: Iterable[str] = ()) -> None:
        check_instance("MemoryStore", "config", config, ClientConfig, optional=True)
        self.config = config or ClientConfig()
        self._buckets: dict[str, _Bucket] = {}
        self._uploads = {}
        self._generations = itertools.count(1)
        for bucket in buckets:
            self._buckets[validate_bucket(bucket, scheme=SCHEME)] = _Bucket()

    def __repr__(self) -> str:
        count = sum(len(b.objects) for b in self._buckets.values())
        return f"MemoryStore({len(self._buckets)} buckets, {count} objects)"

    async def aclose(self) -> None:
        """Nothing is held per event loop; the objects stay (the store is
        the state a test inspects)."""
        return None

    async def create_bucket(self, bucket: str) -> None:
        """Create an empty bucket.

        Args:
            bucket: its name (GCS naming rules).

        Raises:
            InvalidURL: not a valid bucket name.
            Conflict: it exists already.
        """
        validate_bucket(bucket, scheme=SCHEME)
        await asyncio.sleep(0)
        if bucket in self._buckets:
            raise Conflict(f"{describe('create_bucket', bucket, '', SCHEME)} failed: the "
                           "bucket exists", operation="create_bucket", bucket=bucket,
                           status=409)
        self._buckets[bucket] = _Bucket()

    # -- helpers ----------------------------------------------------------------

    def _bucket(self, op: str, bucket: str, name: str = "") -> _Bucket:
        found = self._buckets.get(bucket)
        if found is None:
            raise NotFound(f"{describe(op, bucket, name, SCHEME)} failed: no such bucket",
                           operation=op, bucket=bucket, name=name, status=404,
                           reason="noSuchBucket")
        return found

    def _object(self, op: str, bucket: str, name: str,
                generation: int | None = None) -> _Object:
        obj = self._bucket(op, bucket, name).objects.get(name)
        if obj is None:
            raise NotFound(f"{describe(op, bucket, name, SCHEME)} failed: no such object",
                           operation=op, bucket=bucket, name=name, status=404,
                           reason="notFound")
        if generation is not None and obj.generation != generation:
            raise NotFound(f"{describe(op, bucket, name, SCHEME)} failed: generation "
                           f"{generation} is gone (now {obj.generation})", operation=op,
                           bucket=bucket, name=name, status=404, reason="notFound")
        return obj

    def _check_precondition(self, op: str, bucket: str, name: str,
                            if_generation_match: int | None) -> None:
        if if_generation_match is None:
            return
        current = self._bucket(op, bucket, name).objects.get(name)
        generation = 0 if current is None else current.generation
        if generation != if_generation_match:
            raise PreconditionFailed(
                f"{describe(op, bucket, name, SCHEME)} failed: HTTP 412 conditionNotMet: "
                f"generation is {generation}, not {if_generation_match}", operation=op,
                bucket=bucket, name=name, status=412, reason="conditionNotMet")

    def _publish(self, op: str, bucket: str, name: str, data: bytes, crc: int,
                 content_type: str, metadata: dict[str, str] | None) -> ObjectInfo:
        """Make ``data`` the current version of ``name`` (the one place objects change)."""
        store = self._bucket(op, bucket, name)
        if name not in store.objects:
            insort(store.names, name)
        obj = _Object(data, next(self._generations), crc, content_type, dict(metadata or {}),
                      now())
        store.objects[name] = obj
        return _info(bucket, name, obj)

    # -- metadata ---------------------------------------------------------------

    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        await asyncio.sleep(0)
        return _info(bucket, name, self._object("stat", bucket, name))

    # -- listing ----------------------------------------------------------------

    async def _pages(self, bucket: str, prefix: str, delimiter: str | None,
                     start_offset: str | None, end_offset: str | None,
                     page_size: int, fields: str | None) -> AsyncIterator[ListPage]:
        # Each page is read when asked for, so objects written meanwhile
        # after the last name seen appear.
        delimiter = delimiter or None
        after: str | None = None
        while True:
            await asyncio.sleep(0)
            store = self._bucket("list", bucket, prefix)
            objects: builtins.list[ObjectInfo] = []
            prefixes: builtins.list[str] = []
            last: str | None = None
            more = False
            for key, obj in self._entries(store, prefix, delimiter, start_offset, end_offset,
                                          after):
                if len(objects) + len(prefixes) == page_size:
                    more = True
                    break
                if obj is None:
                    prefixes.append(key)
                else:
                    objects.append(_info(bucket, key, obj))
                last = key
            # The token is the last entry reported: the next page starts after it.
            yield ListPage(objects=objects, prefixes=prefixes,
                           next_page_token=last if more else None)
            if not more:
                return
            after = last

    @staticmethod
    def _entries(store: _Bucket, prefix: str, delimiter: str | None, start_offset: str | None,
                 end_offset: str | None, after: str | None) -> Iterator[tuple[str, _Object | None]]:
        """(name, object) and (prefix, None) entries in name order, after ``after``."""
        names = store.names
        first = max(prefix, start_offset or "")
        i = bisect_left(names, first)
        group: str | None = None
        while i < len(names):
            name = names[i]
            i += 1
            if not name.startswith(prefix) or (end_offset is not None and name >= end_offset):
                return  # sorted: the names under the prefix are one run, from ``first``
            if delimiter:
                cut = name.find(delimiter, len(prefix))
                if cut >= 0:
                    key = name[:cut + len(delimiter)]
                    if key != group and (after is None or key > after):
                        group = key
                        yield key, None
                    continue
            if after is None or name > after:
                yield name, store.objects[name]

    # -- reads ------------------------------------------------------------------

    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        # A size other than the caller knows fails whatever ``start``: an
        # object shorter than that is no caller's mistake.
        await asyncio.sleep(0)
        where = describe("read", bucket, name, SCHEME)
        obj = self._object("read", bucket, name, generation)
        total = len(obj.data)
        if size is not None and size != total:
            raise ChecksumMismatch(f"{where} failed: {total} bytes, the caller expected "
                                   f"{size}", operation="read", bucket=bucket, name=name)
        if start > total or (start == total and total > 0):
            # As the GCS servers and the local store answer it (HTTP 416).
            raise InvalidRequest(f"{where} failed: start {start} is past the end "
                                 f"({total} bytes)", operation="read", bucket=bucket,
                                 name=name, status=416)
        stop = total if end is None else min(end, total)
        count = stop - start
        whole = start == 0 and stop == total
        # The whole object is handed out as stored (bytes: nobody can change it).
        view = obj.data if whole else memoryview(obj.data)[start:stop]
        if whole and crc is not None and self.config.verify_crc32c and crc != obj.crc:
            raise ChecksumMismatch(f"{where} failed: crc32c {encode_crc32c(obj.crc)} != "
                                   f"expected {encode_crc32c(crc)}", operation="read",
                                   bucket=bucket, name=name)
        actual = None
        if want_crc:
            actual = obj.crc if whole else crc32c(view)
        if into is None:
            return Fetched(view if isinstance(view, bytes) else bytes(view), count, actual,
                           total)
        if len(into) < count:
            raise InvalidArgument(f"{where}: {count} bytes do not fit a buffer of {len(into)}")
        into[:count] = view
        return Fetched(None, count, actual, total)

    # -- writes -----------------------------------------------------------------

    async def _write(self, bucket: str, name: str, data: memoryview, content_type: str,
                     if_generation_match: int | None, metadata: dict[str, str] | None,
                     resumable: bool | None) -> ObjectInfo:
        content = bytes(data)  # copied: the caller may reuse its buffer
        await asyncio.sleep(0)
        self._check_precondition("write", bucket, name, if_generation_match)
        return self._publish("write", bucket, name, content, crc32c(content), content_type,
                             metadata)

    def _start_upload(self, bucket: str, name: str, content_type: str, part_size: int,
                      metadata: dict[str, str] | None,
                      if_generation_match: int | None) -> MemoryUpload:
        # A multipart upload, listed (list_multipart_uploads) while it is open.
        return MemoryUpload(self, bucket, name, content_type, part_size, metadata,
                            if_generation_match)

    async def _delete(self, bucket: str, name: str, generation: int | None,
                      if_generation_match: int | None, missing_ok: bool) -> None:
        await asyncio.sleep(0)
        try:
            self._object("delete", bucket, name, generation)
        except NotFound:
            if missing_ok:
                return
            raise
        self._check_precondition("delete", bucket, name, if_generation_match)
        store = self._buckets[bucket]
        del store.objects[name]
        del store.names[bisect_left(store.names, name)]

    async def _copy(self, bucket: str, name: str, dest_bucket: str,
                    dest_name: str) -> ObjectInfo:
        await asyncio.sleep(0)
        source = self._object("copy", bucket, name)
        return self._publish("copy", dest_bucket, dest_name, source.data, source.crc,
                             source.content_type, source.metadata)

    async def _compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec],
                       if_generation_match: int | None, content_type: str) -> ObjectInfo:
        where = describe("compose", bucket, destination, SCHEME)
        await asyncio.sleep(0)
        pieces: builtins.list[bytes] = []
        crc = 0
        for src in sources:
            src_name, gen = source_of(src)
            obj = self._object("compose", bucket, src_name)
            if gen and obj.generation != gen:
                raise PreconditionFailed(
                    f"{where} failed: HTTP 412 conditionNotMet: source {src_name} is at "
                    f"generation {obj.generation}, not {gen}", operation="compose",
                    bucket=bucket, name=destination, status=412, reason="conditionNotMet")
            pieces.append(obj.data)
            crc = crc32c_combine(crc, obj.crc, len(obj.data))
        self._check_precondition("compose", bucket, destination, if_generation_match)
        data = b"".join(pieces)
        expected = composite_of(sources)
        if expected is not None and expected != (len(data), crc):
            raise ChecksumMismatch(
                f"{where} failed: the sources hold {len(data)} bytes with crc32c "
                f"{encode_crc32c(crc)}, the ObjectInfo given say {expected[0]} bytes with "
                f"{encode_crc32c(expected[1])}; nothing was published", operation="compose",
                bucket=bucket, name=destination)
        return self._publish("compose", bucket, destination, data, crc, content_type, None)


def _info(bucket: str, name: str, obj: _Object) -> ObjectInfo:
    return ObjectInfo(bucket, name, len(obj.data), obj.generation, obj.crc,
                      metageneration=1, content_type=obj.content_type, updated=obj.updated,
                      metadata=dict(obj.metadata) if obj.metadata else NO_METADATA,
                      scheme=SCHEME)


if TYPE_CHECKING:
    def _conforms(store: MemoryStore, upload: MemoryUpload) -> tuple[ObjectStore, PartUpload]:
        # mypy checks here that the classes satisfy the protocols they serve.
        return store, upload
