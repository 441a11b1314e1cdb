"""The S3 endpoint of one store, as its requests reach it.

:class:`S3Service` is what the store's operations and its helpers
(:mod:`._put`, :mod:`._copy`, :mod:`._upload`, :mod:`._listing`,
:mod:`._page`, :mod:`._multipart`) share: where each request goes
(:mod:`._endpoints`: the endpoint, the addressing, each bucket's region),
the transport with the credential that signs each request (:mod:`._auth`:
SigV4 from the AWS credential chain, resolved now or at the first
request, or none); the ETag behind each generation handed out; and the
two requests every write, copy and delete ends with: a HEAD (``stat``)
and a DELETE (``delete``, its preconditions checked by a HEAD first).
:class:`~._store.S3Store` is the storage protocol on it.
"""

from __future__ import annotations

from .._core.auth import AnonymousAuth, Auth
from .._core.errors import NotFound, PreconditionFailed, as_operation
from .._core.metrics import RequestStats
from .._core.records.types import NO_METADATA, ObjectInfo
from .._core.settings.config import ClientConfig
from .._core.storage.base import StoreBase
from .._core.storage.etags import EtagMemory
from .._net.failures import drain
from .._net.transport import HttpResponse, Op, Transport
from ._auth import ChainAuth, SigV4
from ._endpoints import Endpoints, RegionalTransport
from ._xml import (
    content_md5_base64,
    etag_of,
    full_object_crc32c,
    generation_of,
    gone,
    head_size,
    precondition_failed,
    rfc3339,
)

__all__ = ["S3Service"]


