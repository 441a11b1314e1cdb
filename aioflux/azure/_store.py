"""``AzureStore``: Azure Blob Storage (``az://`` URLs, and adlfs's ``abfs://``).

Requests go through aioflux's transport (one session per loop, the client's
semaphore, retries, lean reads) with Azure's rules (:mod:`._transport`):
the API version on every request, a SAS in the query or a bearer token
(:mod:`._auth`); :class:`~._service.BlobService`, which the store builds
on, holds them with the blobs' URLs and version tokens. Every read is
checked like a GCS one (status, ``Content-Range``, length, the crc32c
aioflux stored with the blob, else the blob's MD5); every write sends its
MD5, stores its crc32c and checks what the service kept.

- Version token: ``ObjectInfo.generation`` is the ETag as a number (see
  :mod:`._xml`). ``if_generation_match=0`` is ``If-None-Match: *``;
  another value is ``If-Match`` on that ETag; ``generation=`` on a read
  pins the ETag (a changed blob is ``NotFound``, as a gone generation is on
  GCS).
- Listings are List Blobs with metadata (:mod:`._listing`): no start or
  end offset on the server (``features.start_offset`` and ``end_offset``
  are False).
- Writes are Put Blob (:mod:`._put`), copies Copy Blob (:mod:`._copy`).
- Streaming uploads are Put Block + Put Block List (:mod:`._upload`); no
  compose, no XML multipart, no batch delete (Blob Batch signs each
  sub-request on its own; Azurite lacks it): deletes go one by one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from .._core.checks.arguments import (
    check_bool,
    check_instance,
    check_str,
    endpoint_url,
)
from .._core.errors import InvalidArgument, NotFound, PreconditionFailed, describe
from .._core.records.types import ListPage, ObjectInfo
from .._core.records.urls import validate_bucket
from .._core.settings.config import ClientConfig
from .._core.storage.protocol import Fetched, StoreFeatures, arguments_state, from_arguments
from .._engines.store_stream import StreamingStore
from .._net.failures import drain
from .._net.pinned import read_pinned
from .._net.transport import Op, Transport
from ._config import resolve
from ._copy import copy_blob
from ._listing import list_pages
from ._put import metadata_headers, put_blob
from ._service import BlobService
from ._upload import MAX_BLOCK_SIZE, MAX_BLOCKS, AzureUpload
from ._xml import ANSWERS, gone, lxml, precondition_failed

__all__ = ["FEATURES", "AzureStore"]

FEATURES = StoreFeatures(scheme="az", compose=0, end_offset=False, multipart=False,
                         min_part_size=1, part_granularity=1, max_parts=MAX_BLOCKS,
                         batch_delete=0, copy_limit=0, start_offset=False)


class AzureStore(BlobService, StreamingStore):
    """Azure Blob Storage as an ``ObjectStore``.

    Containers are the buckets; the account comes from the settings.

    Args:
        config: client settings (concurrency, timeouts, retries).
        account: the storage account (default: the connection string's,
            else ``AZURE_STORAGE_ACCOUNT_NAME``).
        endpoint: the blob service root, used as given (an emulator's:
            ``http://127.0.0.1:10000/devstoreaccount1``); default the
            connection string's, else ``https://<account>.blob.core.windows.net``.
        connection_string: an Azure connection string (default
            ``AZURE_STORAGE_CONNECTION_STRING``).
        account_key: the account key: requests carry SAS tokens signed
            with it (default ``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_KEY``).
        sas_token: a SAS token, used as given (default ``AZURE_STORAGE_SAS_TOKEN``).
        credential: an azure-identity (or azure-core) ``TokenCredential``
            or ``AsyncTokenCredential``; without a key or SAS,
            ``DefaultAzureCredential``. Bearer tokens go over HTTPS only.
        anonymous: send requests without credentials (public containers).
        transport: a ready transport (tests inject a mock); overrides
            ``config`` and the credentials.

    Raises:
        InvalidArgument: nothing names an account; more than one of
            ``account_key``, ``sas_token``, ``credential`` and ``anonymous``
            given; a bearer token over plain HTTP; a package of the ``azure``
            extra missing; a setting of the wrong type.
        InvalidURL: ``endpoint`` is not an http(s) URL.
    """

    _kind = "Azure"
    features = FEATURES
    __getstate__ = arguments_state
    __setstate__ = from_arguments

    def __init__(self, config: ClientConfig | None = None, *, account: str | None = None,
                 endpoint: str | None = None, connection_string: str | None = None,
                 account_key: str | None = None, sas_token: str | None = None,
                 credential: Any = None, anonymous: bool = False,
                 transport: Transport | None = None) -> None:
        check_instance("AzureStore", "config", config, ClientConfig, optional=True)
        for arg, value in (("account", account), ("connection_string", connection_string),
                           ("account_key", account_key), ("sas_token", sas_token)):
            check_str("AzureStore", arg, value, optional=True)
        check_bool("AzureStore", "anonymous", anonymous)
        # Two ways to sign in given as arguments is a mistake to say, not a
        # precedence to guess (ambient ones, from the environment or a
        # connection string, give way to an argument).
        ways = (("account_key", account_key), ("sas_token", sas_token),
                ("credential", credential), ("anonymous", anonymous or None))
        given = [arg for arg, value in ways if value is not None]
        if len(given) > 1:
            raise InvalidArgument(f"AzureStore: {' and '.join(given)} each say how to sign in; "
                                  "give one")
        endpoint = endpoint_url("AzureStore", endpoint)
        lxml()  # listings need it: named now, not at the first listing
        self._arguments = {"config": config, "account": account, "endpoint": endpoint,
                           "connection_string": connection_string, "account_key": account_key,
                           "sas_token": sas_token, "credential": credential,
                           "anonymous": anonymous}
        explicit = credential is not None or anonymous
        settings = resolve(account, endpoint, connection_string,
                           None if explicit else account_key, None if explicit else sas_token)
        self.account = settings.account
        super().__init__(config or (transport.config if transport else ClientConfig()),
                         settings, credential, anonymous, transport)

    def __repr__(self) -> str:
        return f"AzureStore({self.endpoint!r})"

    # -- lifecycle ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the store's connections of the current event loop, for good.

        Raises:
            InvalidArgument: (from later calls) the store is closed.
        """
        await self._transport.aclose(owner="AzureStore")

    # -- listing ---------------------------------------------------------------------

    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None,
               page_size: int, fields: str | None) -> AsyncIterator[ListPage]:
        # List Blobs, in Azure's order (UTF-16 code units, or a hierarchical
        # namespace's paths: not Python's). No offsets on the server: the
        # listing pages from the prefix and drops what is outside them.
        return list_pages(self, bucket, prefix, delimiter, start_offset, end_offset, page_size)

    # -- reads -----------------------------------------------------------------------

    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        # Get Blob, checked and resumed by read_media, pinned to the ETag
        # first served (a generation is its ETag, ``If-Match``).
        return await read_pinned(self._transport, Op("read", bucket, name, "az"),
                                 self.blob_url(bucket, name), generation=generation,
                                 etag_for=partial(self.etag_for, bucket, name), what="blob",
                                 reason="ConditionNotMet", start=start, end=end, into=into,
                                 size=size, crc=crc, verify=self.config.verify_crc32c,
                                 want_crc=want_crc, headers={}, answers=ANSWERS)

    # -- writes ----------------------------------------------------------------------

    async def _write(self, bucket: str, name: str, data: memoryview, content_type: str,
                     if_generation_match: int | None, metadata: dict[str, str] | None,
                     resumable: bool | None) -> ObjectInfo:
        # One Put Blob (at most 5,000 MiB), sent with its MD5 and checked.
        if resumable:
            raise InvalidArgument(f"write az://{bucket}/{name}: Azure has no resumable "
                                  "uploads; use start_upload (blocks) for large blobs")
        return await put_blob(self, bucket, name, data, content_type, if_generation_match,
                              metadata)

    def _start_upload(self, bucket: str, name: str, content_type: str, part_size: int,
                      metadata: dict[str, str] | None,
                      if_generation_match: int | None) -> AzureUpload:
        # Metadata Azure cannot keep, and a block size past its largest,
        # are refused now, not at a block.
        metadata_headers("start_upload", bucket, name, metadata)
        if not 1 <= part_size <= MAX_BLOCK_SIZE:
            raise InvalidArgument(f"start_upload az://{bucket}/{name}: part_size {part_size} "
                                  f"is outside Azure's 1..{MAX_BLOCK_SIZE} bytes")
        return AzureUpload(self, bucket, name, content_type, metadata, if_generation_match)

    # -- delete and copy -------------------------------------------------------------

    async def _delete(self, bucket: str, name: str, generation: int | None,
                      if_generation_match: int | None, missing_ok: bool) -> None:
        # Delete Blob with its snapshots; a generation or precondition is
        # the blob's ETag, ``If-Match``.
        op = Op("delete", bucket, name, "az")
        etag = None
        missing = NotFound(f"{describe('delete', bucket, name, 'az')} failed: no such blob",
                           operation="delete", bucket=bucket, name=name, status=404,
                           reason="BlobNotFound")
        if generation is not None and if_generation_match not in (None, generation):
            # At most one of the two is the blob's version, and If-Match on
            # the precondition's ETag would delete the current blob whatever
            # the generation: the generation is checked first (as on the
            # other stores), and the precondition then cannot hold.
            try:
                current: int | None = (await self.stat(bucket, name)).generation
            except NotFound:
                current = None
            if current != generation:
                if missing_ok:
                    return
                raise missing if current is None else gone(op, generation)
            raise precondition_failed(op, if_generation_match)
        for pin, failed in ((generation, gone), (if_generation_match, precondition_failed)):
            if pin is not None:
                etag = await self.etag_for(bucket, name, pin)
                if etag is None:
                    if failed is gone and missing_ok:
                        return  # that generation is gone already
                    if not await self.exists(bucket, name):
                        if missing_ok:
                            return
                        raise missing
                    raise failed(op, pin)
        try:
            await self.delete_request(bucket, name, etag)
        except NotFound as exc:
            # A 404 to a retry: the attempt before it (its answer lost, or
            # a 500 after the work) may have deleted the blob; gone is what
            # was asked, as on GCS.
            if not missing_ok and exc.attempts < 2:
                raise
        except PreconditionFailed as exc:
            # So may a 412 to a retry pinned to the blob's ETag (Azurite
            # answers If-Match on a blob gone meanwhile 412, not 404): a
            # blob gone since is that delete's.
            if exc.attempts >= 2 and etag is not None \
                    and not await self.exists(bucket, name):
                return
            if generation is None:
                raise
            if not missing_ok:
                raise gone(op, generation) from exc

    async def _copy(self, bucket: str, name: str, dest_bucket: str,
                    dest_name: str) -> ObjectInfo:
        return await copy_blob(self, bucket, name, dest_bucket, dest_name)  # Copy Blob, checked

    async def create_bucket(self, bucket: str) -> None:
        """Create a container.

        Args:
            bucket: container name.

        Raises:
            Conflict: it exists already.
            StorageError: any other failure.
        """
        validate_bucket(bucket, scheme="az")
        await self._transport.request(Op("create_bucket", bucket, "", "az"), "PUT",
                                      f"{self.container_url(bucket)}?restype=container", drain,
                                      ok=(201,))
