"""``AsyncClient``: the GCS backend (JSON API, XML multipart, resumable uploads).

:class:`~._service.GcsService`, which the client builds on, holds the
endpoint and the authenticated transport with the objects' URLs, their
metadata and their delete. Listings are :mod:`._listing`'s; writes and
composes :mod:`._write`'s, copies :mod:`._copy`'s, streaming uploads
:mod:`._upload`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from typing import overload

from .._core.config import ClientConfig
from .._core.errors import InvalidArgument, InvalidURL
from .._core.store import Buffer, Fetched, SourceSpec, StoreFeatures, objects_of
from .._core.types import LIST_FIELDS, ListPage, ObjectInfo
from .._core.urls import validate_bucket
from .._core.validate import (
    Credentials,
    check_credentials,
    check_instance,
    check_int,
    check_metadata,
    check_object,
    check_str,
    compose_args,
    endpoint_url,
    list_args,
    read_args,
    write_args,
)
from .._engines.cache import cache_from_args
from .._engines.compose import MAX_COMPOSE_SOURCES, delete_leftovers
from .._engines.download import DownloadOptions
from .._engines.iterables import StreamItem, stream, stream_args
from .._net.failures import drain
from .._net.media import read_media
from .._net.transport import Op, Transport
from ._copy import rewrite_object
from ._listing import list_pages
from ._resumable import CHUNK_GRANULARITY
from ._service import GcsService, user_project_of
from ._upload import GcsUpload
from ._write import compose_object, write_object
from ._xml import MAX_PARTS, MIN_PART_SIZE, XmlMultipart
from ._xml_calls import XmlMultipartCalls

__all__ = ["AsyncClient", "FEATURES"]

FEATURES = StoreFeatures(scheme="gs", compose=MAX_COMPOSE_SOURCES, end_offset=True,
                         multipart=True, min_part_size=MIN_PART_SIZE,
                         part_granularity=CHUNK_GRANULARITY, max_parts=MAX_PARTS)


class AsyncClient(GcsService, XmlMultipartCalls):
    """Asynchronous GCS client. One instance can serve many concurrent tasks.

    Every request goes through one semaphore of ``config.max_concurrency``
    permits and is retried per ``config.retry``.

    Args:
        config: client settings (concurrency, timeouts, retries).
        endpoint: API root, e.g. ``http://127.0.0.1:4443`` (or
            ``127.0.0.1:4443``, as ``STORAGE_EMULATOR_HOST`` takes it) for
            an emulator. Defaults to ``STORAGE_EMULATOR_HOST`` if set, else
            real GCS.
        credentials: ``None``: Application Default Credentials, except for
            an emulator (``STORAGE_EMULATOR_HOST``, an ``http://`` endpoint,
            or an ``https://`` one on a loopback host), which gets none;
            ``"anonymous"``, a bearer token string, an ``Auth`` or a
            google-auth credentials object (one that requires scopes and
            has none, as a service account key loads, gets the storage scope).
        transport: a ready ``Transport`` (tests inject one); overrides
            ``config`` and ``credentials``.
        project: project for bucket creation.
        user_project: the project every request bills, as requester-pays
            buckets require (``userProject`` on JSON API requests,
            ``x-goog-user-project`` on XML API ones). None: google-auth
            credentials send their quota project (a user's ADC, or
            ``GOOGLE_CLOUD_QUOTA_PROJECT`` with Application Default
            Credentials) as ``x-goog-user-project``; one given overrides it.

    Raises:
        InvalidArgument: a setting of the wrong type, or a ``user_project``
            that is no project ID.
        InvalidURL: ``endpoint`` is not an http(s) URL, or carries
            ``user:password@``.
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        endpoint: str | None = None,
        credentials: Credentials = None,
        transport: Transport | None = None,
        project: str = "aioflux",
        user_project: str | None = None,
    ) -> None:
        check_instance("AsyncClient", "config", config, ClientConfig, optional=True)
        endpoint = endpoint_url("AsyncClient", endpoint)
        check_credentials("AsyncClient", credentials)
        check_str("AsyncClient", "project", project)
        user_project = user_project_of("AsyncClient", user_project)
        super().__init__(config, endpoint, credentials, transport, user_project)
        self.project = project
        self._xml = XmlMultipart(self._transport, self.endpoint, user_project)

    @property
    def features(self) -> StoreFeatures:
        """What GCS offers beyond the common operations (compose, server-side
        end offsets, XML multipart uploads)."""
        return FEATURES

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client: its connections of the current event loop now,
        and for good: a later call raises instead of reopening them
        (connections nothing would close). Closing again does nothing.

        Raises:
            InvalidArgument: (from later calls) the client is closed.
        """
        if not self._transport.closed:
            await delete_leftovers(self)  # the exit clean-up cannot use a closed client
        await self._transport.aclose(owner="client")

    # -- listing ------------------------------------------------------------

    def list(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_offset: str | None = None,
        end_offset: str | None = None,
        page_size: int = 1000,
        fields: str | None = LIST_FIELDS,
    ) -> AsyncIterator[ListPage]:
        """List objects page by page.

        Args:
            bucket: bucket name.
            prefix: only names starting with this.
            delimiter: group names by this (``"/"``), reported as prefixes.
            start_offset: first name (inclusive) of a half-open range.
            end_offset: end (exclusive) of the range.
            page_size: items per page (GCS caps it at 1000).
            fields: JSON ``fields`` selector; ``None`` returns full resources.

        Returns:
            An async iterator of ListPage, fetched as it is consumed.

        Raises:
            InvalidURL: a malformed bucket (at once).
            InvalidArgument: a setting of the wrong type (at once).
            NotFound: no such bucket (while iterating).
            StorageError: any other failure (while iterating).
        """
        list_args("list", bucket, prefix, delimiter=delimiter, start_offset=start_offset,
                  end_offset=end_offset, page_size=page_size, fields=fields)
        return list_pages(self._transport, self._json_url(bucket), bucket, prefix, delimiter,
                          start_offset, end_offset, page_size, fields, self._json_params)

    def list_objects(
        self,
        bucket: str,
        prefix: str = "",
        *,
        start_offset: str | None = None,
        end_offset: str | None = None,
        fields: str | None = LIST_FIELDS,
    ) -> AsyncIterator[ObjectInfo]:
        """List objects one by one (all pages, no delimiter).

        Args:
            bucket: bucket name.
            prefix: only names starting with this.
            start_offset: first name (inclusive).
            end_offset: end (exclusive).
            fields: JSON ``fields`` selector.

        Returns:
            An async iterator of ObjectInfo in lexicographic name order.

        Raises:
            InvalidURL: a malformed bucket (at once).
            InvalidArgument: a setting of the wrong type (at once).
            StorageError: listing failed (while iterating).
        """
        return objects_of(self.list(bucket, prefix, start_offset=start_offset,
                                  end_offset=end_offset, fields=fields))

    def stream(self, bucket: str, prefix: str = "", *, concurrency: int | None = None,
               ordered: bool = False, list_concurrency: int | None = None,
               options: DownloadOptions | None = None,
               cache_dir: str | os.PathLike[str] | None = None,
               cache_limit: int | None = None) -> AsyncIterator[StreamItem]:
        """List ``prefix`` in parallel and download each object as it is listed.

        ``async for obj in client.stream("gs://b/p", concurrency=64)``.

        Args:
            bucket: bucket name or a ``gs://bucket/prefix`` URL (then
                ``prefix`` must be empty: the whole prefix goes in the URL).
            prefix: only names starting with this.
            concurrency: downloads in flight (``None``: 64).
            ordered: yield in listing order (name order, the same every
                run, however many listers); else as downloads complete.
            list_concurrency: parallel listers (``None``: 16).
            options: planner settings (large objects are read in ranged chunks).
            cache_dir: a local disk cache across passes: each listed object
                is looked up there first (keyed by its listed version, no
                extra request) and what is downloaded is stored.
            cache_limit: most bytes in ``cache_dir`` (LRU eviction); None: no limit.

        Returns:
            An async iterator of StreamItem (``.name``, ``.data``, ``.info``).

        Raises:
            InvalidURL: a malformed bucket or URL (at once).
            InvalidArgument: a setting of the wrong type (at once).
            StorageError: listing or a download failed (while iterating).
        """
        stream_args("stream", bucket, prefix, concurrency, ordered, list_concurrency, options)
        cache = cache_from_args("stream", cache_dir, cache_limit)
        return stream(self, bucket, prefix, concurrency=concurrency, ordered=ordered,
                      list_concurrency=list_concurrency, options=options, cache=cache)

    # -- reads ----------------------------------------------------------------

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: None = ..., generation: int | None = ...) -> bytes: ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: Buffer, generation: int | None = ...) -> int: ...

    async def read(
        self,
        bucket: str,
        name: str,
        *,
        start: int = 0,
        end: int | None = None,
        into: Buffer | None = None,
        generation: int | None = None,
    ) -> bytes | int:
        """Read an object, or the byte range ``[start, end)`` of it.

        Every response is checked against what was asked (status,
        ``Content-Range``, length); whole-object reads also against the
        object's crc32c. A body cut short is resumed after its last byte.

        Args:
            bucket: bucket name.
            name: object name.
            start: first byte.
            end: end (exclusive); ``None`` reads to the end of the object.
            into: write the bytes into this buffer instead of returning them
                (e.g. a slice of a preallocated tensor's memory).
            generation: read this generation (pins the version).

        Returns:
            The bytes, or the count of bytes written when ``into`` is given.

        Raises:
            NotFound: no such object (or generation).
            InvalidArgument: bad range, or ``into`` too small.
            InvalidRequest: ``start`` past the end (416).
            ChecksumMismatch: the body was corrupt on every attempt.
            ProtocolError: the server answered with a redirect, another
                range or a body other than announced.
            StorageError: any other failure.
        """
        read_args(bucket, name, start, end, into, generation)
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
        """A checked, resumable read: ``read`` with what the caller knows.

        The engines' read (``aioflux._net.media.read_media``): a body cut
        short is resumed after its last byte, pinned to the version first
        served.

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
            NotFound: no such object (or version).
            ChecksumMismatch: the bytes differ from ``crc`` or the stored checksum.
            ProtocolError: the server answered with a redirect, another range
                or a body other than announced, or refused a range starting
                below ``size`` as past the end (416: the object is shorter
                than ``size``, which the message names).
            InvalidRequest: ``start`` past the end (416; at or past ``size``
                when given).
            StorageError: any other failure.
        """
        # The query goes into the URL string: yarl's extend_query costs ~5%
        # of a small read's client CPU. Made once: "?alt=media" and the
        # user project, if any.
        url = self._json_url(bucket, name) + self._media_query
        if generation is not None:
            url += f"&generation={generation}"
        return await read_media(self._transport, Op("read", bucket, name), url, start=start,
                                end=end, into=into, size=size, crc=crc,
                                verify=self.config.verify_crc32c, want_crc=want_crc,
                                version=generation)

    # -- writes ---------------------------------------------------------------

    async def write(
        self,
        bucket: str,
        name: str,
        data: bytes | bytearray | memoryview,
        *,
        content_type: str = "application/octet-stream",
        if_generation_match: int | None = None,
        metadata: dict[str, str] | None = None,
        resumable: bool | None = None,
    ) -> ObjectInfo:
        """Upload ``data`` as an object, with its crc32c checked by the server.

        Args:
            bucket: bucket name.
            name: object name.
            data: the content.
            content_type: Content-Type to store.
            if_generation_match: precondition; 0 means "must not exist yet".
            metadata: custom metadata.
            resumable: force (True) or forbid (False) a resumable upload;
                by default resumable above ``SIMPLE_UPLOAD_LIMIT``.

        Returns:
            ObjectInfo of the new object.

        Raises:
            PreconditionFailed: ``if_generation_match`` did not hold.
            ChecksumMismatch: the stored size or crc32c differs from the
                data's (a server that does not check the crc32c we send
                stored other bytes); that generation has been deleted, so
                nothing unverified stays published.
            StorageError: any other failure (nothing is published).
        """
        write_args(bucket, name, data, content_type, if_generation_match, metadata, resumable)
        return await write_object(self, bucket, name, memoryview(data).cast("B"), content_type,
                                  if_generation_match, metadata, resumable)

    def start_upload(self, bucket: str, name: str, *,
                     content_type: str = "application/octet-stream",
                     part_size: int = MIN_PART_SIZE,
                     metadata: dict[str, str] | None = None,
                     if_generation_match: int | None = None) -> GcsUpload:
        """A streaming upload in parts, for the writer engine (XML multipart,
        or a resumable session where the server has none or a precondition
        is set: XML multipart uploads take no preconditions).

        Args:
            bucket: bucket name.
            name: object name.
            content_type: Content-Type of the final object.
            part_size: size of every part but the last.
            metadata: custom metadata of the final object.
            if_generation_match: publish only if the object is then this
                generation (0: absent), checked by the publishing request.

        Returns:
            The upload; nothing is sent before its first part.

        Raises:
            InvalidArgument: ``metadata`` is not a ``dict[str, str]``.
        """
        check_metadata("start_upload", "metadata", metadata)
        check_int("start_upload", "if_generation_match", if_generation_match, optional=True)
        return GcsUpload(self, bucket, name, content_type, part_size, metadata,
                         if_generation_match)

    async def compose(
        self,
        bucket: str,
        destination: str,
        sources: Sequence[SourceSpec],
        *,
        if_generation_match: int | None = None,
        content_type: str = "application/octet-stream",
    ) -> ObjectInfo:
        """Concatenate up to 32 objects of ``bucket`` into ``destination``.

        Args:
            bucket: bucket name.
            destination: name of the composite.
            sources: names, ``(name, generation)`` pairs or ObjectInfo; a
                known generation becomes an ``ifGenerationMatch`` precondition
                so a concurrently overwritten source fails instead of mixing
                versions.
            if_generation_match: precondition on the destination.
            content_type: Content-Type of the composite.

        Returns:
            ObjectInfo of the composite (with its crc32c), checked against
            the sources' sizes and crc32c when every source is an ObjectInfo
            that knows them.

        Raises:
            InvalidArgument: zero or more than 32 sources.
            ChecksumMismatch: the composite is not the concatenation of the
                sources (that generation is deleted).
            PreconditionFailed: a source or the destination changed.
            NotFound: a source is missing.
            StorageError: any other failure.
        """
        compose_args(bucket, destination, sources, if_generation_match, content_type)
        if not 1 <= len(sources) <= 32:
            raise InvalidArgument(f"compose gs://{bucket}/{destination}: needs 1-32 sources, "
                                  f"got {len(sources)}")
        return await compose_object(self, bucket, destination, sources, if_generation_match,
                                    content_type)

    async def copy(self, bucket: str, name: str, dest_bucket: str, dest_name: str) -> ObjectInfo:
        """Copy an object server-side (JSON ``rewriteTo``; no bytes pass through us).

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
            ChecksumMismatch: the copy's size or crc32c is not the source's
                (that generation of the copy was deleted; left alone when
                the answer named no generation).
            ProtocolError: the rewrite's calls do not move forward.
            StorageError: the answer is about another object, or any other
                failure.
        """
        check_object("copy", bucket, name)
        check_object("copy", dest_bucket, dest_name, bucket_arg="dest_bucket",
                     name_arg="dest_name")
        return await rewrite_object(self, bucket, name, dest_bucket, dest_name)

    # -- buckets --------------------------------------------------------------

    async def create_bucket(self, bucket: str) -> None:
        """Create a bucket in ``self.project``.

        Args:
            bucket: bucket name.

        Raises:
            Conflict: it exists already.
            StorageError: any other failure.
        """
        try:
            validate_bucket(bucket)
        except InvalidURL as exc:
            raise InvalidURL(f"create_bucket: {exc}") from None

        await self._transport.request(
            Op("create_bucket", bucket), "POST", f"{self.endpoint}/storage/v1/b", drain,
            params={"project": self.project, **self._billing},
            headers={"Content-Type": "application/json"},
            data=json.dumps({"name": bucket}).encode())