class S3Service(StoreBase):
    """One S3 endpoint: signed requests, object URLs, version tokens, HEAD
    and DELETE (the wire calls ``_stat`` and ``_delete`` of the store's
    :class:`~aioflux._core.storage.base.StoreBase`).

    Args:
        config: client settings (concurrency, timeouts, retries); None:
            the transport's, else the defaults.
        endpoints: where requests go (the endpoint, addressing, regions).
        profile: shared-config profile for credentials.
        anonymous: send requests unsigned.
        sign_payload: sign each body's SHA-256 (see :class:`~._store.S3Store`).
        defer_credentials: resolve the credential chain at the first
            request, in a thread.
        auth: authenticate with this instead (tests).
        transport: a ready transport (tests inject a mock), used instead
            of one signing with the credential chain's.
        requester_pays: every request accepts a requester-pays bucket's
            charges (``x-amz-request-payer: requester``, signed), on the
            transport made here.
    """

    def __init__(self, config: ClientConfig | None, endpoints: Endpoints, *,
                 profile: str | None, anonymous: bool, sign_payload: bool | None,
                 defer_credentials: bool, auth: Auth | None,
                 transport: Transport | None, requester_pays: bool = False) -> None:
        self.endpoints = endpoints
        self.endpoint = self.endpoints.endpoint
        self._etags = EtagMemory(generation_of, etag_of)
        self.config = config or (transport.config if transport else ClientConfig())
        if transport is None:
            if auth is None and anonymous:
                auth = AnonymousAuth()
            elif auth is None and defer_credentials:
                auth = ChainAuth(self.endpoints.region_of_url, profile=profile,
                                 sign_payload=sign_payload)
            elif auth is None:
                auth = SigV4.found(self.endpoints.region_of_url, profile=profile,
                                   sign_payload=sign_payload) or AnonymousAuth()
            transport = RegionalTransport(self.endpoints, self.config, auth,
                                          requester_pays=requester_pays,
                                          endpoint=self.endpoint,
                                          trusted=self.endpoints.trusted, exact_urls=True)
        self._transport = transport
        #: Whether requests accept a requester-pays bucket's charges (a
        #: transport given decides: a mock sends what it is asked to).
        self.requester_pays: bool = getattr(transport, "requester_pays", False)

    # -- addressing and regions ---------------------------------------------------

    @property
    def transport(self) -> Transport:
        """The transport (its ``stats`` count requests and retries)."""
        return self._transport

    @property
    def stats(self) -> RequestStats:
        """What this store's requests did: counts, retries by cause, bytes,
        and latency per operation (``stats.summary()``)."""
        return self._transport.stats

    def object_url(self, bucket: str, name: str = "") -> str:
        """The URL of ``name`` in ``bucket`` (the bucket's own with no name).

        Args:
            bucket: bucket name.
            name: object key.

        Returns:
            The URL, the key percent-encoded as SigV4 signs it.
        """
        return self.endpoints.object_url(bucket, name)

    async def _ready(self, bucket: str) -> None:
        await self.endpoints.ready(bucket, self._transport)

    def _op(self, operation: str, bucket: str, name: str = "") -> Op:
        return Op(operation, bucket, name, "s3")

    # -- version tokens -------------------------------------------------------------

    def _remember(self, etag: str) -> int:
        return self._etags.remember(etag)

    def _known_etag(self, generation: int) -> str | None:
        """The ETag ``generation`` stands for, decoded or remembered; None
        when neither (a hashed generation this store has not seen)."""
        return self._etags.known(generation)

    async def _etag_for(self, bucket: str, name: str, generation: int) -> str | None:
        """The ETag ``generation`` stands for: decoded, remembered, or the
        object's own if its generation is that; None when it is not."""
        return await self._etags.lookup(generation, lambda: self.stat(bucket, name))

    def _info(self, bucket: str, name: str, *, size: int, etag: str, crc: int | None,
              md5: str | None = None, content_type: str | None = None,
              updated: str | None = None,
              metadata: dict[str, str] | None = None) -> ObjectInfo:
        return ObjectInfo(bucket, name, size, self._remember(etag), crc, md5, None,
                          content_type, updated, metadata or NO_METADATA, "s3")

    # -- HEAD and DELETE -----------------------------------------------------------------

    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        # HEAD: the full-object crc32c when the server keeps one.
        await self._ready(bucket)
        op = self._op("stat", bucket, name)

        async def handle(resp: HttpResponse) -> ObjectInfo:
            # A HEAD has no body to read; its Content-Length is the object's.
            h = resp.headers
            lowered = {k.lower(): v for k, v in h.items()}
            metadata = {k[11:]: v for k, v in lowered.items() if k.startswith("x-amz-meta-")}
            return self._info(bucket, name, size=head_size(lowered, op),
                              etag=h.get("ETag", ""), crc=full_object_crc32c(lowered),
                              md5=content_md5_base64(lowered), content_type=h.get("Content-Type"),
                              updated=rfc3339(h.get("Last-Modified")), metadata=metadata)

        return await self._transport.request(op, "HEAD", self.object_url(bucket, name), handle,
                                             headers={"x-amz-checksum-mode": "ENABLED"})

    async def _delete(self, bucket: str, name: str, generation: int | None,
                      if_generation_match: int | None, missing_ok: bool) -> None:
        # S3 answers a DELETE of a missing key with success, so unless
        # ``missing_ok`` a HEAD finds out first; a pinned generation is
        # checked by that HEAD and sent as ``If-Match``.
        op = self._op("delete", bucket, name)
        pins = {g for g in (generation, if_generation_match) if g is not None}
        if not pins and missing_ok:
            await self._ready(bucket)
            await self._delete_request(bucket, name, None)
            return
        try:
            info = await self.stat(bucket, name)
        except NotFound as exc:
            if missing_ok:
                return
            raise as_operation(exc, "delete") from None
        if generation is not None and info.generation != generation:
            if missing_ok:  # the version asked for is gone, as on GCS
                return
            raise gone(op, generation)
        if if_generation_match is not None and info.generation != if_generation_match:
            raise precondition_failed(op, if_generation_match)
        etag = None
        if pins:
            etag = self._known_etag(info.generation)
        try:
            await self._delete_request(bucket, name, etag)
        except PreconditionFailed as exc:
            if generation is not None:
                if missing_ok:
                    return
                raise gone(op, generation) from exc
            raise

    async def _delete_request(self, bucket: str, name: str, etag: str | None) -> None:
        await self._transport.request(self._op("delete", bucket, name), "DELETE",
                                      self.object_url(bucket, name), drain,
                                      headers={"If-Match": etag} if etag else None,
                                      ok=(200, 204))
