"""``S3Store``: Amazon S3 and S3-compatible stores (``s3://`` URLs).

Requests go through aioflux's transport (one session per loop, the client's
semaphore, retries, lean reads), signed with SigV4 by botocore
(:mod:`._auth`). Every read is checked like a GCS one (status,
``Content-Range``, length, and the crc32c the server reports with
``x-amz-checksum-mode: ENABLED``); every write sends its crc32c
(``x-amz-checksum-crc32c``) and checks what the server stored.

- Version token: ``ObjectInfo.generation`` is the ETag as a number (see
  :mod:`._xml`). ``if_generation_match=0`` is ``If-None-Match: *``; another
  value is ``If-Match`` on that ETag; ``generation=`` on a read pins the ETag
  (``If-Match``; a changed object is ``NotFound``, as a gone generation is
  on GCS). A delete checks the ETag with a HEAD first, then deletes with
  ``If-Match`` (atomic where the server honours it).
- Listings are ListObjectsV2; S3 has no end offset, so a listing stops
  itself there, and ``start_offset`` becomes ``start-after`` (exclusive, so
  one character shorter, the rest filtered here). Listed objects carry no
  crc32c (ListObjectsV2 reports only the algorithm): reads of them are
  checked against the crc32c a whole-object GET reports.
- Streaming uploads are multipart uploads with full-object crc32c
  (``x-amz-checksum-type: FULL_OBJECT``): 5 MiB parts at least (the last
  excepted), 10,000 at most, each sent with its crc32c.
- No compose (``features.compose == 0``): the download planner reads
  objects directly.
"""

from __future__ import annotations

import asyncio
import builtins
import email.utils
import hashlib
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Literal, overload
from urllib.parse import quote, unquote_plus, urlsplit

from .._core.auth import AnonymousAuth, Auth
from .._core.config import ClientConfig
from .._core.crc import crc32c, encode_crc32c
from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    InvalidRequest,
    InvalidURL,
    NotFound,
    PreconditionFailed,
    StorageError,
    describe,
)
from .._core.metrics import RequestStats
from .._core.store import Buffer, Fetched, SourceSpec, StoreFeatures, objects_of
from .._core.types import NO_METADATA, ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from .._core.urls import validate_bucket
from .._core.validate import (
    check_bool,
    check_instance,
    check_object,
    check_str,
    delete_args,
    list_args,
    read_args,
    write_args,
)
from .._engines.download import DownloadOptions
from .._engines.iterables import StreamItem, stream, stream_args
from .._net.media import read_media
from .._net.transport import HttpResponse, Op, Transport
from ._auth import SigV4, session_region
from ._multipart import MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE, Multipart
from ._upload import S3Upload
from ._xml import (
    children,
    etag_of,
    full_object_crc32c,
    generation_of,
    parse,
    query,
    text,
)

__all__ = ["DEFAULT_REGION", "FEATURES", "S3Store"]

DEFAULT_REGION = "us-east-1"
FEATURES = StoreFeatures(scheme="s3", compose=0, end_offset=False, multipart=True,
                         min_part_size=MIN_PART_SIZE, part_granularity=1, max_parts=MAX_PARTS)
Addressing = Literal["auto", "path", "virtual"]
# Hosts of AWS's own S3 endpoints (global, regional, dual-stack), with a
# bucket in front for virtual-hosted addressing.
_AWS_HOST = re.compile(r"(?:[a-z0-9.-]+\.)?s3(?:[.-][a-z0-9-]+)*\.amazonaws\.com(?:\.cn)?")
# ETags seen, by the generation hashed from them (ETags that are not an
# MD5); bounded so a 1M-object listing does not hold them all.
_ETAG_MEMORY = 65_536


