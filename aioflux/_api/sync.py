"""``Client``: the blocking twin of ``aioflux.AsyncClient``.

Every method runs the async one on the process's portal loop. A Client can
be pickled (DataLoader workers under ``spawn``): it is rebuilt from its
settings on the other side, and after ``fork`` it rebuilds its connections
lazily, because the portal and the transport both check the process id.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from .._core.config import ClientConfig
from .._core.metrics import RequestStats
from .._core.portal import get_portal, iterate
from .._core.store import Buffer, SourceSpec
from .._core.types import LIST_FIELDS, ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from .._core.validate import (
    Credentials,
    check_credentials,
    check_instance,
    check_str,
    endpoint_url,
    list_args,
)
from .._engines.download import DownloadOptions
from .._net.transport import Transport
from ..gcs._client import AsyncClient

if TYPE_CHECKING:
    from .._engines.iterables import StreamItem

__all__ = ["Client"]


class Client:
    """Blocking GCS client: the twin of ``aioflux.AsyncClient``.

    Every public ``AsyncClient`` method has a blocking method here with the
    same parameters (a test holds them to it).

    Args:
        config: client settings (concurrency, timeouts, retries).
        endpoint: API root (defaults to ``STORAGE_EMULATOR_HOST`` or GCS).
        credentials: ``None`` (Application Default Credentials, anonymous on
            an emulator), ``"anonymous"``, a bearer-token string, an ``Auth``
            or google-auth credentials (must pickle to cross to ``spawn``
            workers).
        project: project for bucket creation.
        user_project: the project every request bills, as requester-pays
            buckets require (see ``aioflux.AsyncClient``).

    Raises:
        InvalidArgument: a setting of the wrong type, or a ``user_project``
            that is no project ID.
        InvalidURL: ``endpoint`` is not an http(s) URL.
    """

    def __init__(self, config: ClientConfig | None = None, *, endpoint: str | None = None,
                 credentials: Credentials = None, project: str = "aioflux",
                 user_project: str | None = None) -> None:
        check_instance("Client", "config", config, ClientConfig, optional=True)
        endpoint = endpoint_url("Client", endpoint)
        check_credentials("Client", credentials)
        check_str("Client", "project", project)
        self.aio = AsyncClient(config, endpoint=endpoint, credentials=credentials,
                               project=project, user_project=user_project)
        # The project travels with a pickle: a spawned worker bills the same one.
        self._settings = {"config": config, "endpoint": endpoint, "credentials": credentials,
                          "project": project, "user_project": self.aio.user_project}

    @property
    def transport(self) -> Transport:
        """The async client's transport (its ``stats`` count requests and retries)."""
        return self.aio.transport

    @property
    def stats(self) -> RequestStats:
        """What this client's requests did: counts, retries by cause, bytes,
        and latency per operation (``stats.summary()`` for p50/p95/p99)."""
        return self.aio.stats

    @property
    def config(self) -> ClientConfig:
        """The client's settings."""
        return self.aio.config

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._settings)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the client's connections, for good: a later call raises
        InvalidArgument instead of reopening them. Closing again does nothing."""
        get_portal().call(self.aio.aclose())

    def __del__(self) -> None:
        # A forgotten close() must not leak a connector warning at GC time:
        # close on the portal loop without waiting (best effort at exit).
        aio = getattr(self, "aio", None)
        if aio is None or aio.transport.idle:
            return
        try:
            portal = get_portal()
            if not portal.in_loop_thread():
                # The connections only: ``aio`` may live on without this
                # wrapper (CheckpointManager(client=Client(...)) keeps it).
                portal.submit(aio.transport.aclose())
        except Exception:  # interpreter shutdown: nothing left to close with
            return

    def stat(self, bucket: str, name: str) -> ObjectInfo:
        """Fetch an object's metadata.

        Args:
            bucket: bucket name.
            name: object name.

        Returns:
            ObjectInfo.

        Raises:
            InvalidURL: a malformed bucket or name.
            NotFound: no such object or bucket.
            StorageError: any other failure.
        """
        return get_portal().call(self.aio.stat(bucket, name))

    def exists(self, bucket: str, name: str) -> bool:
        """Whether an object exists.

        Args:
            bucket: bucket name.
            name: object name.

        Returns:
            True if it exists.

        Raises:
            InvalidURL: a malformed bucket or name.
            StorageError: a failure other than 404.
        """
        return get_portal().call(self.aio.exists(bucket, name))

    def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
             start_offset: str | None = None, end_offset: str | None = None,
             page_size: int = 1000, fields: str | None = LIST_FIELDS) -> Iterator[ListPage]:
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
            An iterator of ListPage, fetched as it is consumed.

        Raises:
            InvalidURL: a malformed bucket (at once).
            InvalidArgument: a setting of the wrong type (at once).
            NotFound: no such bucket (while iterating).
            StorageError: any other failure (while iterating).
        """
        list_args("list", bucket, prefix, delimiter=delimiter, start_offset=start_offset,
                  end_offset=end_offset, page_size=page_size, fields=fields)
        return iterate(self.aio.list(bucket, prefix, delimiter=delimiter,
                                     start_offset=start_offset, end_offset=end_offset,
                                     page_size=page_size, fields=fields), batch=1)

    def list_objects(self, bucket: str, prefix: str = "", *, start_offset: str | None = None,
                     end_offset: str | None = None,
                     fields: str | None = LIST_FIELDS) -> Iterator[ObjectInfo]:
        """List objects one by one (all pages, no delimiter).

        Args:
            bucket: bucket name.
            prefix: only names starting with this.
            start_offset: first name (inclusive).
            end_offset: end (exclusive).
            fields: JSON ``fields`` selector.

        Returns:
            An iterator of ObjectInfo in lexicographic name order.

        Raises:
            InvalidURL: a malformed bucket (at once).
            InvalidArgument: a setting of the wrong type (at once).
            StorageError: listing failed (while iterating).
        """
        pages = self.list(bucket, prefix, start_offset=start_offset, end_offset=end_offset,
                          fields=fields)
        return (obj for page in pages for obj in page.objects)

    def stream(self, bucket: str, prefix: str = "", *, concurrency: int | None = None,
               ordered: bool = False, list_concurrency: int | None = None,
               options: DownloadOptions | None = None,
               cache_dir: str | os.PathLike[str] | None = None,
               cache_limit: int | None = None) -> Iterator[StreamItem]:
        """List ``prefix`` in parallel and download each object as it is listed.

        ``for item in client.stream("gs://b/p"): item.name, item.data``; the
        work runs on the portal loop, ready items cross in batches. Leaving
        the loop early cancels the downloads in flight.

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
            An iterator of StreamItem (``.name``, ``.data``, ``.info``).

        Raises:
            InvalidURL: a malformed bucket or URL (at once).
            InvalidArgument: a setting of the wrong type (at once).
            StorageError: listing or a download failed (while iterating).
        """
        agen = self.aio.stream(bucket, prefix, concurrency=concurrency, ordered=ordered,
                               list_concurrency=list_concurrency, options=options,
                               cache_dir=cache_dir, cache_limit=cache_limit)
        # The stream holds at most prefetch_bytes ahead of whoever consumes
        # it, here the pump to this thread: the ready items the pump queues
        # for the next hop get a quarter more (as IterableDataset's), not 64
        # objects whatever their size (a slow consumer of 256 MiB objects
        # would have 16 GiB downloaded behind it).
        budget = (options or DownloadOptions()).prefetch_bytes
        return iterate(agen, batch=64, nbytes=_item_bytes, max_bytes=max(1, budget // 4))

    @overload
    def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
             into: None = ..., generation: int | None = ...) -> bytes: ...

    @overload
    def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
             into: Buffer, generation: int | None = ...) -> int: ...

    def read(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
             into: Buffer | None = None, generation: int | None = None) -> bytes | int:
        """Read an object, or the byte range ``[start, end)`` of it.

        Whole-object reads are checked against the object's crc32c; ranged
        reads against the expected length. Both are retried when truncated.

        Args:
            bucket: bucket name.
            name: object name.
            start: first byte.
            end: end (exclusive); ``None`` reads to the end of the object.
            into: write the bytes into this writable buffer instead of
                returning them.
            generation: read this generation (pins the version).

        Returns:
            The bytes, or the count of bytes written when ``into`` is given.

        Raises:
            InvalidURL: a malformed bucket or name.
            InvalidArgument: a bad range, a read-only or too small ``into``.
            NotFound: no such object (or generation).
            ChecksumMismatch: the body was corrupt on every attempt.
            StorageError: any other failure.
        """
        portal = get_portal()
        if into is None:
            return portal.call(self.aio.read(bucket, name, start=start, end=end,
                                             generation=generation))
        return portal.call(self.aio.read(bucket, name, start=start, end=end, into=into,
                                         generation=generation))

    def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
              content_type: str = "application/octet-stream",
              if_generation_match: int | None = None, metadata: dict[str, str] | None = None,
              resumable: bool | None = None) -> ObjectInfo:
        """Upload ``data`` as an object, with its crc32c checked by the server.

        Args:
            bucket: bucket name.
            name: object name.
            data: the content.
            content_type: Content-Type to store.
            if_generation_match: precondition; 0 means "must not exist yet".
            metadata: custom metadata.
            resumable: force (True) or forbid (False) a resumable upload;
                by default resumable above 16 MiB.

        Returns:
            ObjectInfo of the new object.

        Raises:
            InvalidURL: a malformed bucket or name.
            InvalidArgument: an argument of the wrong type.
            PreconditionFailed: ``if_generation_match`` did not hold.
            ChecksumMismatch: the stored crc32c differs from the data's.
            StorageError: any other failure.
        """
        return get_portal().call(self.aio.write(
            bucket, name, data, content_type=content_type,
            if_generation_match=if_generation_match, metadata=metadata, resumable=resumable))

    def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec], *,
                if_generation_match: int | None = None,
                content_type: str = "application/octet-stream") -> ObjectInfo:
        """Concatenate up to 32 objects of ``bucket`` into ``destination``.

        Args:
            bucket: bucket name.
            destination: name of the composite.
            sources: names, ``(name, generation)`` pairs or ObjectInfo; a
                known generation becomes a precondition.
            if_generation_match: precondition on the destination.
            content_type: Content-Type of the composite.

        Returns:
            ObjectInfo of the composite (with its crc32c).

        Raises:
            InvalidURL: a malformed bucket or name.
            InvalidArgument: zero or more than 32 sources, or a wrong type.
            PreconditionFailed: a source or the destination changed.
            NotFound: a source is missing.
            StorageError: any other failure.
        """
        return get_portal().call(self.aio.compose(
            bucket, destination, sources, if_generation_match=if_generation_match,
            content_type=content_type))

    def delete(self, bucket: str, name: str, *, generation: int | None = None,
               if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        """Delete an object.

        Args:
            bucket: bucket name.
            name: object name.
            generation: delete this generation only.
            if_generation_match: precondition.
            missing_ok: treat "already gone" (404) as success.

        Raises:
            InvalidURL: a malformed bucket or name.
            NotFound: no such object (unless ``missing_ok``).
            StorageError: any other failure.
        """
        get_portal().call(self.aio.delete(bucket, name, generation=generation,
                                          if_generation_match=if_generation_match,
                                          missing_ok=missing_ok))

    def copy(self, bucket: str, name: str, dest_bucket: str, dest_name: str) -> ObjectInfo:
        """Copy an object server-side (no bytes pass through this process).

        Args:
            bucket: source bucket.
            name: source object.
            dest_bucket: destination bucket.
            dest_name: destination object.

        Returns:
            ObjectInfo of the copy.

        Raises:
            InvalidURL: a malformed bucket or name.
            NotFound: the source is missing.
            StorageError: any other failure.
        """
        return get_portal().call(self.aio.copy(bucket, name, dest_bucket, dest_name))

    def create_bucket(self, bucket: str) -> None:
        """Create a bucket in the client's project.

        Args:
            bucket: bucket name.

        Raises:
            InvalidURL: a malformed bucket name.
            Conflict: it exists already.
            StorageError: any other failure.
        """
        get_portal().call(self.aio.create_bucket(bucket))

    def initiate_multipart(self, bucket: str, name: str, *,
                           content_type: str = "application/octet-stream",
                           metadata: dict[str, str] | None = None) -> str:
        """Start an XML multipart upload; nothing is visible until completion.

        Args:
            bucket: bucket name.
            name: object name.
            content_type: Content-Type of the final object.
            metadata: custom metadata of the final object (``x-goog-meta-*``).

        Returns:
            The upload id.

        Raises:
            StorageError: the server refused (fake-gcs-server has no XML
                multipart upload).
        """
        return get_portal().call(self.aio.initiate_multipart(bucket, name,
                                                             content_type=content_type,
                                                             metadata=metadata))

    def upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                    data: bytes | bytearray | memoryview,
                    checksum: int | None = None) -> PartInfo:
        """Upload one part, its crc32c checked by the server.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: from ``initiate_multipart``.
            part_number: 1..10000.
            data: the part (>= 5 MiB unless it is the last).
            checksum: the part's crc32c if known; computed otherwise.

        Returns:
            PartInfo with the part's ETag.

        Raises:
            InvalidArgument: part number out of range.
            StorageError: the upload failed.
        """
        return get_portal().call(self.aio.upload_part(bucket, name, upload_id, part_number, data,
                                                      checksum))

    def complete_multipart(self, bucket: str, name: str, upload_id: str,
                           parts: Sequence[PartInfo]) -> dict[str, str]:
        """Publish the object from its parts, in part-number order.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: the upload.
            parts: every uploaded part.

        Returns:
            Response headers of interest (``x-goog-hash``, ``x-goog-generation``).

        Raises:
            InvalidRequest: parts missing, out of order, or too small.
            StorageError: any other failure.
        """
        return get_portal().call(self.aio.complete_multipart(bucket, name, upload_id, parts))

    def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Abort an upload and drop its parts.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: the upload.

        Raises:
            NotFound: no such upload.
            StorageError: any other failure.
        """
        get_portal().call(self.aio.abort_multipart(bucket, name, upload_id))

    def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """List the parts uploaded so far.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: the upload.

        Returns:
            PartInfo in part-number order.

        Raises:
            NotFound: no such upload.
            StorageError: any other failure.
        """
        return get_portal().call(self.aio.list_parts(bucket, name, upload_id))

    def list_multipart_uploads(self, bucket: str,
                               prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """List open multipart uploads (for cleaning up after killed writers).

        Args:
            bucket: bucket name.
            prefix: only uploads of names starting with this.

        Returns:
            MultipartUploadInfo for each open upload.

        Raises:
            StorageError: the listing failed.
        """
        return get_portal().call(self.aio.list_multipart_uploads(bucket, prefix))


def _item_bytes(item: StreamItem) -> int:
    return len(item.data)
