"""``S3Store``: Amazon S3 and S3-compatible stores (``s3://`` URLs).

Requests go through aioflux's transport (one session per loop, the client's
semaphore, retries, lean reads), signed with SigV4 by botocore
(:mod:`._auth`); :class:`~._service.S3Service`, which the store builds on,
holds them with the objects' URLs and version tokens. Every read is
checked like a GCS one (status,
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

from collections.abc import AsyncIterator, Sequence
from functools import partial

from .._core.auth import Auth
from .._core.checks.arguments import (
    check_bool,
    check_endpoint,
    check_instance,
    check_object,
    check_str,
    endpoint_url,
)
from .._core.errors import InvalidArgument
from .._core.records.types import ListPage, ObjectInfo
from .._core.records.urls import validate_bucket
from .._core.settings.config import ClientConfig
from .._core.storage.protocol import Fetched, StoreFeatures, arguments_state, from_arguments
from .._engines.store_stream import StreamingStore
from .._net.failures import drain
from .._net.pinned import read_pinned
from .._net.transport import Transport
from ._auth import configured_endpoint, session_region
from ._copy import copy_object
from ._endpoints import DEFAULT_REGION, Addressing, Endpoints, check_region
from ._listing import list_pages
from ._multipart import MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE, Multipart
from ._multipart_calls import S3MultipartCalls
from ._page import lxml
from ._put import metadata_headers, put_object
from ._service import S3Service
from ._upload import S3Upload
from ._xml import ANSWERS, NOT_XML

__all__ = ["DEFAULT_REGION", "FEATURES", "S3Store"]

FEATURES = StoreFeatures(scheme="s3", compose=0, end_offset=False, multipart=True,
                         min_part_size=MIN_PART_SIZE, part_granularity=1, max_parts=MAX_PARTS,
                         batch_delete=1000)


class S3Store(S3Service, S3MultipartCalls, StreamingStore):
    """Amazon S3 (or an S3-compatible store) as an
    ``ObjectStore``.

    Args:
        config: client settings (concurrency, timeouts, retries).
        region: the region to sign for; default ``AWS_REGION``, then
            ``AWS_DEFAULT_REGION`` or the profile's, else discovered per
            bucket (``x-amz-bucket-region`` of a HEAD of the bucket).
        endpoint: API root of an S3-compatible store (MinIO, R2, Ceph,
            moto) or one of AWS's own (FIPS...), used as given; default
            ``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``, then the
            profile's ``services`` section or ``endpoint_url`` (as botocore
            resolves them), else AWS.
        addressing: ``path`` (``endpoint/bucket/key``), ``virtual``
            (``bucket.endpoint/key``) or ``auto``: virtual on AWS for
            bucket names without dots, path elsewhere.
        profile: shared-config profile for credentials and region.
        anonymous: send requests unsigned (public buckets); also what
            happens when the credential chain finds nothing.
        sign_payload: sign each body's SHA-256 (None: over plain http
            only; False: never, e.g. a trusted private network; True:
            always). Every body also carries its crc32c.
        defer_credentials: resolve the AWS credential chain at the first
            request, in a thread, not here: for a store built on a running
            event loop, which a credential_process, SSO, AssumeRole or
            instance-metadata lookup would freeze. A broken chain then
            fails that request; none at all still means anonymous access.
        auth: authenticate with this instead (tests).
        transport: a ready transport (tests inject a mock); overrides
            ``config``, ``auth`` and ``requester_pays``.
        requester_pays: accept requester-pays buckets' charges (every
            request carries ``x-amz-request-payer: requester``, signed);
            S3 refuses their requests without it (403).

    Raises:
        InvalidArgument: botocore is missing (``pip install
            "aioflux-storage[s3]"``; only ``anonymous=True`` works without
            it), or a setting of the wrong type.
        InvalidURL: ``endpoint`` is not an http(s) URL.
    """

    _kind = "S3"
    features = FEATURES
    __getstate__ = arguments_state
    __setstate__ = from_arguments

    def __init__(self, config: ClientConfig | None = None, *, region: str | None = None,
                 endpoint: str | None = None, addressing: Addressing = "auto",
                 profile: str | None = None, anonymous: bool = False,
                 sign_payload: bool | None = None, defer_credentials: bool = False,
                 auth: Auth | None = None, transport: Transport | None = None,
                 requester_pays: bool = False) -> None:
        check_instance("S3Store", "config", config, ClientConfig, optional=True)
        check_str("S3Store", "region", region, optional=True)
        endpoint = endpoint_url("S3Store", endpoint)
        check_str("S3Store", "profile", profile, optional=True)
        check_bool("S3Store", "anonymous", anonymous)
        check_bool("S3Store", "sign_payload", sign_payload, optional=True)
        check_bool("S3Store", "defer_credentials", defer_credentials)
        check_bool("S3Store", "requester_pays", requester_pays)
        if addressing not in ("auto", "path", "virtual"):
            raise InvalidArgument(f"S3Store: addressing must be 'auto', 'path' or 'virtual', "
                                  f"got {addressing!r}")
        self._arguments = {"config": config, "region": region, "endpoint": endpoint,
                           "addressing": addressing, "profile": profile, "anonymous": anonymous,
                           "sign_payload": sign_payload, "defer_credentials": defer_credentials,
                           "requester_pays": requester_pays}
        lxml()  # listings need it: named now, not at the first listing
        check_region("S3Store: region", region)
        if region is None and transport is None:
            try:
                region = session_region(profile)
            except InvalidArgument:
                if not anonymous:
                    raise  # botocore missing: named now, not at the first request
            check_region("S3Store: the region of the AWS configuration (AWS_REGION, "
                         "AWS_DEFAULT_REGION or the profile's region)", region)
        if endpoint is None and transport is None:
            # The environment's or the profile's (botocore resolves both),
            # checked as endpoint= is: a typo there fails here, named,
            # not as a ValueError or eight failed connections later.
            endpoint = configured_endpoint(profile)
            check_endpoint("S3Store: the endpoint of the AWS configuration "
                           "(AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the profile's "
                           "endpoint_url)", endpoint)
        self.addressing = addressing
        self.region = region
        super().__init__(config, Endpoints(endpoint, addressing, region), profile=profile,
                         anonymous=anonymous, sign_payload=sign_payload,
                         defer_credentials=defer_credentials, auth=auth, transport=transport,
                         requester_pays=requester_pays)
        self._multipart = Multipart(self)

    def __repr__(self) -> str:
        return f"S3Store({self.endpoint!r}, region={self.region!r})"

    # -- lifecycle -------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the store: its connections of the current event loop now,
        and for good: a later call raises instead of reopening them
        (connections nothing would close). Closing again does nothing.

        Raises:
            InvalidArgument: (from later calls) the store is closed.
        """
        await self._transport.aclose(owner="S3Store")

    # -- listing ------------------------------------------------------------------------

    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None,
               page_size: int, fields: str | None) -> AsyncIterator[ListPage]:
        # ListObjectsV2: S3 has no end offset, so the listing stops itself.
        return list_pages(self, bucket, prefix, delimiter, start_offset, end_offset, page_size)

    # -- reads ----------------------------------------------------------------------------

    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        # A body cut short is resumed after its last byte (read_media),
        # pinned to the ETag first served.
        await self._ready(bucket)
        return await read_pinned(self._transport, self._op("read", bucket, name),
                                 self.object_url(bucket, name), generation=generation,
                                 etag_for=partial(self._etag_for, bucket, name), what="object",
                                 reason="PreconditionFailed", start=start, end=end, into=into,
                                 size=size, crc=crc, verify=self.config.verify_crc32c,
                                 want_crc=want_crc, headers={"x-amz-checksum-mode": "ENABLED"},
                                 answers=ANSWERS)

    # -- writes --------------------------------------------------------------------------

    async def _write(self, bucket: str, name: str, data: memoryview, content_type: str,
                     if_generation_match: int | None, metadata: dict[str, str] | None,
                     resumable: bool | None) -> ObjectInfo:
        # One PUT (at most 5 GiB), sent with its crc32c and checked.
        if resumable:
            raise InvalidArgument(f"write s3://{bucket}/{name}: S3 has no resumable uploads; "
                                  "use start_upload (multipart) for large objects")
        await self._ready(bucket)
        return await put_object(self, bucket, name, data, content_type, if_generation_match,
                                metadata)

    def _start_upload(self, bucket: str, name: str, content_type: str, part_size: int,
                      metadata: dict[str, str] | None,
                      if_generation_match: int | None) -> S3Upload:
        # Metadata S3 cannot carry, and a part size outside its range, are
        # refused now, not at a part.
        metadata_headers("start_upload", bucket, name, metadata)
        if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
            raise InvalidArgument(f"start_upload s3://{bucket}/{name}: part_size {part_size} "
                                  f"is outside S3's {MIN_PART_SIZE}..{MAX_PART_SIZE} bytes")
        return S3Upload(self, self._multipart, bucket, name, content_type, metadata,
                        if_generation_match)

    # -- deletes and copies -----------------------------------------------------------

    async def delete_many(self, bucket: str, names: Sequence[str]) -> None:
        """Delete many objects, 1000 per request (``POST ?delete``); keys
        already gone count as deleted, as S3 reports them.

        Args:
            bucket: bucket name.
            names: object keys.

        Raises:
            InvalidArgument: ``names`` is a str, not a sequence of keys.
            StorageError: the request failed, or the server refused a key
                (the first refusal is named; the rest of the batch went on).
        """
        if isinstance(names, str):
            # A str is a sequence of its characters: delete_many(b, "abc")
            # deleted the keys "a", "b" and "c".
            raise InvalidArgument(f"delete_many s3://{bucket}: names must be a sequence of "
                                  f"keys, got the str {names[:80]!r} (pass [{names[:80]!r}])")
        for name in names:
            check_object("delete_many", bucket, name, scheme="s3")
        await self._ready(bucket)
        # A DeleteObjects body naming a key that XML cannot carry (a control
        # character) is MalformedXML, and the whole batch fails: such keys
        # go one by one, as AWS advises.
        batched = [name for name in names if not NOT_XML.search(name)]
        step = FEATURES.batch_delete
        for at in range(0, len(batched), step):
            await self._multipart.delete_batch(bucket, batched[at:at + step])
        for name in names:
            if NOT_XML.search(name):
                await self.delete(bucket, name, missing_ok=True)

    async def _copy(self, bucket: str, name: str, dest_bucket: str,
                    dest_name: str) -> ObjectInfo:
        # CopyObject; past 5 GiB, a multipart upload of UploadPartCopy
        # ranges, created with what CopyObject copies: the source's content
        # type, metadata, Cache-Control, Content-Disposition,
        # Content-Encoding, Content-Language and Expires.
        await self._ready(bucket)
        await self._ready(dest_bucket)
        return await copy_object(self, bucket, name, dest_bucket, dest_name)

    async def create_bucket(self, bucket: str) -> None:
        """Create a bucket (in ``region`` when one is set).

        Args:
            bucket: bucket name.

        Raises:
            Conflict: it exists already: owned by someone else, or by you
                outside us-east-1 (BucketAlreadyOwnedByYou; us-east-1 answers 200).
            StorageError: any other failure.
        """
        validate_bucket(bucket, scheme="s3")
        body = b""
        if self.region and self.region != DEFAULT_REGION:
            body = (f'<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                    f"<LocationConstraint>{self.region}</LocationConstraint>"
                    f"</CreateBucketConfiguration>").encode()

        await self._transport.request(self._op("create_bucket", bucket), "PUT",
                                      self.object_url(bucket), drain, data=body or None)
