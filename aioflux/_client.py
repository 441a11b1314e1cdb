"""``AsyncClient``: the awaitable GCS API (JSON API operations)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast, overload
from urllib.parse import quote

import aiohttp
from gcloud.aio.storage import Storage

from ._auth import Auth, emulator_endpoint, resolve_auth
from ._config import ClientConfig
from ._crc import crc32c, encode_crc32c
from ._errors import ChecksumMismatch, InvalidArgument, NotFound, ProtocolError, describe
from ._media import Fetched, read_media
from ._resumable import ResumableUpload
from ._transport import Op, Transport
from ._types import COMPACT_JSON, LIST_FIELDS, ListPage, ObjectInfo, objects_from_json
from ._urls import validate_bucket, validate_object_name
from ._xml import XmlMultipartMixin

if TYPE_CHECKING:
    from ._iterables import StreamItem

__all__ = ["AsyncClient", "Buffer", "DEFAULT_ENDPOINT", "SIMPLE_UPLOAD_LIMIT"]

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
# One request up to this size; a resumable session beyond it, so a failure
# costs one chunk, not the whole body.
SIMPLE_UPLOAD_LIMIT = 16 * 1024 * 1024
Buffer = bytearray | memoryview
SourceSpec = str | ObjectInfo | tuple[str, int]


# Most object names need no escaping beyond their slashes; urllib's quote
# walks the name byte by byte in Python (~8 us, ~5% of a small read's CPU).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.~/-]*")


def _quote(name: str) -> str:
    if _PLAIN_NAME.fullmatch(name):
        return name.replace("/", "%2F")
    return quote(name, safe="")


class AsyncClient(XmlMultipartMixin):
    """Asynchronous GCS client. One instance can serve many concurrent tasks.

    Every request goes through one semaphore of ``config.max_concurrency``
    permits and is retried per ``config.retry``.

    Args:
        config: client settings (concurrency, timeouts, retries).
        endpoint: API root, e.g. ``http://127.0.0.1:4443`` for an emulator.
            Defaults to ``STORAGE_EMULATOR_HOST`` if set, else real GCS.
        credentials: ``None`` (Application Default Credentials, anonymous on
            an emulator), ``"anonymous"``, a bearer token string, or a
            google-auth credentials object.
        transport: a ready :class:`Transport` (tests inject one); overrides
            ``config`` and ``credentials``.
        project: project for bucket creation.
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        endpoint: str | None = None,
        credentials: Any = None,
        transport: Transport | None = None,
        project: str = "aioflux",
    ) -> None:
        env_endpoint = emulator_endpoint()
        self.endpoint = (endpoint or env_endpoint or DEFAULT_ENDPOINT).rstrip("/")
        use_emulator = (endpoint is not None and endpoint != DEFAULT_ENDPOINT) or (
            endpoint is None and env_endpoint is not None
        )
        self.config = config or (transport.config if transport else ClientConfig())
        auth: Auth = resolve_auth(credentials, use_emulator=use_emulator)
        self._transport = transport or Transport(self.config, auth, endpoint=self.endpoint)
        self.project = project
        self._gcloud: tuple[aiohttp.ClientSession, Storage] | None = None

    @property
    def transport(self) -> Transport:
        """The transport (its ``stats`` count requests and retries)."""
        return self._transport

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close connections of the current event loop."""
        self._gcloud = None
        await self._transport.aclose()

    def _storage(self, session: aiohttp.ClientSession) -> Storage:
        # gcloud-aio-storage does the JSON metadata calls on our session; we
        # pass auth headers ourselves, so it must not build a token of its own.
        if self._gcloud is None or self._gcloud[0] is not session:
            storage = Storage(session=cast(Any, session), api_root=self.endpoint,
                              api_is_dev=True, token=cast(Any, object()))
            self._gcloud = (session, storage)
        return self._gcloud[1]

    def _json_url(self, bucket: str, name: str | None = None) -> str:
        base = f"{self.endpoint}/storage/v1/b/{bucket}/o"
        return base if name is None else f"{base}/{_quote(name)}"

    # -- metadata -------------------------------------------------------------

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        """Fetch an object's metadata.

        Args:
            bucket: bucket name.
            name: object name.

        Returns:
            ObjectInfo.

        Raises:
            NotFound: no such object or bucket.
            StorageError: any other failure.
        """
        validate_bucket(bucket)
        validate_object_name(name)

        return await self._transport.request(
            Op("stat", bucket, name), "GET", self._json_url(bucket, name),
            _object_handler(Op("stat", bucket, name)), params=COMPACT_JSON)

    async def exists(self, bucket: str, name: str) -> bool:
        """Whether an object exists.

        Args:
            bucket: bucket name.
            name: object name.

        Returns:
            True if it exists.

        Raises:
            StorageError: a failure other than 404.
        """
        try:
            await self.stat(bucket, name)
        except NotFound:
            return False
        return True

    async def list(
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

        Yields:
            ListPage for each page.

        Raises:
            NotFound: no such bucket.
            StorageError: any other failure.
        """
        validate_bucket(bucket)
        params = {"maxResults": str(min(max(page_size, 1), 1000)), **COMPACT_JSON}
        for key, value in (("prefix", prefix), ("delimiter", delimiter),
                           ("startOffset", start_offset), ("endOffset", end_offset),
                           ("fields", fields)):
            if value:
                params[key] = value
        # A plain GET and ``json.loads`` of the body bytes rather than
        # gcloud-aio-storage's ``list_objects`` (its session wrapper, header
        # merging and ``resp.json()`` text decode): listing is CPU-bound on
        # the client, and with ``objects_from_json`` this more than halves
        # its CPU: a 100k listing took ~1.0 s of client CPU, now ~0.45 s
        # (cProfile against the gcs-like emulator; perf/scenarios/listing.py).
        url = self._json_url(bucket)
        op = Op("list", bucket, prefix)
        token: str | None = None
        while True:
            page_params = dict(params, pageToken=token) if token else params
            data = await self._transport.request(op, "GET", url, _json_handler(op),
                                                 params=page_params)
            token = data.get("nextPageToken") or None
            yield ListPage(
                objects=objects_from_json(bucket, data.get("items", ())),
                prefixes=list(data.get("prefixes", ())),
                next_page_token=token,
            )
            if token is None:
                return

    async def list_objects(
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

        Yields:
            ObjectInfo in lexicographic name order.

        Raises:
            StorageError: listing failed.
        """
        async for page in self.list(bucket, prefix, start_offset=start_offset,
                                    end_offset=end_offset, fields=fields):
            for obj in page.objects:
                yield obj

    def stream(self, bucket: str, prefix: str = "", **kwargs: Any) -> AsyncIterator[StreamItem]:
        """List ``prefix`` in parallel and download each object as it is listed.

        ``async for obj in client.stream("gs://b/p", concurrency=64)``; see
        :func:`aioflux._iterables.stream` for every option.

        Args:
            bucket: bucket name or a ``gs://bucket/prefix`` URL.
            prefix: only names starting with this.
            **kwargs: ``concurrency``, ``ordered``, ``list_concurrency``, ``options``.

        Returns:
            An async iterator of StreamItem (``.name``, ``.data``, ``.info``).
        """
        from ._iterables import stream

        return stream(self, bucket, prefix, **kwargs)

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
            ChecksumMismatch: the body was corrupt on every attempt.
            ProtocolError: the server answered with a redirect, another
                range or a body other than announced.
            StorageError: any other failure.
        """
        validate_bucket(bucket)
        validate_object_name(name)
        if start < 0 or (end is not None and end < start):
            raise InvalidArgument(f"read gs://{bucket}/{name}: bad range [{start}, {end})")
        if end is not None and end == start:
            return b"" if into is None else 0
        dest = None if into is None else memoryview(into).cast("B")
        fetched = await self._fetch(bucket, name, start=start, end=end, into=dest,
                                    generation=generation)
        return fetched.count if fetched.data is None else fetched.data

    async def _fetch(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                     into: memoryview | None = None, generation: int | None = None,
                     size: int | None = None, crc: int | None = None,
                     want_crc: bool = False) -> Fetched:
        """A checked, resumable read (:func:`aioflux._media.read_media`);
        ``size``/``crc`` are the object's if known (listing, stat)."""
        # The query goes into the URL string: yarl's extend_query costs ~5%
        # of a small read's client CPU.
        url = self._json_url(bucket, name) + "?alt=media"
        if generation is not None:
            url += f"&generation={generation}"
        return await read_media(self._transport, Op("read", bucket, name), url, start=start,
                                end=end, into=into, size=size, crc=crc,
                                verify=self.config.verify_crc32c, want_crc=want_crc)

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
            ChecksumMismatch: the stored crc32c differs from the data's.
            StorageError: any other failure.
        """
        validate_bucket(bucket)
        validate_object_name(name)
        view = memoryview(data).cast("B")
        checksum = crc32c(view)
        if resumable is None:
            resumable = len(view) > SIMPLE_UPLOAD_LIMIT
        if resumable:
            upload = ResumableUpload(self, bucket, name, content_type=content_type,
                                     if_generation_match=if_generation_match, metadata=metadata)
            await upload.start()
            info = await upload.finish(view)
        else:
            info = await self._multipart_upload(bucket, name, view, checksum, content_type,
                                                if_generation_match, metadata)
        if info.crc32c is not None and info.crc32c != checksum:
            raise ChecksumMismatch(
                f"write gs://{bucket}/{name}: stored crc32c {encode_crc32c(info.crc32c)} "
                f"!= sent {encode_crc32c(checksum)}", operation="write", bucket=bucket, name=name)
        return info

    async def _multipart_upload(self, bucket: str, name: str, view: memoryview, checksum: int,
                                content_type: str, if_generation_match: int | None,
                                metadata: dict[str, str] | None) -> ObjectInfo:
        resource: dict[str, Any] = {"name": name, "contentType": content_type,
                                    "crc32c": encode_crc32c(checksum)}
        if metadata:
            resource["metadata"] = metadata
        boundary = uuid.uuid4().hex
        body = b"".join((
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
            json.dumps(resource).encode(),
            f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(),
            view,
            f"\r\n--{boundary}--\r\n".encode(),
        ))
        params = {"uploadType": "multipart", **COMPACT_JSON}
        if if_generation_match is not None:
            params["ifGenerationMatch"] = str(if_generation_match)
        url = f"{self.endpoint}/upload/storage/v1/b/{bucket}/o"
        return await self._transport.request(
            Op("write", bucket, name), "POST", url, _object_handler(Op("write", bucket, name)),
            params=params,
            headers={"Content-Type": f"multipart/related; boundary={boundary}"}, data=body)

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
            ObjectInfo of the composite (with its crc32c).

        Raises:
            InvalidArgument: zero or more than 32 sources.
            PreconditionFailed: a source or the destination changed.
            NotFound: a source is missing.
            StorageError: any other failure.
        """
        validate_bucket(bucket)
        validate_object_name(destination)
        if not 1 <= len(sources) <= 32:
            raise InvalidArgument(f"compose gs://{bucket}/{destination}: needs 1-32 sources, "
                                  f"got {len(sources)}")
        items = []
        for src in sources:
            src_name, gen = _source(src)
            item: dict[str, Any] = {"name": src_name}
            if gen:
                # A precondition, not a pinned ``generation``: a replaced
                # source then fails with 412 (changed) rather than 404.
                item["objectPreconditions"] = {"ifGenerationMatch": str(gen)}
            items.append(item)
        body = json.dumps({"sourceObjects": items,
                           "destination": {"contentType": content_type}}).encode()
        params = dict(COMPACT_JSON)
        if if_generation_match is not None:
            params["ifGenerationMatch"] = str(if_generation_match)
        return await self._transport.request(
            Op("compose", bucket, destination), "POST",
            f"{self._json_url(bucket, destination)}/compose",
            _object_handler(Op("compose", bucket, destination)),
            params=params, headers={"Content-Type": "application/json"}, data=body)

    async def delete(
        self,
        bucket: str,
        name: str,
        *,
        generation: int | None = None,
        if_generation_match: int | None = None,
        missing_ok: bool = False,
    ) -> None:
        """Delete an object.

        Args:
            bucket: bucket name.
            name: object name.
            generation: delete this generation only.
            if_generation_match: precondition.
            missing_ok: treat "already gone" (404) as success, as clean-up
                paths want.

        Raises:
            NotFound: no such object (unless ``missing_ok``).
            StorageError: any other failure.
        """
        validate_bucket(bucket)
        validate_object_name(name)
        params = {}
        if generation is not None:
            params["generation"] = str(generation)
        if if_generation_match is not None:
            params["ifGenerationMatch"] = str(if_generation_match)

        async def call(session: aiohttp.ClientSession, headers: dict[str, str]) -> None:
            await self._storage(session).delete(
                bucket, name, params=params, headers=headers,
                timeout=int(self.config.timeouts.read_stall))

        try:
            await self._transport.run(Op("delete", bucket, name), call)
        except NotFound:
            if not missing_ok:
                raise

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
            StorageError: any other failure.
        """
        for b, n in ((bucket, name), (dest_bucket, dest_name)):
            validate_bucket(b)
            validate_object_name(n)
        url = f"{self._json_url(bucket, name)}/rewriteTo/b/{dest_bucket}/o/{_quote(dest_name)}"
        token: str | None = None

        handle = _json_handler(Op("copy", bucket, name))

        while True:
            # Large cross-location rewrites take several calls; each returns
            # a token to continue from.
            params = dict(COMPACT_JSON, rewriteToken=token) if token else COMPACT_JSON
            result = await self._transport.request(
                Op("copy", bucket, name), "POST", url, handle, params=params,
                headers={"Content-Type": "application/json"}, data=b"{}")
            if result.get("done"):
                return ObjectInfo.from_json(dest_bucket, result["resource"])
            token = result["rewriteToken"]

    # -- buckets --------------------------------------------------------------

    async def create_bucket(self, bucket: str) -> None:
        """Create a bucket in ``self.project``.

        Args:
            bucket: bucket name.

        Raises:
            Conflict: it exists already.
            StorageError: any other failure.
        """
        validate_bucket(bucket)

        async def ignore(resp: aiohttp.ClientResponse) -> None:
            await resp.read()

        await self._transport.request(
            Op("create_bucket", bucket), "POST", f"{self.endpoint}/storage/v1/b", ignore,
            params={"project": self.project}, headers={"Content-Type": "application/json"},
            data=json.dumps({"name": bucket}).encode())


def _source(src: SourceSpec) -> tuple[str, int | None]:
    if isinstance(src, str):
        return src, None
    if isinstance(src, ObjectInfo):
        return src.name, src.generation or None
    return src[0], src[1]


def _json_handler(op: Op) -> Callable[[aiohttp.ClientResponse], Awaitable[dict[str, Any]]]:
    async def handle(resp: aiohttp.ClientResponse) -> dict[str, Any]:
        body = await resp.read()
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            # An HTML page from a captive portal or proxy, an empty 204...:
            # not an answer of the JSON API.
            raise ProtocolError(
                f"{describe(op.operation, op.bucket, op.name)} failed: HTTP {resp.status} "
                f"with a body that is not a JSON object ({body[:60]!r})",
                operation=op.operation, bucket=op.bucket, name=op.name, status=resp.status)
        return data

    return handle


def _object_handler(op: Op) -> Callable[[aiohttp.ClientResponse], Awaitable[ObjectInfo]]:
    parse = _json_handler(op)

    async def handle(resp: aiohttp.ClientResponse) -> ObjectInfo:
        return ObjectInfo.from_json(op.bucket, await parse(resp))

    return handle
