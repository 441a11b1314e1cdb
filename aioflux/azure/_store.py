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

import builtins
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any, overload

from .._core.config import ClientConfig
from .._core.errors import (
    InvalidArgument,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    describe,
)
from .._core.store import Buffer, Fetched, SourceSpec, StoreFeatures, objects_of
from .._core.types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from .._core.urls import validate_bucket
from .._core.validate import (
    check_bool,
    check_content_type,
    check_instance,
    check_int,
    check_metadata,
    check_object,
    check_str,
    delete_args,
    endpoint_url,
    list_args,
    read_args,
    write_args,
)
from .._engines.cache import cache_from_args
from .._engines.download import DownloadOptions
from .._engines.iterables import StreamItem, stream, stream_args
from .._net.failures import drain
from .._net.media import read_media
from .._net.transport import Op, Transport
from ._config import resolve
from ._copy import copy_blob
from ._listing import list_pages
from ._put import metadata_headers, put_blob
from ._service import BlobService
from ._upload import MAX_BLOCK_SIZE, MAX_BLOCKS, AzureUpload
from ._xml import ANSWERS, gone, precondition_failed, require_lxml

__all__ = ["FEATURES", "AzureStore"]

FEATURES = StoreFeatures(scheme="az", compose=0, end_offset=False, multipart=False,
                         min_part_size=1, part_granularity=1, max_parts=MAX_BLOCKS,
                         batch_delete=0, copy_limit=0, start_offset=False)