class S3Store:
    """Amazon S3 (or an S3-compatible store) as an
    :class:`~aioflux._core.store.ObjectStore`.

    Args:
        config: client settings (concurrency, timeouts, retries).
        region: the region to sign for; default ``AWS_REGION``, then
            ``AWS_DEFAULT_REGION`` or the profile's, else discovered per
            bucket (``x-amz-bucket-region`` of a HEAD of the bucket).
        endpoint: API root of an S3-compatible store (MinIO, R2, Ceph,
            moto); default ``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``,
            else AWS.
        addressing: ``path`` (``endpoint/bucket/key``), ``virtual``
            (``bucket.endpoint/key``) or ``auto``: virtual on AWS for
            bucket names without dots, path elsewhere.
        profile: shared-config profile for credentials and region.
        anonymous: send requests unsigned (public buckets); also what
            happens when the credential chain finds nothing.
        auth: authenticate with this instead (tests).
        transport: a ready transport (tests inject a mock); overrides
            ``config`` and ``auth``.

    Raises:
        InvalidArgument: botocore is missing (``pip install
            "aioflux-storage[s3]"``; only ``anonymous=True`` works without
            it), or a setting of the wrong type.
        InvalidURL: ``endpoint`` is not an http(s) URL.
    """

    def __init__(self, config: ClientConfig | None = None, *, region: str | None = None,
                 endpoint: str | None = None, addressing: Addressing = "auto",
                 profile: str | None = None, anonymous: bool = False, auth: Auth | None = None,
                 transport: Transport | None = None) -> None:
        check_instance("S3Store", "config", config, ClientConfig, optional=True)
        check_str("S3Store", "region", region, optional=True)
        check_str("S3Store", "endpoint", endpoint, optional=True)
        check_str("S3Store", "profile", profile, optional=True)
        check_bool("S3Store", "anonymous", anonymous)
        if addressing not in ("auto", "path", "virtual"):
            raise InvalidArgument(f"S3Store: addressing must be 'auto', 'path' or 'virtual', "
                                  f"got {addressing!r}")
        self._settings = (config, region, endpoint, addressing, profile, anonymous)
        custom = (endpoint or os.environ.get("AWS_ENDPOINT_URL_S3")
                  or os.environ.get("AWS_ENDPOINT_URL"))
        if custom is not None:
            parts = urlsplit(custom)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InvalidURL(f"S3Store: endpoint must be an http(s) URL, got {custom!r}")
        # An endpoint on AWS's own hosts is AWS (regional hosts, virtual
        # addressing); any other is an S3-compatible store.
        self.custom_endpoint = custom is not None and _AWS_HOST.fullmatch(
            (urlsplit(custom).hostname or "").lower()) is None
        self.endpoint = (custom or "https://s3.amazonaws.com").rstrip("/")
        self.addressing = addressing
        if region is None and transport is None:
            try:
                region = session_region(profile)
            except InvalidArgument:
                if not anonymous:
                    raise  # botocore missing: named now, not at the first request
        self.region = region
        self._regions: dict[str, str] = {}
        self._finding: dict[str, asyncio.Task[str]] = {}
        self._etags: dict[int, str] = {}
        self.config = config or (transport.config if transport else ClientConfig())
        if transport is None:
            if auth is None:
                auth = AnonymousAuth() if anonymous else (
                    SigV4.found(self._region_of_url, profile=profile) or AnonymousAuth())
            transport = Transport(self.config, auth, endpoint=self.endpoint,
                                  trusted=self._trusted, exact_urls=True)
        self._transport = transport
        self._multipart = Multipart(self)

    def __repr__(self) -> str:
        return f"S3Store({self.endpoint!r}, region={self.region!r})"

    def __getstate__(self) -> dict[str, object]:
        # By settings: sessions and credentials belong to this process
        # (DataLoader workers resolve their own).
        return {"settings": self._settings}

    def __setstate__(self, state: dict[str, object]) -> None:
        settings = state["settings"]
        assert isinstance(settings, tuple)
        config, region, endpoint, addressing, profile, anonymous = settings
        self.__init__(config, region=region, endpoint=endpoint,  # type: ignore[misc]
                      addressing=addressing, profile=profile, anonymous=anonymous)

    # -- addressing and regions ---------------------------------------------------

    @property
    def features(self) -> StoreFeatures:
        """Multipart uploads, no compose, no server-side end offset."""
        return FEATURES

    @property
    def transport(self) -> Transport:
        """The transport (its ``stats`` count requests and retries)."""
        return self._transport

    @property
    def stats(self) -> RequestStats:
        """What this store's requests did: counts, retries by cause, bytes,
        and latency per operation (``stats.summary()``)."""
        return self._transport.stats

    def _virtual(self, bucket: str) -> bool:
        if self.addressing == "virtual":
            return True
        # Dots in a bucket name break the TLS wildcard of virtual hosts.
        return self.addressing == "auto" and not self.custom_endpoint and "." not in bucket

    def _base(self, bucket: str) -> str:
        """``scheme://host[/bucket]`` of a bucket's requests."""
        region = self._regions.get(bucket) or self.region
        if not self.custom_endpoint:
            # China's regions live under their own domain.
            domain = "amazonaws.com.cn" if (region or "").startswith("cn-") else "amazonaws.com"
            host = f"s3.{region}.{domain}" if region else "s3.amazonaws.com"
            return f"https://{bucket}.{host}" if self._virtual(bucket) else \
                f"https://{host}/{bucket}"
        if self._virtual(bucket):
            scheme, _, rest = self.endpoint.partition("://")
            return f"{scheme}://{bucket}.{rest}"
        return f"{self.endpoint}/{bucket}"

    def object_url(self, bucket: str, name: str = "") -> str:
        """The URL of ``name`` in ``bucket`` (the bucket's own with no name).

        Args:
            bucket: bucket name.
            name: object key.

        Returns:
            The URL, key percent-encoded as SigV4 signs it.
        """
        base = self._base(bucket)
        if not name:
            return base + "/" if self._virtual(bucket) else base
        return f"{base}/{quote(name, safe='/-_.~')}"

    def _trusted(self, url: str) -> bool:
        """Credentials may go to the endpoint's virtual hosts (and AWS's S3
        hosts when the endpoint is AWS), on the same scheme and port."""
        try:
            parts, home = urlsplit(url), urlsplit(self.endpoint)
            host = (parts.hostname or "").lower()
            if parts.scheme != home.scheme or parts.port != home.port:
                return False
        except ValueError:
            return False
        if not self.custom_endpoint:
            return parts.scheme == "https" and _AWS_HOST.fullmatch(host) is not None
        return host.endswith("." + (home.hostname or "").lower())

    def _region_of_url(self, url: str) -> str:
        """The region to sign a request to ``url`` for: its bucket's."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        bucket = ""
        if self.custom_endpoint:
            home = (urlsplit(self.endpoint).hostname or "").lower()
            if host.endswith("." + home):
                bucket = host[:-len(home) - 1]
        elif not host.startswith(("s3.", "s3-")):
            bucket = host.rsplit(".s3", 1)[0]  # bucket.s3.region.amazonaws.com
        if not bucket:
            bucket = parts.path.lstrip("/").split("/", 1)[0]
        return self._regions.get(bucket) or self.region or DEFAULT_REGION

    async def _ready(self, bucket: str) -> None:
        """Learn ``bucket``'s region before its first request, when no
        region was configured (concurrent first requests wait for one
        answer rather than sign for a guess)."""
        if self.region is not None or bucket in self._regions:
            return
        loop = asyncio.get_running_loop()
        finding = self._finding.get(bucket)
        if finding is None or finding.get_loop() is not loop:
            finding = loop.create_task(self._find_region(bucket))
            self._finding[bucket] = finding
        try:
            self._regions[bucket] = await asyncio.shield(finding)
        finally:
            if finding.done():
                self._finding.pop(bucket, None)

    async def _find_region(self, bucket: str) -> str:
        """``x-amz-bucket-region`` of a HEAD of the bucket (signed for the
        default region: the answer names the region whatever its status, a
        301 or 400 for a request signed for another one)."""

        async def handle(resp: HttpResponse) -> str:
            return resp.headers.get("x-amz-bucket-region", "")  # a HEAD: no body

        url = self.object_url(bucket)
        try:
            found = await self._transport.request(Op("find region", bucket, scheme="s3"),
                                                  "HEAD", url, handle,
                                                  ok=(200, 301, 307, 400, 403))
        except NotFound:
            found = ""  # the request itself will say "no such bucket"
        return found or DEFAULT_REGION

    def _op(self, operation: str, bucket: str, name: str = "") -> Op:
        return Op(operation, bucket, name, "s3")

    # -- version tokens -------------------------------------------------------------

    def _remember(self, etag: str) -> int:
        generation = generation_of(etag)
        if generation and etag_of(generation) is None:
            if len(self._etags) >= _ETAG_MEMORY:
                self._etags.clear()
            self._etags[generation] = etag
        return generation

    async def _etag_for(self, bucket: str, name: str, generation: int) -> str | None:
        """The ETag ``generation`` stands for: decoded, remembered, or the
        object's own if its generation is that; None when it is not."""
        etag = etag_of(generation) or self._etags.get(generation)
        if etag is not None:
            return etag
        try:
            info = await self.stat(bucket, name)
        except NotFound:
            return None
        return self._etags.get(generation) if info.generation == generation else None

    def _info(self, bucket: str, name: str, *, size: int, etag: str, crc: int | None,
              content_type: str | None = None, updated: str | None = None,
              metadata: dict[str, str] | None = None) -> ObjectInfo:
        return ObjectInfo(bucket, name, size, self._remember(etag), crc, None, None,
                          content_type, updated, metadata or NO_METADATA, "s3")

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> S3Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close connections of the current event loop."""
        await self._transport.aclose()

    # -- metadata ----------------------------------------------------------------------

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        """An object's metadata (HEAD).

        Args:
            bucket: bucket name.
            name: object key.

        Returns:
            ObjectInfo: size, generation (from the ETag), the full-object
            crc32c when the server keeps one, content type, custom metadata.

        Raises:
            NotFound: no such object or bucket.
            StorageError: any other failure.
        """
        check_object("stat", bucket, name, scheme="s3")
        await self._ready(bucket)

        async def handle(resp: HttpResponse) -> ObjectInfo:
            # A HEAD has no body to read; its Content-Length is the object's.
            h = resp.headers
            lowered = {k.lower(): v for k, v in h.items()}
            metadata = {k[11:]: v for k, v in lowered.items() if k.startswith("x-amz-meta-")}
            return self._info(bucket, name, size=int(h.get("Content-Length", "0")),
                              etag=h.get("ETag", ""), crc=full_object_crc32c(lowered),
                              content_type=h.get("Content-Type"),
                              updated=_rfc3339(h.get("Last-Modified")), metadata=metadata)

        return await self._transport.request(self._op("stat", bucket, name), "HEAD",
                                             self.object_url(bucket, name), handle,
                                             headers={"x-amz-checksum-mode": "ENABLED"})

    async def exists(self, bucket: str, name: str) -> bool:
        """Whether an object exists.

        Args:
            bucket: bucket name.
            name: object key.

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

    # -- listing ------------------------------------------------------------------------

    def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
             start_offset: str | None = None, end_offset: str | None = None,
             page_size: int = 1000) -> AsyncIterator[ListPage]:
        """List objects page by page (ListObjectsV2).

        Args:
            bucket: bucket name.
            prefix: only keys starting with this.
            delimiter: group keys by this (``"/"``), reported as prefixes.
            start_offset: first key (inclusive) of a half-open range.
            end_offset: end (exclusive); S3 has none, so the listing stops
                itself at the first key past it.
            page_size: keys per request (S3 caps it at 1000).

        Returns:
            An async iterator of ListPage, fetched as it is consumed.

        Raises:
            InvalidURL: a malformed bucket (at once).
            InvalidArgument: a setting of the wrong type (at once).
            NotFound: no such bucket (while iterating).
            StorageError: any other failure (while iterating).
        """
        list_args("list", bucket, prefix, delimiter=delimiter, start_offset=start_offset,
                  end_offset=end_offset, page_size=page_size, scheme="s3")
        return self._pages(bucket, prefix, delimiter, start_offset, end_offset, page_size)

    async def _pages(self, bucket: str, prefix: str, delimiter: str | None,
                     start_offset: str | None, end_offset: str | None,
                     page_size: int) -> AsyncIterator[ListPage]:
        await self._ready(bucket)
        op = self._op("list", bucket, prefix)
        # Keys URL-encoded: XML 1.0 cannot carry every character a key may
        # hold (control characters), and AWS recommends it.
        base = [("encoding-type", "url"), ("list-type", "2"),
                ("max-keys", str(min(page_size, 1000)))]
        if prefix:
            base.append(("prefix", prefix))
        if delimiter:
            base.append(("delimiter", delimiter))
        if start_offset:
            # start-after is exclusive: one character shorter lists every key
            # >= start_offset (and the few between, dropped below).
            base.append(("start-after", start_offset[:-1]))
        token: str | None = None
        url = self.object_url(bucket)

        async def handle(resp: HttpResponse) -> ET.Element:
            return parse(await resp.read(), op)

        while True:
            pairs = sorted(base + ([("continuation-token", token)] if token else []))
            root = await self._transport.request(op, "GET", url + query(*pairs), handle)
            objects: builtins.list[ObjectInfo] = []
            done = False
            # AWS encodes a space as "+", others as %20: unquote_plus reads both.
            decode: Callable[[str], str] = (
                unquote_plus if text(root, "EncodingType") == "url" else str)
            for el in children(root, "Contents"):
                key = decode(text(el, "Key"))
                if start_offset and key < start_offset:
                    continue
                if end_offset and key >= end_offset:
                    done = True
                    break
                objects.append(ObjectInfo(bucket, key, int(text(el, "Size", "0")),
                                          self._remember(text(el, "ETag")), None, None, None,
                                          None, text(el, "LastModified") or None,
                                          NO_METADATA, "s3"))
            prefixes = sorted(
                p for p in (decode(text(cp, "Prefix")) for cp in
                            children(root, "CommonPrefixes"))
                if (not end_offset or p < end_offset)
                and (not start_offset or p >= start_offset or start_offset.startswith(p)))
            truncated = text(root, "IsTruncated").lower() == "true"
            token = text(root, "NextContinuationToken") or None
            if done or not truncated or token is None:
                yield ListPage(objects=objects, prefixes=prefixes, next_page_token=None)
                return
            yield ListPage(objects=objects, prefixes=prefixes, next_page_token=token)

    def list_objects(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                     end_offset: str | None = None) -> AsyncIterator[ObjectInfo]:
        """List objects one by one (all pages, no delimiter).

        Args:
            bucket: bucket name.
            prefix: only keys starting with this.
            start_offset: first key (inclusive).
            end_offset: end (exclusive).

        Returns:
            An async iterator of ObjectInfo in key order.

        Raises:
            InvalidURL: a malformed bucket (at once).
            StorageError: listing failed (while iterating).
        """
        return objects_of(self.list(bucket, prefix, start_offset=start_offset,
                                    end_offset=end_offset))

    def stream(self, bucket: str, prefix: str = "", *, concurrency: int | None = None,
               ordered: bool = False, list_concurrency: int | None = None,
               options: DownloadOptions | None = None) -> AsyncIterator[StreamItem]:
        """List ``prefix`` in parallel and download each object as it is
        listed (see :meth:`aioflux.AsyncClient.stream`).

        Args:
            bucket: bucket name or an ``s3://bucket/prefix`` URL.
            prefix: only keys starting with this.
            concurrency: downloads in flight (``None``: 64).
            ordered: yield in listing order; else as downloads complete.
            list_concurrency: parallel listers (``None``: 16).
            options: DownloadOptions of the planner.

        Returns:
            An async iterator of StreamItem.

        Raises:
            InvalidURL: a malformed bucket or URL (at once).
            StorageError: listing or a download failed (while iterating).
        """
        stream_args("stream", bucket, prefix, concurrency, ordered, list_concurrency, options)
        return stream(self, bucket, prefix, concurrency=concurrency, ordered=ordered,
                      list_concurrency=list_concurrency, options=options)

    # -- reads ----------------------------------------------------------------------------

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: None = ..., generation: int | None = ...) -> bytes: ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: Buffer, generation: int | None = ...) -> int: ...

    async def read(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                   into: Buffer | None = None, generation: int | None = None) -> bytes | int:
        """Read an object, or the byte range ``[start, end)`` of it.

        Args:
            bucket: bucket name.
            name: object key.
            start: first byte.
            end: end (exclusive); ``None`` reads to the end.
            into: write the bytes into this buffer instead of returning them.
            generation: read only this version (its ETag, ``If-Match``).

        Returns:
            The bytes, or their count when ``into`` is given.

        Raises:
            NotFound: no such object, or it is no longer that generation.
            InvalidArgument: bad range, or ``into`` too small.
            InvalidRequest: ``start`` past the end (416).
            ChecksumMismatch: the body was corrupt on every attempt.
            ProtocolError: another range or body than asked for.
            StorageError: any other failure.
        """
        read_args(bucket, name, start, end, into, generation, scheme="s3")
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
        """A checked, resumable read (:func:`aioflux._net.media.read_media`);
        ``size``/``crc`` are the object's if known (listing, stat)."""
        await self._ready(bucket)
        op = self._op("read", bucket, name)
        headers = {"x-amz-checksum-mode": "ENABLED"}
        if generation is not None:
            etag = await self._etag_for(bucket, name, generation)
            if etag is None:
                raise _gone(op, generation)
            headers["If-Match"] = etag
        try:
            return await read_media(self._transport, op, self.object_url(bucket, name),
                                    start=start, end=end, into=into, size=size, crc=crc,
                                    verify=self.config.verify_crc32c, want_crc=want_crc,
                                    headers=headers, checksum_of=full_object_crc32c,
                                    pin_of=_pin)
        except PreconditionFailed as exc:
            # The ETag pinned (by the caller or by the first response of a
            # resumed read) is no longer the object's.
            if generation is not None:
                raise _gone(op, generation) from exc
            raise NotFound(f"{describe('read', bucket, name, 's3')} failed: the object was "
                           "replaced while it was read", operation="read", bucket=bucket,
                           name=name, status=412, reason="PreconditionFailed") from exc

    # -- writes --------------------------------------------------------------------------

    async def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
                    content_type: str = "application/octet-stream",
                    if_generation_match: int | None = None,
                    metadata: dict[str, str] | None = None,
                    resumable: bool | None = None) -> ObjectInfo:
        """Store ``data`` in one PUT, sent with its crc32c and checked.

        Args:
            bucket: bucket name.
            name: object key.
            data: the content (at most 5 GiB: use :meth:`start_upload` beyond).
            content_type: Content-Type to store.
            if_generation_match: 0: only if absent (``If-None-Match: *``);
                else only if the object is that generation (``If-Match``).
            metadata: custom metadata (``x-amz-meta-*``).
            resumable: must be None or False (S3 has no resumable sessions).

        Returns:
            ObjectInfo of the new object.

        Raises:
            PreconditionFailed: ``if_generation_match`` did not hold.
            ChecksumMismatch: the server stored other bytes (that version
                was deleted).
            InvalidArgument: ``resumable=True``.
            StorageError: any other failure (nothing is published).
        """
        write_args(bucket, name, data, content_type, if_generation_match, metadata, resumable,
                   scheme="s3")
        if resumable:
            raise InvalidArgument(f"write s3://{bucket}/{name}: S3 has no resumable uploads; "
                                  "use start_upload (multipart) for large objects")
        await self._ready(bucket)
        view = memoryview(data).cast("B")
        checksum = crc32c(view)
        op = self._op("write", bucket, name)
        headers = {"Content-Type": content_type, "x-amz-checksum-crc32c": encode_crc32c(checksum),
                   "x-amz-sdk-checksum-algorithm": "CRC32C"}
        for key, value in (metadata or {}).items():
            headers[f"x-amz-meta-{key}"] = value
        headers.update(await self._precondition(op, if_generation_match))

        async def handle(resp: HttpResponse) -> tuple[ObjectInfo, bool]:
            await resp.read()
            lowered = {k.lower(): v for k, v in resp.headers.items()}
            # The ETag of an object encrypted with KMS or a customer key is
            # not its MD5 (AWS documents it only for plain and SSE-S3 ones).
            plain = lowered.get("x-amz-server-side-encryption", "AES256") == "AES256" \
                and "x-amz-server-side-encryption-customer-algorithm" not in lowered
            return self._info(bucket, name, size=len(view), etag=lowered.get("etag", ""),
                              crc=full_object_crc32c(lowered), content_type=content_type,
                              metadata=metadata), plain

        try:
            info, etag_is_md5 = await self._transport.request(
                op, "PUT", self.object_url(bucket, name), handle, headers=headers, data=view)
        except NotFound as exc:
            if if_generation_match is None or "bucket" in exc.reason.lower():
                raise
            raise _precondition_failed(op, if_generation_match) from exc
        except PreconditionFailed as exc:
            # A retried PUT whose first attempt landed (answer lost) fails its
            # own precondition: it is ours if the object holds these bytes.
            if exc.attempts < 2 or if_generation_match is None:
                raise
            try:
                stored = await self.stat(bucket, name)
            except NotFound:
                raise exc from None
            if stored.size != len(view) or stored.crc32c != checksum:
                raise
            return stored
        return await self._verify(op, info, view, checksum, etag_is_md5)

    async def _precondition(self, op: Op, if_generation_match: int | None) -> dict[str, str]:
        if if_generation_match is None:
            return {}
        if if_generation_match == 0:
            return {"If-None-Match": "*"}
        etag = await self._etag_for(op.bucket, op.name, if_generation_match)
        if etag is None:
            raise _precondition_failed(op, if_generation_match)
        return {"If-Match": etag}

    async def _verify(self, op: Op, info: ObjectInfo, view: memoryview, checksum: int,
                      etag_is_md5: bool) -> ObjectInfo:
        """Check a PUT's answer: the crc32c the server reports (or, without
        one, the MD5 its ETag is, when unencrypted) must be the data's; else
        delete that version and raise."""
        stored = info.crc32c
        if stored is None:
            md5 = etag_of(info.generation)
            if etag_is_md5 and md5 is not None and "-" not in md5:
                digest = hashlib.md5(view, usedforsecurity=False).hexdigest()
                if md5.strip('"') != digest:
                    await self._discard(op, info, f"its ETag {md5} is not the MD5 of the "
                                                  f"{len(view)} bytes sent ({digest})")
            return info.replace(crc32c=checksum)
        if stored != checksum:
            await self._discard(op, info, f"the server stored crc32c {encode_crc32c(stored)}; "
                                          f"sent {encode_crc32c(checksum)}")
        return info

    async def _discard(self, op: Op, info: ObjectInfo, why: str) -> None:
        """Delete exactly the version ``info`` names (``If-Match``), then raise."""
        note = "the object was deleted"
        try:
            await self._delete_request(op.bucket, op.name, etag_of(info.generation)
                                       or self._etags.get(info.generation))
        except (NotFound, PreconditionFailed):
            note = "a newer version had replaced it and was left alone"
        except StorageError as exc:
            note = f"deleting it failed too ({exc})"
        raise ChecksumMismatch(f"{describe(op.operation, op.bucket, op.name, 's3')}: {why}; "
                               f"{note}", operation=op.operation, bucket=op.bucket, name=op.name)

    def start_upload(self, bucket: str, name: str, *,
                     content_type: str = "application/octet-stream",
                     part_size: int = MIN_PART_SIZE) -> S3Upload:
        """A streaming multipart upload, for the writer engine.

        Args:
            bucket: bucket name.
            name: object key.
            content_type: Content-Type of the final object.
            part_size: size of every part but the last (5 MiB to 5 GiB).

        Returns:
            The upload; nothing is sent before its first part.

        Raises:
            InvalidArgument: ``part_size`` outside S3's 5 MiB to 5 GiB.
        """
        check_object("start_upload", bucket, name, scheme="s3")
        if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
            raise InvalidArgument(f"start_upload s3://{bucket}/{name}: part_size {part_size} "
                                  f"is outside S3's {MIN_PART_SIZE}..{MAX_PART_SIZE} bytes")
        return S3Upload(self, self._multipart, bucket, name, content_type)

    async def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec], *,
                      if_generation_match: int | None = None,
                      content_type: str = "application/octet-stream") -> ObjectInfo:
        """S3 has no compose (``features.compose == 0``).

        Raises:
            InvalidRequest: always.
        """
        raise InvalidRequest(f"compose s3://{bucket}/{destination}: S3 cannot concatenate "
                             "objects server-side (features.compose is 0)",
                             operation="compose", bucket=bucket, name=destination,
                             reason="unsupported")

    # -- delete and copy ------------------------------------------------------------------

    async def delete(self, bucket: str, name: str, *, generation: int | None = None,
                     if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        """Delete an object (that generation only, if given).

        S3 answers a DELETE of a missing key with success, so unless
        ``missing_ok`` a HEAD finds out first; a pinned generation is checked
        by that HEAD and sent as ``If-Match``.

        Args:
            bucket: bucket name.
            name: object key.
            generation: delete only this version (else NotFound).
            if_generation_match: precondition (else PreconditionFailed).
            missing_ok: treat "already gone" as success.

        Raises:
            NotFound: no such object (unless ``missing_ok``), or not that generation.
            PreconditionFailed: ``if_generation_match`` did not hold.
            StorageError: any other failure.
        """
        delete_args(bucket, name, generation, if_generation_match, missing_ok, scheme="s3")
        op = self._op("delete", bucket, name)
        pins = {g for g in (generation, if_generation_match) if g is not None}
        if not pins and missing_ok:
            await self._ready(bucket)
            await self._delete_request(bucket, name, None)
            return
        try:
            info = await self.stat(bucket, name)
        except NotFound:
            if missing_ok:
                return
            raise
        if generation is not None and info.generation != generation:
            raise _gone(op, generation)
        if if_generation_match is not None and info.generation != if_generation_match:
            raise _precondition_failed(op, if_generation_match)
        etag = None
        if pins:
            etag = etag_of(info.generation) or self._etags.get(info.generation)
        try:
            await self._delete_request(bucket, name, etag)
        except PreconditionFailed as exc:
            if generation is not None:
                raise _gone(op, generation) from exc
            raise

    async def _delete_request(self, bucket: str, name: str, etag: str | None) -> None:
        async def handle(resp: HttpResponse) -> None:
            await resp.read()

        await self._transport.request(self._op("delete", bucket, name), "DELETE",
                                      self.object_url(bucket, name), handle,
                                      headers={"If-Match": etag} if etag else None,
                                      ok=(200, 204))

    async def delete_many(self, bucket: str, names: Sequence[str]) -> None:
        """Delete many objects, 1000 per request (``POST ?delete``); keys
        already gone count as deleted, as S3 reports them.

        Args:
            bucket: bucket name.
            names: object keys.

        Raises:
            StorageError: the request failed, or the server refused a key
                (the first refusal is named; the rest of the batch went on).
        """
        for name in names:
            check_object("delete_many", bucket, name, scheme="s3")
        await self._ready(bucket)
        for at in range(0, len(names), 1000):
            await self._multipart.delete_batch(bucket, names[at:at + 1000])

    async def copy(self, bucket: str, name: str, dest_bucket: str, dest_name: str) -> ObjectInfo:
        """Copy an object server-side (CopyObject; up to 5 GiB).

        Args:
            bucket: source bucket.
            name: source key.
            dest_bucket: destination bucket.
            dest_name: destination key.

        Returns:
            ObjectInfo of the copy.

        Raises:
            NotFound: the source is missing.
            StorageError: any other failure.
        """
        check_object("copy", bucket, name, scheme="s3")
        check_object("copy", dest_bucket, dest_name, bucket_arg="dest_bucket",
                     name_arg="dest_name", scheme="s3")
        await self._ready(bucket)
        await self._ready(dest_bucket)
        op = self._op("copy", bucket, name)

        async def handle(resp: HttpResponse) -> None:
            parse(await resp.read(), op)  # an <Error> inside the 200 raises

        source = quote(f"/{bucket}/{name}", safe="/-_.~")
        await self._transport.request(op, "PUT", self.object_url(dest_bucket, dest_name),
                                      handle, headers={"x-amz-copy-source": source})
        return await self.stat(dest_bucket, dest_name)

    # -- multipart primitives ---------------------------------------------------------------

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """Open multipart uploads (for cleaning up after killed writers).

        Args:
            bucket: bucket name.
            prefix: only uploads of keys starting with this.

        Returns:
            MultipartUploadInfo of each open upload.

        Raises:
            StorageError: the listing failed.
        """
        validate_bucket(bucket, scheme="s3")
        await self._ready(bucket)
        return await self._multipart.list_uploads(bucket, prefix)

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Abort a multipart upload and drop its parts.

        Args:
            bucket: bucket name.
            name: object key.
            upload_id: the upload.

        Raises:
            NotFound: no such upload.
            StorageError: any other failure.
        """
        check_object("abort multipart upload", bucket, name, scheme="s3")
        await self._ready(bucket)
        await self._multipart.abort(bucket, name, upload_id)

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """Parts of an open multipart upload.

        Args:
            bucket: bucket name.
            name: object key.
            upload_id: the upload.

        Returns:
            PartInfo in part-number order.

        Raises:
            NotFound: no such upload.
            StorageError: any other failure.
        """
        check_object("list parts", bucket, name, scheme="s3")
        await self._ready(bucket)
        return await self._multipart.list_parts(bucket, name, upload_id)

    async def create_bucket(self, bucket: str) -> None:
        """Create a bucket (in ``region`` when one is set).

        Args:
            bucket: bucket name.

        Raises:
            Conflict: it exists already (owned by someone else).
            StorageError: any other failure.
        """
        validate_bucket(bucket, scheme="s3")
        body = b""
        if self.region and self.region != DEFAULT_REGION:
            body = (f'<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                    f"<LocationConstraint>{self.region}</LocationConstraint>"
                    f"</CreateBucketConfiguration>").encode()

        async def handle(resp: HttpResponse) -> None:
            await resp.read()

        await self._transport.request(self._op("create_bucket", bucket), "PUT",
                                      self.object_url(bucket), handle, data=body or None)


def _rfc3339(http_date: str | None) -> str | None:
    """``Last-Modified`` (an HTTP date) as the RFC 3339 time a listing gives."""
    if not http_date:
        return None
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _pin(headers: Mapping[str, str]) -> dict[str, str]:
    """A resumed read continues the version its first response came from."""
    etag = headers.get("etag")
    return {"If-Match": etag} if etag else {}


def _gone(op: Op, generation: int) -> NotFound:
    return NotFound(f"{describe(op.operation, op.bucket, op.name, 's3')} failed: the object is "
                    f"no longer generation {generation} (its ETag changed)",
                    operation=op.operation, bucket=op.bucket, name=op.name, status=412,
                    reason="PreconditionFailed")


def _precondition_failed(op: Op, generation: int) -> PreconditionFailed:
    return PreconditionFailed(f"{describe(op.operation, op.bucket, op.name, 's3')} failed: "
                              f"the object is not generation {generation}",
                              operation=op.operation, bucket=op.bucket, name=op.name,
                              status=412, reason="PreconditionFailed")
