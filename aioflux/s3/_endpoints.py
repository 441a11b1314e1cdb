"""Where an S3 store's requests go: endpoints, addressing and regions.

AWS's regional hosts (the default) or the endpoint configured
(``endpoint=``, ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``): an
S3-compatible store, or one of AWS's own (FIPS, dual-stack, a VPC
endpoint), used as given as botocore does; path-style
(``endpoint/bucket/key``) or virtual-hosted (``bucket.endpoint/key``)
URLs; the region each bucket's requests are signed for, configured or
learnt from the bucket (``x-amz-bucket-region``, once per bucket).

A configured region that is not the bucket's is corrected as boto3 does: S3
answers such a request with a 301 ``PermanentRedirect`` (or a 400
``AuthorizationHeaderMalformed``, a 307) naming the bucket's region in
``x-amz-bucket-region``; :class:`RegionalTransport` then remembers that
region for the bucket and sends the request again, once, signed for its
region: to the bucket's regional host by default, to the same host when an
endpoint was configured (a request never leaves the host the user chose).

A store made with ``requester_pays=True`` accepts the charges of a
requester-pays bucket: :class:`RegionalTransport` adds
``x-amz-request-payer: requester`` to every request's own headers, the ones
SigV4 signs. Without it S3 answers such a bucket's requests with a bare 403
``AccessDenied``, which cannot be told from other refusals: the error then
says that ``requester_pays=True`` is what such a bucket needs.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, TypeVar
from urllib.parse import quote, urlsplit

from .._core.auth import Auth
from .._core.errors import InvalidArgument, InvalidURL, NotFound, PermissionDenied, StorageError
from .._core.settings.config import ClientConfig
from .._net.failures import error_from_response
from .._net.transport import HttpResponse, MediaHandler, Op, ResponseHandler, Transport

__all__ = ["AWS_ENDPOINT", "DEFAULT_REGION", "Addressing", "Endpoints", "RegionalTransport",
           "check_region"]

T = TypeVar("T")

DEFAULT_REGION = "us-east-1"
AWS_ENDPOINT = "https://s3.amazonaws.com"
# What a request that accepts a requester-pays bucket's charges carries (signed).
_REQUESTER_PAYS: Mapping[str, str] = MappingProxyType({"x-amz-request-payer": "requester"})
_REQUESTER_PAYS_HINT = ("if the bucket is requester-pays, accept its charges with "
                        "requester_pays=True (S3Store, new_store, the storage option) or the "
                        "CLI's --requester-pays")
Addressing = Literal["auto", "path", "virtual"]
# Statuses S3 answers a request for a bucket of another region with (the
# header x-amz-bucket-region naming the bucket's).
_WRONG_REGION = (301, 307, 400)
# A region as a server may name it (AWS's are like eu-central-1; other
# stores use names such as "default" or "garage"). Anything else, such as a
# host name with a path, is ignored: a region becomes part of a host name.
_REGION = re.compile(r"[A-Za-z0-9_-]{1,64}")
# The hosts the default endpoint builds, and so the only AWS hosts its
# credentials go to: s3.amazonaws.com, s3.<region>.amazonaws.com (.com.cn
# for China), with a bucket in front for virtual-hosted addressing. The
# region has the shape of botocore's partitions' regionRegex. Nothing
# looser: other services put names their customers choose under
# amazonaws.com (an ELB named s3-x is s3-x-1234.us-east-1.elb.amazonaws.com,
# and bucket.s3-website-us-east-1.amazonaws.com serves a bucket owner's pages).
_AWS_HOST = re.compile(r"(?:(?P<bucket>[a-z0-9][a-z0-9.-]*)\.)?s3\.(?:"
                       r"(?:[a-z]{2,4}(?:-[a-z]+)+-\d{1,3}\.)?amazonaws\.com"
                       r"|cn-[a-z]+-\d{1,3}\.amazonaws\.com\.cn)")


def check_region(what: str, region: str | None) -> None:
    """Refuse a configured region that is no region name.

    A region becomes part of a host name (``s3.<region>.amazonaws.com``)
    and of every signature: a trailing space or quotes from a config file
    (``region = "us-west-2"``) otherwise fail DNS eight times over, and
    ``evil.com#`` would make the host ``s3.evil.com``.

    Args:
        what: where the region came from, for the message.
        region: the region, or None (learnt per bucket).

    Raises:
        InvalidArgument: not letters, digits, ``-`` and ``_``.
    """
    if region is not None and not _REGION.fullmatch(region):
        raise InvalidArgument(f"{what} must be a region name such as 'us-east-1' (letters, "
                              f"digits, '-' and '_'), got {region!r:.80}")


class Endpoints:
    """The URLs and signing regions of one store's buckets.

    An endpoint configured (the caller's ``endpoint``, or the one the
    environment or the profile names, which :class:`S3Store` resolves
    through botocore: see ``_auth.configured_endpoint``) is used as given,
    as botocore does, whether an S3-compatible store's or one of AWS's own
    (FIPS, dual-stack, a VPC endpoint): every
    request goes to its host (with the bucket in front when addressing is
    virtual), and a bucket's region only changes what requests are signed
    for. Only AWS's default, ``https://s3.amazonaws.com``, stands for the
    regional host of each bucket's region.

    Args:
        endpoint: an API root, or None (AWS's).
        addressing: ``path``, ``virtual`` or ``auto`` (virtual on AWS's
            default hosts for bucket names without dots, path on a
            configured endpoint).
        region: the configured region, or None to learn each bucket's.

    Raises:
        InvalidURL: the endpoint is not an http(s) URL.
    """

    def __init__(self, endpoint: str | None, addressing: Addressing,
                 region: str | None) -> None:
        custom = endpoint or None
        if custom is not None:
            parts = urlsplit(custom)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InvalidURL(f"S3Store: endpoint must be an http(s) URL, got {custom!r}")
        # A host the user chose was chosen for what AWS's default lacks
        # (FIPS, IPv6, a private network): requests never move off it.
        self.custom = custom is not None and custom.rstrip("/").lower() != AWS_ENDPOINT
        self.endpoint = (custom or AWS_ENDPOINT).rstrip("/")
        self._home = urlsplit(self.endpoint)
        # An API served under a path (``https://host/storage/v1/s3``): a
        # path-style URL's bucket is the segment after it, not the first.
        self._path = self._home.path.rstrip("/")
        self.addressing = addressing
        self.region = region
        self.regions: dict[str, str] = {}
        self._host_buckets: dict[str, str] = {}
        self._finding: dict[str, asyncio.Task[str]] = {}

    def _virtual(self, bucket: str) -> bool:
        if self.addressing == "virtual":
            return True
        # Dots in a bucket name break the TLS wildcard of virtual hosts.
        return self.addressing == "auto" and not self.custom and "." not in bucket

    def _base(self, bucket: str) -> str:
        """``scheme://host[/bucket]`` of a bucket's requests."""
        region = self.regions.get(bucket) or self.region
        if not self.custom:
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
        """The URL of ``name`` in ``bucket`` (the bucket's own with no name),
        the key percent-encoded as SigV4 signs it."""
        base = self._base(bucket)
        if not name:
            return base + "/" if self._virtual(bucket) else base
        return f"{base}/{quote(name, safe='/-_.~')}"

    def relocate(self, bucket: str, url: str, region: str) -> str:
        """Record that ``bucket`` lives in ``region``, and move ``url`` (a
        request to it) to that region's host (the same URL on an
        S3-compatible store, whose host has no region in it).

        Args:
            bucket: bucket name.
            url: a URL of the bucket, as :meth:`object_url` made it.
            region: the bucket's region, as the server named it.

        Returns:
            The URL to send the request to now.
        """
        old = self._base(bucket)
        self.regions[bucket] = region
        new = self._base(bucket)
        return new + url[len(old):] if url.startswith(old) else url

    def trusted(self, url: str) -> bool:
        """Whether credentials may go to ``url``: the configured endpoint's
        virtual hosts, same scheme and port; by default, AWS's S3 hosts
        (``[bucket.]s3[.region].amazonaws.com``) over https."""
        try:
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
            if parts.scheme != self._home.scheme or parts.port != self._home.port:
                return False
        except ValueError:
            return False
        if not self.custom:
            return parts.scheme == "https" and _AWS_HOST.fullmatch(host) is not None
        return host.endswith("." + (self._home.hostname or "").lower())

    def region_of_url(self, url: str) -> str:
        """The region to sign a request to ``url`` for: its bucket's."""
        bucket = self._bucket_of(url)
        return self.regions.get(bucket) or self.region or DEFAULT_REGION

    def _bucket_of(self, url: str) -> str:
        # Asked twice for every request, so a host's answer is kept: the
        # bucket it names (virtual-hosted), or "" when the bucket is the
        # first path segment.
        start = url.find("://") + 3
        end = url.find("/", start)
        end = len(url) if end < 0 else end
        origin = url[:end].partition("?")[0]
        bucket = self._host_buckets.get(origin)
        if bucket is None:
            bucket = self._host_buckets[origin] = self._bucket_of_host(origin)
        if bucket:
            return bucket
        path = url[end:].partition("?")[0]
        if self._path and path.startswith(self._path + "/"):
            path = path[len(self._path):]
        return path[1:].partition("/")[0]

    def _bucket_of_host(self, origin: str) -> str:
        host = (urlsplit(origin).hostname or "").lower()
        if self.custom:
            home = (self._home.hostname or "").lower()
            return host[:-len(home) - 1] if host.endswith("." + home) else ""
        # bucket.s3.region.amazonaws.com, or "" for s3.region.amazonaws.com
        # (a bucket may itself start with "s3-" or "s3.").
        match = _AWS_HOST.fullmatch(host)
        return (match.group("bucket") or "") if match is not None else ""

    async def ready(self, bucket: str, transport: Transport) -> None:
        """Learn ``bucket``'s region before its first request, when no
        region was configured (concurrent first requests wait for one
        answer rather than sign for a guess)."""
        if self.region is not None or bucket in self.regions:
            return
        loop = asyncio.get_running_loop()
        finding = self._finding.get(bucket)
        if finding is None or finding.get_loop() is not loop:
            finding = loop.create_task(self.find_region(bucket, transport))
            self._finding[bucket] = finding
            finding.add_done_callback(functools.partial(self._found, bucket))
        await asyncio.shield(finding)

    def _found(self, bucket: str, finding: asyncio.Task[str]) -> None:
        # Settled here, not by the requests waiting: every one of them may
        # have been cancelled (the lookup runs on, shielded). A failed lookup
        # is forgotten, so a later request asks again instead of being
        # handed an old error, and its error is retrieved, not left for
        # asyncio to log as never retrieved.
        if self._finding.get(bucket) is finding:
            del self._finding[bucket]
        if not finding.cancelled() and finding.exception() is None:
            self.regions[bucket] = finding.result()

    async def find_region(self, bucket: str, transport: Transport) -> str:
        """``x-amz-bucket-region`` of a HEAD of the bucket (signed for the
        default region: the answer names the region whatever its status, a
        301 or 400 for a request signed for another one)."""

        async def handle(resp: HttpResponse) -> str:
            return resp.headers.get("x-amz-bucket-region", "")  # a HEAD: no body

        try:
            found = await transport.request(Op("find region", bucket, scheme="s3"), "HEAD",
                                            self.object_url(bucket), handle,
                                            ok=(200, 301, 307, 400, 403))
        except NotFound:
            found = ""  # the request itself will say "no such bucket"
        return found if _REGION.fullmatch(found) else DEFAULT_REGION


class _WrongRegion(StorageError):
    """A request reached a bucket of another region (internal: the
    transport corrects the region and tries again)."""

    def __init__(self, op: Op, status: int, region: str) -> None:
        super().__init__(f"{op.operation} s3://{op.bucket}/{op.name} answered HTTP {status}: "
                         f"the bucket is in {region}", operation=op.operation,
                         bucket=op.bucket, name=op.name, status=status,
                         reason="PermanentRedirect")
        self.region = region


class RegionalTransport(Transport):
    """The S3 store's transport: a request answered "the bucket is in
    another region" is sent again, once, to and signed for that region.

    Every request accepts a requester-pays bucket's charges when
    ``requester_pays`` is set (``x-amz-request-payer: requester``, among
    the headers the signer signs); when it is not, a 403 says that this
    is what such a bucket needs.

    Args:
        endpoints: the store's endpoints (its regions are corrected here).
        config: client configuration.
        auth: the signer (it asks ``endpoints`` for each URL's region).
        requester_pays: send ``x-amz-request-payer: requester`` with every request.
        **kwargs: the other :class:`~aioflux._net.transport.Transport` arguments.
    """

    # An object's bytes are read as stored: S3 never decodes a body, and its
    # ETag's MD5 and crc32c are of the stored bytes (an object put with
    # Content-Encoding: gzip came back decompressed by aiohttp, then failed them).
    stored_bytes = True

    def __init__(self, endpoints: Endpoints, config: ClientConfig, auth: Auth, *,
                 requester_pays: bool = False, **kwargs: Any) -> None:
        super().__init__(config, auth, **kwargs)
        self.endpoints = endpoints
        self.requester_pays = requester_pays

    def _explained(self, exc: PermissionDenied) -> PermissionDenied:
        """``exc`` (a 403), saying what a requester-pays bucket needs when
        this store does not accept its charges: S3 tells nothing more."""
        if self.requester_pays or exc.status != 403:
            return exc
        explained = copy.copy(exc)  # the class and its fields, on a new instance
        explained.args = (f"{exc} ({_REQUESTER_PAYS_HINT})",)
        return explained

    async def request(self, op: Op, method: str, url: str, handler: ResponseHandler[T], *,
                      params: Mapping[str, str] | None = None,
                      headers: Mapping[str, str] | None = None,
                      data: bytes | bytearray | memoryview | None = None,
                      ok: tuple[int, ...] = (200,)) -> T:
        """:meth:`Transport.request`, with the bucket's region corrected
        once when the server names another one. One of the two places
        every S3 request passes: the request payer's header joins its own
        headers here, before the signer sees them.

        Raises:
            PermissionDenied: refused (403); unless the store accepts
                requester-pays charges, the message says how to.
            StorageError: as :meth:`Transport.request`; a second wrong-region
                answer is an error like any other 3xx or 4xx.
        """
        if self.requester_pays:
            headers = {**headers, **_REQUESTER_PAYS} if headers else _REQUESTER_PAYS
        signed_for = self.endpoints.region_of_url(url)

        async def checked(resp: HttpResponse) -> T:
            if resp.status not in ok and resp.status >= 300:
                region = resp.headers.get("x-amz-bucket-region", "")
                if _REGION.fullmatch(region) and region != signed_for \
                        and resp.status in _WRONG_REGION:
                    raise _WrongRegion(op, resp.status, region)
                raise await error_from_response(resp, op)
            return await handler(resp)

        try:
            try:
                return await super().request(op, method, url, checked, params=params,
                                             headers=headers, data=data,
                                             ok=ok + _WRONG_REGION)
            except _WrongRegion as moved:
                url = self.endpoints.relocate(op.bucket, url, moved.region)
            return await super().request(op, method, url, handler, params=params,
                                         headers=headers, data=data, ok=ok)
        except PermissionDenied as exc:
            explained = self._explained(exc)
            if explained is exc:
                raise
            raise explained from exc.__cause__

    async def get_media_once(self, op: Op, url: str, handler: MediaHandler[T], *,
                             headers: Mapping[str, str] | None = None,
                             into: memoryview | None = None, limit: int | None = None,
                             keep_partial: bool = True, summed: bool = False) -> T:
        """:meth:`Transport.get_media_once` (the lean reads), with the
        bucket's region corrected once when the server names another one
        (and the request payer's header, as :meth:`request` adds it).

        A media GET's error keeps no headers, so the bucket's region is
        asked of the bucket (a HEAD) when a read fails with a status S3
        gives a request of the wrong region.

        Raises:
            PermissionDenied: refused (403); unless the store accepts
                requester-pays charges, the message says how to.
            StorageError: as :meth:`Transport.get_media_once`.
        """
        if self.requester_pays:
            headers = {**headers, **_REQUESTER_PAYS} if headers else _REQUESTER_PAYS
        signed_for = self.endpoints.region_of_url(url)
        try:
            try:
                return await super().get_media_once(op, url, handler, headers=headers,
                                                    into=into, limit=limit,
                                                    keep_partial=keep_partial, summed=summed)
            except StorageError as exc:
                if exc.status not in _WRONG_REGION:
                    raise
                region = await self.endpoints.find_region(op.bucket, self)
                if region == signed_for:
                    raise
            url = self.endpoints.relocate(op.bucket, url, region)
            return await super().get_media_once(op, url, handler, headers=headers, into=into,
                                                limit=limit, keep_partial=keep_partial,
                                                summed=summed)
        except PermissionDenied as exc:
            explained = self._explained(exc)
            if explained is exc:
                raise
            raise explained from exc.__cause__
