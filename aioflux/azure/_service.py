"""The Blob service of one account, as an Azure store's requests reach it.

:class:`BlobService` is what the store's operations and its helpers
(:mod:`._put`, :mod:`._copy`, :mod:`._upload`, :mod:`._listing`, each
through a narrow protocol of what it uses) share: the transport, with the
credential that signs each request (:mod:`._auth`: an account key's SAS, a
SAS given, a bearer token, or none); the blobs' URLs, and a copy source's
authorization; the ETag behind each generation handed out; and the two
requests every write, copy and delete ends with: Get Blob Properties and
Delete Blob. :class:`~._store.AzureStore` is the storage protocol on it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .._core.auth import AnonymousAuth, Auth
from .._core.checks.arguments import check_object
from .._core.checks.stated_counts import count_of
from .._core.errors import InvalidArgument, ProtocolError, describe
from .._core.metrics import RequestStats
from .._core.records.types import NO_METADATA, ObjectInfo
from .._core.settings.config import ClientConfig
from .._core.storage.base import StoreBase
from .._core.storage.etags import EtagMemory
from .._net.failures import drain
from .._net.transport import HttpResponse, Op, Transport
from ._auth import KeySas, Secrets, StaticSas, TokenAuth
from ._config import Settings
from ._transport import AzureTransport
from ._xml import (
    etag_of,
    generation_of,
    md5_base64,
    metadata_of,
    rfc3339,
    stored_crc32c,
)

__all__ = ["BlobService"]


class _NoSecrets:
    def secrets(self) -> list[str]:
        return []


class BlobService(StoreBase):
    """One account's Blob service: signed requests, blob URLs, version tokens.

    Args:
        config: client settings (concurrency, timeouts, retries).
        settings: the account, endpoint and credential resolved.
        credential: a token credential (None: ``DefaultAzureCredential``
            when the settings hold no key or SAS).
        anonymous: send requests without credentials.
        transport: a ready transport (tests inject a mock), used instead
            of one signing with the settings' credential.

    Raises:
        InvalidArgument: a bearer token over plain HTTP; a package of the
            ``azure`` extra missing.
    """

    def __init__(self, config: ClientConfig, settings: Settings, credential: Any,
                 anonymous: bool, transport: Transport | None) -> None:
        self.endpoint = settings.endpoint
        self.config = config
        self._etags = EtagMemory(generation_of, etag_of)
        self._auth: Any = None
        if transport is None:
            transport = self._transport_for(settings, credential, anonymous)
        self._transport = transport

    def _transport_for(self, settings: Settings, credential: Any,
                       anonymous: bool) -> Transport:
        auth: Auth
        secrets: Secrets
        sas = renew = None
        if anonymous:
            auth, secrets = AnonymousAuth(), _NoSecrets()
        elif settings.account_key and credential is None:
            key = KeySas(settings.account, settings.account_key)
            auth, sas, secrets, self._auth = key, key.query, key, key
            renew = key.renew
        elif settings.sas_token and credential is None:
            given = StaticSas(settings.sas_token)
            auth, sas, secrets, self._auth = given, given.query, given, given
        else:
            if not settings.endpoint.lower().startswith("https://"):
                raise InvalidArgument(f"AzureStore: {settings.endpoint} is plain HTTP, and "
                                      "Microsoft Entra ID tokens go over HTTPS only; give an "
                                      "account key or a SAS (an emulator's connection "
                                      "string), or anonymous=True")
            token = TokenAuth(credential)
            auth, secrets, self._auth = token, token, token
        return AzureTransport(self.config, auth, sas=sas, secrets=secrets, renew=renew,
                              endpoint=settings.endpoint, exact_urls=True)

    # -- addresses and version tokens ------------------------------------------------

    @property
    def transport(self) -> Transport:
        """The transport (its ``stats`` count requests and retries)."""
        return self._transport

    @property
    def stats(self) -> RequestStats:
        """What this store's requests did (``stats.summary()``)."""
        return self._transport.stats

    def container_url(self, container: str) -> str:
        """The URL of a container.

        Args:
            container: container name.

        Returns:
            ``<endpoint>/<container>``.
        """
        return f"{self.endpoint}/{container}"

    def blob_url(self, container: str, name: str) -> str:
        """The URL of a blob (its name percent-encoded).

        Args:
            container: container name.
            name: blob name.

        Returns:
            ``<endpoint>/<container>/<name>``.
        """
        return f"{self.endpoint}/{container}/{quote_name(name)}"

    def copy_source(self, container: str, name: str) -> tuple[str, dict[str, str]]:
        """The URL a Copy Blob names as its source, and headers authorizing
        it: a read-only SAS for that blob (account key), the SAS given, or
        none (a bearer token's ``x-ms-copy-source-authorization`` is added
        by :class:`TokenAuth` on each attempt, with that attempt's token).

        Args:
            container: source container.
            name: source blob.

        Returns:
            ``(url, headers)``.
        """
        url = self.blob_url(container, name)
        auth = self._auth
        if isinstance(auth, KeySas):
            return f"{url}?{auth.source_sas(container, name)}", {}
        if isinstance(auth, StaticSas):
            return f"{url}?{auth.query()}", {}
        return url, {}

    def remember(self, etag: str) -> int:
        """The generation of ``etag``; a hashed one is remembered, so that
        it maps back to its ETag.

        Args:
            etag: an ETag.

        Returns:
            Its generation.
        """
        return self._etags.remember(etag)

    async def etag_for(self, container: str, name: str, generation: int) -> str | None:
        """The ETag ``generation`` stands for: decoded, remembered, or the
        blob's own if its generation is that; None when it is not.

        Args:
            container: container name.
            name: blob name.
            generation: a generation.

        Returns:
            The ETag, or None.
        """
        return await self._etags.lookup(generation, lambda: self.stat(container, name))

    def info(self, container: str, name: str, *, size: int, etag: str, crc: int | None,
             md5: str | None = None, content_type: str | None = None,
             updated: str | None = None,
             metadata: dict[str, str] | None = None) -> ObjectInfo:
        """An ObjectInfo of this store.

        Args:
            container: container name.
            name: blob name.
            size: size in bytes.
            etag: the ETag (its generation is remembered).
            crc: crc32c, if known.
            md5: base64 MD5, if known.
            content_type: content type.
            updated: RFC 3339 time.
            metadata: custom metadata.

        Returns:
            The record.
        """
        return ObjectInfo(container, name, size, self.remember(etag), crc, md5, None,
                          content_type, updated, metadata or NO_METADATA, "az")

    # -- Get Blob Properties and Delete Blob -----------------------------------------

    async def head(self, container: str, name: str) -> tuple[ObjectInfo, dict[str, str]]:
        """Get Blob Properties: the metadata and the answer's headers.

        Args:
            container: container name.
            name: blob name.

        Returns:
            The ObjectInfo and the headers (lower-cased).

        Raises:
            NotFound: no such blob or container.
            StorageError: any other failure.
        """
        check_object("stat", container, name, scheme="az")

        async def handle(resp: HttpResponse) -> tuple[ObjectInfo, dict[str, str]]:
            h = {k.lower(): v for k, v in resp.headers.items()}
            length = h.get("content-length", "")
            size = count_of(length)
            if size is None:
                # A HEAD has no body to count: its Content-Length is all
                # that says how large the blob is (read as 0, a stat called
                # the blob empty and a read of it returned nothing).
                shown = f"Content-Length {length[:40]!r}" if length else "no Content-Length"
                raise ProtocolError(f"{describe('stat', container, name, 'az')} failed: the "
                                    f"answer gives {shown}, not the blob's size",
                                    operation="stat", bucket=container, name=name,
                                    status=resp.status)
            info = self.info(container, name, size=size,
                             etag=h.get("etag", ""), crc=stored_crc32c(h), md5=md5_base64(h),
                             content_type=h.get("content-type"),
                             updated=rfc3339(h.get("last-modified")), metadata=metadata_of(h))
            return info, h

        return await self._transport.request(Op("stat", container, name, "az"), "HEAD",
                                             self.blob_url(container, name), handle)

    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        return (await self.head(bucket, name))[0]

    async def delete_request(self, container: str, name: str, etag: str | None) -> None:
        """One Delete Blob (snapshots included), ``If-Match`` ``etag`` if given.

        Args:
            container: container name.
            name: blob name.
            etag: the ETag the blob must have, or None.

        Raises:
            NotFound: no such blob.
            PreconditionFailed: it has another ETag.
            StorageError: any other failure.
        """
        headers = {"x-ms-delete-snapshots": "include"}
        if etag:
            headers["If-Match"] = etag
        await self._transport.request(Op("delete", container, name, "az"), "DELETE",
                                      self.blob_url(container, name), drain, headers=headers,
                                      ok=(202,))


def quote_name(name: str) -> str:
    """A blob name as a URL path (every byte but the unreserved and ``/`` encoded)."""
    return quote(name, safe="/-_.~")