class AzureStore(BlobService):
    """Azure Blob Storage as an :class:`~aioflux._core.store.ObjectStore`.

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
        require_lxml()  # listings need it: named now, not at the first listing
        self._settings = (config, account, endpoint, connection_string, account_key,
                          sas_token, credential, anonymous)
        explicit = credential is not None or anonymous
        settings = resolve(account, endpoint, connection_string,
                           None if explicit else account_key, None if explicit else sas_token)
        self.account = settings.account
        super().__init__(config or (transport.config if transport else ClientConfig()),
                         settings, credential, anonymous, transport)

    def __repr__(self) -> str:
        return f"AzureStore({self.endpoint!r})"

    def __getstate__(self) -> dict[str, object]:
        # By settings: sessions and tokens belong to this process
        # (DataLoader workers make their own).
        return {"settings": self._settings}

    def __setstate__(self, state: dict[str, object]) -> None:
        settings = state["settings"]
        assert isinstance(settings, tuple)
        config, account, endpoint, conn, key, sas, credential, anonymous = settings
        self.__init__(config, account=account, endpoint=endpoint,  # type: ignore[misc]
                      connection_string=conn, account_key=key, sas_token=sas,
                      credential=credential, anonymous=anonymous)

    @property
    def features(self) -> StoreFeatures:
        """Block uploads; no compose, no server-side offsets, no batch delete."""
        return FEATURES

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> AzureStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store's connections of the current event loop, for good.

        Raises:
            InvalidArgument: (from later calls) the store is closed.
        """
        await self._transport.aclose(owner="AzureStore")

    # -- listing ---------------------------------------------------------------------

    def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
             start_offset: str | None = None, end_offset: str | None = None,
             page_size: int = 1000) -> AsyncIterator[ListPage]:
        """List blobs page by page (List Blobs), in Azure's order (UTF-16
        code units, or a hierarchical namespace's paths: not Python's).

        Args:
            bucket: container name.
            prefix: only names starting with this.
            delimiter: group names by this (``"/"``), reported as prefixes.
            start_offset: first name (inclusive); Azure has none, so the
                listing pages from the prefix and drops what is below.
            end_offset: end (exclusive); the listing drops what is at or past
                it (pages on to the prefix's end: Azure's order is not the offsets').
            page_size: names per request (Azure caps it at 5,000).

        Returns:
            An async iterator of ListPage, fetched as it is consumed.

        Raises:
            InvalidURL: a malformed container (at once).
            InvalidArgument: a setting of the wrong type (at once).
            NotFound: no such container (while iterating).
            StorageError: any other failure (while iterating).
        """
        list_args("list", bucket, prefix, delimiter=delimiter, start_offset=start_offset,
                  end_offset=end_offset, page_size=page_size, scheme="az")
        return list_pages(self, bucket, prefix, delimiter, start_offset, end_offset, page_size)

    def list_objects(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                     end_offset: str | None = None) -> AsyncIterator[ObjectInfo]:
        """List blobs one by one (all pages, no delimiter).

        Args:
            bucket: container name.
            prefix: only names starting with this.
            start_offset: first name (inclusive).
            end_offset: end (exclusive).

        Returns:
            An async iterator of ObjectInfo in Azure's order (see :meth:`list`).

        Raises:
            InvalidURL: a malformed container (at once).
            StorageError: listing failed (while iterating).
        """
        return objects_of(self.list(bucket, prefix, start_offset=start_offset,
                                    end_offset=end_offset))

    def stream(self, bucket: str, prefix: str = "", *, concurrency: int | None = None,
               ordered: bool = False, list_concurrency: int | None = None,
               options: DownloadOptions | None = None,
               cache_dir: str | os.PathLike[str] | None = None,
               cache_limit: int | None = None) -> AsyncIterator[StreamItem]:
        """List ``prefix`` and download each blob as it is listed (see
        :meth:`aioflux.AsyncClient.stream`).

        Args:
            bucket: container name or an ``az://container/prefix`` URL.
            prefix: only names starting with this.
            concurrency: downloads in flight (``None``: 64).
            ordered: yield in listing order; else as downloads complete.
            list_concurrency: parallel listers (``None``: 16).
            options: DownloadOptions of the planner.
            cache_dir: a local disk cache across passes.
            cache_limit: most bytes in ``cache_dir``; None: no limit.

        Returns:
            An async iterator of StreamItem.

        Raises:
            InvalidURL: a malformed container or URL (at once).
            StorageError: listing or a download failed (while iterating).
        """
        stream_args("stream", bucket, prefix, concurrency, ordered, list_concurrency, options)
        cache = cache_from_args("stream", cache_dir, cache_limit)
        return stream(self, bucket, prefix, concurrency=concurrency, ordered=ordered,
                      list_concurrency=list_concurrency, options=options, cache=cache)

    # -- reads -----------------------------------------------------------------------

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: None = ..., generation: int | None = ...) -> bytes: ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: Buffer, generation: int | None = ...) -> int: ...

    async def read(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                   into: Buffer | None = None, generation: int | None = None) -> bytes | int:
        """Read a blob, or the byte range ``[start, end)`` of it (Get Blob).

        Args:
            bucket: container name.
            name: blob name.
            start: first byte.
            end: end (exclusive); ``None`` reads to the end.
            into: write the bytes into this buffer instead of returning them.
            generation: read only this version (its ETag, ``If-Match``).

        Returns:
            The bytes, or their count when ``into`` is given.

        Raises:
            NotFound: no such blob, or it is no longer that generation.
            InvalidArgument: bad range, or ``into`` too small.
            InvalidRequest: ``start`` past the end (416).
            ChecksumMismatch: the body was corrupt on every attempt.
            ProtocolError: another range or body than asked for.
            StorageError: any other failure.
        """
        read_args(bucket, name, start, end, into, generation, scheme="az")
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
        """A checked, resumable read (:func:`aioflux._net.media.read_media`).

        Args:
            bucket: container name.
            name: blob name.
            start: first byte.
            end: byte after the last (None: the end of the blob).
            into: a buffer to fill (None: a new one).
            generation: read this version only (its ETag, ``If-Match``).
            size: the blob's size if known (listing, stat).
            crc: the blob's crc32c if known.
            want_crc: return the crc32c of the bytes read.

        Returns:
            The bytes (or count written into ``into``) and their crc32c.

        Raises:
            NotFound: no such blob, or it is no longer that generation (or
                was replaced while it was read).
            ChecksumMismatch: the bytes differ from ``crc`` or the stored checksum.
            ProtocolError: another range or body than asked for, or a range
                starting below ``size`` refused as past the end (416: the
                blob is shorter than ``size``, which the message names).
            InvalidRequest: ``start`` past the end (416; at or past ``size``
                when given).
            StorageError: any other failure.
        """
        op = Op("read", bucket, name, "az")
        headers: dict[str, str] = {}
        if generation is not None:
            etag = await self.etag_for(bucket, name, generation)
            if etag is None:
                raise gone(op, generation)
            headers["If-Match"] = etag
        try:
            return await read_media(self._transport, op, self.blob_url(bucket, name),
                                    start=start, end=end, into=into, size=size, crc=crc,
                                    verify=self.config.verify_crc32c, want_crc=want_crc,
                                    headers=headers, answers=ANSWERS, version=generation)
        except PreconditionFailed as exc:
            if generation is not None:
                raise gone(op, generation) from exc
            raise NotFound(f"{describe('read', bucket, name, 'az')} failed: the blob was "
                           "replaced while it was read", operation="read", bucket=bucket,
                           name=name, status=412, reason="ConditionNotMet") from exc

    # -- writes ----------------------------------------------------------------------

    async def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
                    content_type: str = "application/octet-stream",
                    if_generation_match: int | None = None,
                    metadata: dict[str, str] | None = None,
                    resumable: bool | None = None) -> ObjectInfo:
        """Store ``data`` in one Put Blob, sent with its MD5 and checked.

        Args:
            bucket: container name.
            name: blob name.
            data: the content (at most 5,000 MiB: use :meth:`start_upload` beyond).
            content_type: Content-Type to store.
            if_generation_match: 0: only if absent (``If-None-Match: *``);
                else only if the blob is that generation (``If-Match``).
            metadata: custom metadata (``x-ms-meta-*``; lower-case identifiers).
            resumable: must be None or False (Azure has no resumable sessions).

        Returns:
            ObjectInfo of the new blob.

        Raises:
            PreconditionFailed: ``if_generation_match`` did not hold.
            ChecksumMismatch: the service stored other bytes (that version
                was deleted).
            InvalidArgument: ``resumable=True``, or ``metadata`` Azure
                cannot keep.
            StorageError: any other failure (nothing is published).
        """
        write_args(bucket, name, data, content_type, if_generation_match, metadata, resumable,
                   scheme="az")
        if resumable:
            raise InvalidArgument(f"write az://{bucket}/{name}: Azure has no resumable "
                                  "uploads; use start_upload (blocks) for large blobs")
        return await put_blob(self, bucket, name, memoryview(data).cast("B"), content_type,
                              if_generation_match, metadata)

    def start_upload(self, bucket: str, name: str, *,
                     content_type: str = "application/octet-stream",
                     part_size: int = 8 * 1024 * 1024,
                     metadata: dict[str, str] | None = None,
                     if_generation_match: int | None = None) -> AzureUpload:
        """A streaming upload in blocks, for the writer engine.

        Args:
            bucket: container name.
            name: blob name.
            content_type: Content-Type of the final blob.
            part_size: size of every block but the last (at most 4,000 MiB).
            metadata: custom metadata of the final blob.
            if_generation_match: publish only if the blob is then this
                generation (``0``: absent), checked by the Put Block List
                (or single Put Blob) itself.

        Returns:
            The upload; nothing is sent before its first block.

        Raises:
            InvalidArgument: ``part_size`` outside 1 byte to 4,000 MiB,
                ``metadata`` Azure cannot keep, or an argument of the wrong type.
        """
        check_object("start_upload", bucket, name, scheme="az")
        # Checked here, not left to the commit: a generation or content type
        # of the wrong kind would fail there, untyped, after every block was sent.
        check_content_type("start_upload", content_type)
        check_int("start_upload", "part_size", part_size, minimum=None)
        check_metadata("start_upload", "metadata", metadata)
        check_int("start_upload", "if_generation_match", if_generation_match, optional=True)
        metadata_headers("start_upload", bucket, name, metadata)  # refused now, not at a block
        if not 1 <= part_size <= MAX_BLOCK_SIZE:
            raise InvalidArgument(f"start_upload az://{bucket}/{name}: part_size {part_size} "
                                  f"is outside Azure's 1..{MAX_BLOCK_SIZE} bytes")
        return AzureUpload(self, bucket, name, content_type, metadata, if_generation_match)

    async def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec], *,
                      if_generation_match: int | None = None,
                      content_type: str = "application/octet-stream") -> ObjectInfo:
        """Azure has no compose (``features.compose == 0``).

        Args:
            bucket: container name.
            destination: the blob that would be written.
            sources: the blobs that would be joined.
            if_generation_match: the destination's precondition.
            content_type: the destination's Content-Type.

        Returns:
            Nothing: it always raises.

        Raises:
            InvalidRequest: always.
        """
        raise InvalidRequest(f"compose az://{bucket}/{destination}: Azure cannot concatenate "
                             "blobs server-side (features.compose is 0)", operation="compose",
                             bucket=bucket, name=destination, reason="unsupported")

    # -- delete and copy -------------------------------------------------------------

    async def delete(self, bucket: str, name: str, *, generation: int | None = None,
                     if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        """Delete a blob (that generation only, if given) and its snapshots.

        Args:
            bucket: container name.
            name: blob name.
            generation: delete only this version (else NotFound).
            if_generation_match: precondition (else PreconditionFailed).
            missing_ok: treat "already gone" as success: the blob, or the
                generation asked for (replaced since), as on GCS. A blob
                found gone by a retried attempt is success either way (the
                attempt before it, its answer lost, may have deleted it).

        Raises:
            NotFound: no such blob, or not that generation (unless ``missing_ok``).
            PreconditionFailed: ``if_generation_match`` did not hold.
            StorageError: any other failure.
        """
        delete_args(bucket, name, generation, if_generation_match, missing_ok, scheme="az")
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

    async def copy(self, bucket: str, name: str, dest_bucket: str, dest_name: str) -> ObjectInfo:
        """Copy a blob within the account (Copy Blob), checked.

        Args:
            bucket: source container.
            name: source blob.
            dest_bucket: destination container.
            dest_name: destination blob.

        Returns:
            ObjectInfo of the copy.

        Raises:
            NotFound: the source is missing.
            PreconditionFailed: the source was replaced while it was copied.
            ChecksumMismatch: the copy differs from the source (it was deleted).
            StorageError: any other failure.
        """
        check_object("copy", bucket, name, scheme="az")
        check_object("copy", dest_bucket, dest_name, bucket_arg="dest_bucket",
                     name_arg="dest_name", scheme="az")
        return await copy_blob(self, bucket, name, dest_bucket, dest_name)

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

    # -- what blocks are not ---------------------------------------------------------

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """None: uncommitted blocks are no upload a request can list or drop
        (the service drops them a week after their upload).

        Args:
            bucket: container name.
            prefix: blob name prefix.

        Returns:
            An empty list.
        """
        validate_bucket(bucket, scheme="az")
        return []

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Not offered (``features.multipart`` is False).

        Args:
            bucket: container name.
            name: blob name.
            upload_id: the upload.

        Raises:
            InvalidRequest: always.
        """
        raise InvalidRequest(f"abort multipart upload az://{bucket}/{name}: Azure has no "
                             "multipart uploads (features.multipart is False)",
                             operation="abort multipart upload", bucket=bucket, name=name,
                             reason="unsupported")

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """Not offered (``features.multipart`` is False).

        Args:
            bucket: container name.
            name: blob name.
            upload_id: the upload.

        Returns:
            Nothing: it always raises.

        Raises:
            InvalidRequest: always.
        """
        raise InvalidRequest(f"list parts az://{bucket}/{name}: Azure has no multipart "
                             "uploads (features.multipart is False)", operation="list parts",
                             bucket=bucket, name=name, reason="unsupported")
