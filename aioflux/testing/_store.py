"""In-memory object store behind the emulator.

Per bucket, object names are kept in a sorted list (``bisect``) next to a
dict of records, so a list page costs O(log n + page) however large the
bucket grows -- fake-gcs-server scans the whole bucket on every page, which
is exactly what benchmarks of fast listing must not measure.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aioflux.testing import _errors as err
from aioflux.testing._records import (
    Bucket,
    MultipartUpload,
    ObjectRecord,
    Preconditions,
    ResumableSession,
    b64_crc32c,
    b64_md5,
    rfc3339,
)
from aioflux.testing._rope import Rope

if TYPE_CHECKING:
    from aioflux.testing._s3_common import S3Records

__all__ = [
    "Bucket",
    "MultipartUpload",
    "ObjectRecord",
    "Preconditions",
    "ResumableSession",
    "Store",
    "b64_crc32c",
    "b64_md5",
    "rfc3339",
]

_ids = itertools.count(1)


class Store:
    """The emulator's buckets, objects, multipart uploads and resumable sessions.

    All methods are synchronous and finish without awaiting, so on one event
    loop every store operation is atomic.
    """

    def __init__(self) -> None:
        self.buckets: dict[str, Bucket] = {}
        self.uploads: dict[str, MultipartUpload] = {}
        self.sessions: dict[str, ResumableSession] = {}
        # What the S3 face knows beyond these records (checksum algorithms,
        # stored headers, regions), set by the first S3 face over this store:
        # kept here, an emulator restarted on the store keeps it too.
        self.s3: S3Records | None = None
        self._last_generation = 0

    # -- buckets ---------------------------------------------------------

    def create_bucket(self, name: str, *, requester_pays: bool = False) -> Bucket:
        """Create a bucket.

        Args:
            name: 3-63 characters.
            requester_pays: every request to it must name a project to bill.

        Raises:
            ApiError: 409 if it exists, 400 if the name is not 3-63 characters.
        """
        if not 3 <= len(name) <= 63:
            raise err.invalid(f"Invalid bucket name: '{name}'")
        if name in self.buckets:
            raise err.bucket_exists(name)
        bucket = Bucket(name, rfc3339(time.time_ns()), requester_pays=requester_pays)
        self.buckets[name] = bucket
        return bucket

    def bucket(self, name: str) -> Bucket:
        """Return a bucket.

        Raises:
            ApiError: 404 NoSuchBucket.
        """
        try:
            return self.buckets[name]
        except KeyError:
            raise err.no_such_bucket(name) from None

    def delete_bucket(self, name: str, *, force: bool = False) -> None:
        """Delete a bucket (and, with ``force``, its objects and uploads).

        Raises:
            ApiError: 404 if missing, 409 if not empty and not ``force``.
        """
        bucket = self.bucket(name)
        if bucket.names and not force:
            raise err.bucket_not_empty(name)
        del self.buckets[name]
        # Copied before the walk: called from a test's thread, these dicts
        # grow and shrink on the emulator's thread meanwhile ("dictionary
        # changed size during iteration", a KeyError).
        for uid, up in list(self.uploads.items()):
            if up.bucket == name:
                self.uploads.pop(uid, None)
        for sid, sess in list(self.sessions.items()):
            if sess.bucket == name:
                self.sessions.pop(sid, None)

    # -- objects ---------------------------------------------------------

    def next_generation(self) -> int:
        """Return a strictly increasing, microsecond-timestamp-like generation."""
        self._last_generation = max(time.time_ns() // 1000, self._last_generation + 1)
        return self._last_generation

    def get(self, bucket: str, name: str, generation: int | None = None) -> ObjectRecord:
        """Return the live record.

        Args:
            generation: if given, the live generation must be this one.

        Raises:
            ApiError: 404 for a missing bucket, object or generation.
        """
        rec = self.bucket(bucket).objects.get(name)
        if rec is None or (generation is not None and rec.generation != generation):
            raise err.no_such_object(bucket, name)
        return rec

    def put(
        self,
        bucket: str,
        name: str,
        data: bytes | Rope,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        preconditions: Preconditions | None = None,
        crc32c: int | None = None,
        md5: bytes | None = None,
        with_md5: bool = True,
        component_count: int | None = None,
        etag: str | None = None,
        content_encoding: str | None = None,
    ) -> ObjectRecord:
        """Store a new generation of an object.

        Args:
            data: the content; kept as-is (``bytes`` or a Rope of them, never
                a buffer that changes).
            preconditions: checked against the live generation (412 on failure).
            crc32c: the CRC32C if the caller already computed it.
            md5: the MD5 digest if the caller already computed it.
            with_md5: composite objects have no MD5 on GCS.
            component_count: set for composed / multipart objects.
            etag: the ETag to serve (default: derived from md5 / crc32c).
            content_encoding: how ``data`` is coded (``gzip``...), kept as
                the object's ``contentEncoding``; the bytes are stored as given.

        Returns:
            The stored record.

        Raises:
            ApiError: 404 for a missing bucket, 412 for a failed precondition.
        """
        b = self.bucket(bucket)
        old = b.objects.get(name)
        if preconditions is not None:
            preconditions.check(old)
        now = rfc3339(time.time_ns())
        if not isinstance(data, Rope):
            data = Rope((data,))
        rec = ObjectRecord(
            bucket,
            name,
            data,
            generation=self.next_generation(),
            metageneration=1,
            crc32c=data.crc32c() if crc32c is None else crc32c,
            md5=(md5 or data.md5()) if with_md5 else None,
            content_type=content_type or "application/octet-stream",
            time_created=now,
            updated=now,
            metadata=metadata,
            component_count=component_count,
            etag=etag,
            content_encoding=content_encoding,
        )
        if old is None:
            bisect.insort(b.names, name)
        b.objects[name] = rec
        return rec

    def patch(
        self,
        bucket: str,
        name: str,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str | None] | None = None,
    ) -> ObjectRecord:
        """Update metadata in place of the current generation (bumps metageneration).

        Args:
            metadata: keys mapped to ``None`` are removed, as on GCS.

        Raises:
            ApiError: 404.
        """
        old = self.get(bucket, name)
        merged = dict(old.metadata or {})
        for key, value in (metadata or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        rec = ObjectRecord(
            bucket, name, old.data,
            generation=old.generation, metageneration=old.metageneration + 1,
            crc32c=old.crc32c, md5=old.md5,
            content_type=content_type or old.content_type,
            time_created=old.time_created, updated=rfc3339(time.time_ns()),
            metadata=merged, component_count=old.component_count, etag=old.etag,
            content_encoding=old.content_encoding,
        )  # fmt: skip
        self.bucket(bucket).objects[name] = rec
        return rec

    def delete(self, bucket: str, name: str, *, generation: int | None = None) -> None:
        """Delete the live object.

        Raises:
            ApiError: 404 if missing (or if ``generation`` is not the live one).
        """
        b = self.bucket(bucket)
        self.get(bucket, name, generation)
        del b.objects[name]
        del b.names[bisect.bisect_left(b.names, name)]

    def list_page(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        start_offset: str = "",
        end_offset: str = "",
        include_trailing_delimiter: bool = False,
        page_token: str = "",
        max_results: int = 1000,
    ) -> tuple[list[ObjectRecord], list[str], str | None]:
        """Return one list page in O(log n + page).

        ``max_results`` bounds items plus prefixes together, as on GCS. Each
        prefix found under ``delimiter`` is skipped over with one bisect.

        Returns:
            ``(items, prefixes, next_page_token or None)``.

        Raises:
            ApiError: 404 for a missing bucket, 400 for a malformed token.
        """
        b = self.bucket(bucket)
        names, objects = b.names, b.objects
        lo = bisect.bisect_left(names, prefix) if prefix else 0
        if start_offset:
            lo = max(lo, bisect.bisect_left(names, start_offset))
        if page_token:
            kind, key = _decode_token(page_token)
            pos = bisect.bisect_right(names, key) if kind == "i" else _after_prefix(names, key)
            lo = max(lo, pos)
        items: list[ObjectRecord] = []
        prefixes: list[str] = []
        last = ("i", "")
        i, n, plen = lo, len(names), len(prefix)
        while i < n:
            name = names[i]
            if prefix and not name.startswith(prefix):
                break
            if end_offset and name >= end_offset:
                break
            if len(items) + len(prefixes) >= max_results:
                return items, prefixes, _encode_token(*last)
            if delimiter:
                j = name.find(delimiter, plen)
                if j >= 0:
                    group = name[: j + len(delimiter)]
                    prefixes.append(group)
                    # The group's own name sorts first within the group.
                    if include_trailing_delimiter and name == group:
                        items.append(objects[name])
                    last = ("p", group)
                    i = _after_prefix(names, group)
                    continue
            items.append(objects[name])
            last = ("i", name)
            i += 1
        return items, prefixes, None

    # -- multipart uploads and resumable sessions ------------------------

    def new_upload_id(self) -> str:
        """Return a fresh opaque id for an upload or session."""
        return f"aioflux-{next(_ids)}-{time.time_ns() & 0xFFFFFFFF:08x}"

    def create_multipart(
        self, bucket: str, name: str, content_type: str, metadata: dict[str, str]
    ) -> MultipartUpload:
        """Start an XML multipart upload.

        Raises:
            ApiError: 404 NoSuchBucket.
        """
        self.bucket(bucket)
        up = MultipartUpload(
            self.new_upload_id(), bucket, name, content_type, metadata, rfc3339(time.time_ns())
        )
        self.uploads[up.upload_id] = up
        return up

    def multipart(self, bucket: str, name: str, upload_id: str) -> MultipartUpload:
        """Return a live multipart upload of ``bucket/name``.

        Raises:
            ApiError: 404 NoSuchUpload.
        """
        up = self.uploads.get(upload_id)
        if up is None or up.bucket != bucket or up.name != name:
            raise err.no_such_upload(upload_id)
        return up


def _encode_token(kind: str, key: str) -> str:
    # Opaque to clients; "i" resumes after an item, "p" after a whole prefix.
    return base64.urlsafe_b64encode((kind + key).encode()).decode()


def _decode_token(token: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(token.encode()).decode()
    except ValueError:
        raise err.invalid(f"Invalid page token: {token}") from None
    if not raw or raw[0] not in "ip":
        raise err.invalid(f"Invalid page token: {token}")
    return raw[0], raw[1:]


def _after_prefix(names: list[str], group: str) -> int:
    """Index of the first name that does not start with ``group``."""
    last = ord(group[-1]) if group else 0x10FFFF
    if last < 0x10FFFF:
        # Every name with this prefix sorts below the prefix with its last
        # character incremented, and every other name >= group sorts above.
        return bisect.bisect_left(names, group[:-1] + chr(last + 1))
    i = bisect.bisect_left(names, group)
    while i < len(names) and names[i].startswith(group):
        i += 1
    return i
