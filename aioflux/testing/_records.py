"""Records held by the emulator's store: objects, buckets, uploads, sessions.

Object records are immutable: a write or metadata patch replaces the
record, so a download in flight keeps serving the generation it started
with, and the JSON rendering can be cached on the record.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from aioflux.testing import _errors as err
from aioflux.testing._rope import Rope

__all__ = [
    "Bucket",
    "MultipartUpload",
    "ObjectRecord",
    "Preconditions",
    "ResumableSession",
    "b64_crc32c",
    "b64_md5",
    "rfc3339",
]


def rfc3339(ns: int) -> str:
    """Format nanoseconds since the epoch as GCS does (millisecond precision, ``Z``)."""
    dt = datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def b64_crc32c(value: int) -> str:
    """Encode a CRC32C as GCS does: base64 of the big-endian uint32."""
    return base64.b64encode(value.to_bytes(4, "big")).decode()


def b64_md5(digest: bytes) -> str:
    """Encode an MD5 digest as base64."""
    return base64.b64encode(digest).decode()


class ObjectRecord:
    """One object generation; never mutated once stored.

    Attributes:
        data: the content (served as views into its pieces, never copied).
        md5: the MD5 digest, or ``None`` for composite objects (as on GCS).
        etag: the MD5 in hex; for a composite, what its writer chose (an S3
            multipart upload's ``md5-of-md5s-N``) or ``crc32c-generation``.
        content_encoding: how the stored bytes are coded (``gzip``...), or
            ``None``; GCS serves a ``gzip`` one decompressed to a reader that
            does not accept gzip (decompressive transcoding).
    """

    __slots__ = (
        "_encoded",
        "_json",
        "_json_base",
        "bucket",
        "component_count",
        "content_encoding",
        "content_type",
        "crc32c",
        "crc32c_b64",
        "data",
        "etag",
        "generation",
        "md5",
        "md5_b64",
        "metadata",
        "metageneration",
        "name",
        "size",
        "time_created",
        "updated",
    )  # fmt: skip

    def __init__(
        self,
        bucket: str,
        name: str,
        data: bytes | Rope,
        *,
        generation: int,
        metageneration: int,
        crc32c: int,
        md5: bytes | None,
        content_type: str,
        time_created: str,
        updated: str,
        metadata: Mapping[str, str] | None,
        component_count: int | None,
        etag: str | None = None,
        content_encoding: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.name = name
        self.data = data if isinstance(data, Rope) else Rope((data,))
        self.size = self.data.size
        self.generation = generation
        self.metageneration = metageneration
        self.crc32c = crc32c
        self.md5 = md5
        self.content_type = content_type
        self.time_created = time_created
        self.updated = updated
        self.metadata = dict(metadata) if metadata else None
        self.component_count = component_count
        self.crc32c_b64 = b64_crc32c(crc32c)
        self.md5_b64 = b64_md5(md5) if md5 is not None else None
        if etag is None:
            etag = md5.hex() if md5 is not None else f"{crc32c:08x}-{generation}"
        self.etag = etag
        self.content_encoding = content_encoding or None
        self._json: dict[str, Any] | None = None
        self._json_base = ""
        self._encoded: dict[str, bytes] | None = None

    def to_json(self, base_url: str = "") -> dict[str, Any]:
        """Return the JSON API object resource (cached; callers must not mutate it).

        Args:
            base_url: ``http://host:port`` for ``selfLink`` / ``mediaLink``;
                google-cloud-storage downloads from ``mediaLink`` as given,
                so it must be absolute.
        """
        if self._json is None or self._json_base != base_url:
            bucket, quoted = quote(self.bucket, safe=""), quote(self.name, safe="")
            doc: dict[str, Any] = {
                "kind": "storage#object",
                "id": f"{self.bucket}/{self.name}/{self.generation}",
                "selfLink": f"{base_url}/storage/v1/b/{bucket}/o/{quoted}",
                "mediaLink": f"{base_url}/download/storage/v1/b/{bucket}/o/{quoted}"
                f"?generation={self.generation}&alt=media",
                "name": self.name,
                "bucket": self.bucket,
                "generation": str(self.generation),
                "metageneration": str(self.metageneration),
                "contentType": self.content_type,
                "storageClass": "STANDARD",
                "size": str(self.size),
                "crc32c": self.crc32c_b64,
                "etag": self.etag,
                "timeCreated": self.time_created,
                "updated": self.updated,
                "timeStorageClassUpdated": self.time_created,
            }
            if self.content_encoding is not None:
                doc["contentEncoding"] = self.content_encoding
            if self.md5_b64 is not None:
                doc["md5Hash"] = self.md5_b64
            if self.component_count is not None:
                doc["componentCount"] = self.component_count
            if self.metadata:
                doc["metadata"] = self.metadata
            self._json, self._json_base = doc, base_url
        return self._json

    def encoded(self, key: str, encode: Callable[[ObjectRecord], bytes]) -> bytes:
        """Return ``encode(self)``, cached under ``key`` (e.g. the ``fields`` selector).

        List pages are assembled from these cached fragments, so serving a
        page of 1000 items costs a join instead of 1000 ``json.dumps`` calls.
        """
        cache = self._encoded
        if cache is None:
            cache = self._encoded = {}
        out = cache.get(key)
        if out is None:
            out = encode(self)
            if len(cache) < 4:  # a few selector variants per record, not unbounded
                cache[key] = out
        return out


@dataclass
class Bucket:
    """A bucket: sorted names plus records.

    ``requester_pays``: every request must name a project to bill (GCS's
    ``billing.requesterPays``; S3's ``RequestPaymentConfiguration``).
    """

    name: str
    time_created: str
    names: list[str] = field(default_factory=list)
    objects: dict[str, ObjectRecord] = field(default_factory=dict)
    requester_pays: bool = False

    def to_json(self) -> dict[str, Any]:
        """Return the JSON API bucket resource."""
        billing = {"billing": {"requesterPays": True}} if self.requester_pays else {}
        return {
            "kind": "storage#bucket",
            "id": self.name,
            "name": self.name,
            "projectNumber": "0",
            "metageneration": "1",
            "location": "US",
            "storageClass": "STANDARD",
            "etag": "CAE=",
            "timeCreated": self.time_created,
            "updated": self.time_created,
            **billing,
        }


@dataclass
class MultipartUpload:
    """An XML API multipart upload; the object appears only at completion."""

    upload_id: str
    bucket: str
    name: str
    content_type: str
    metadata: dict[str, str]
    initiated: str
    parts: dict[int, tuple[str, Rope, str]] = field(default_factory=dict)
    """part number -> (md5 hex ETag without quotes, bytes, last-modified)"""


@dataclass
class ResumableSession:
    """A JSON API resumable upload session."""

    upload_id: str
    bucket: str
    name: str
    content_type: str
    metadata: dict[str, str] | None
    preconditions: Preconditions
    expected_crc32c: str | None
    expected_md5: str | None
    chunks: list[bytes] = field(default_factory=list)
    committed: int = 0
    result: ObjectRecord | None = None
    content_encoding: str | None = None


@dataclass(frozen=True)
class Preconditions:
    """GCS generation preconditions (``ifGenerationMatch=0``: must not exist;
    any ``ifGenerationNotMatch``: must exist)."""

    if_generation_match: int | None = None
    if_generation_not_match: int | None = None
    if_metageneration_match: int | None = None
    if_metageneration_not_match: int | None = None

    def check(self, rec: ObjectRecord | None, *, read: bool = False) -> None:
        """Apply the GCS rules to the live record (``None`` = absent).

        Args:
            read: reads answer a matching ``*NotMatch`` with 304, writes with 412.

        Raises:
            ApiError: 412 or 304.
        """
        gen = rec.generation if rec is not None else 0
        if self.if_generation_match is not None and self.if_generation_match != gen:
            raise err.precondition_failed()
        if self.if_metageneration_match is not None and (
            rec is None or rec.metageneration != self.if_metageneration_match
        ):
            raise err.precondition_failed()
        if self.if_generation_not_match is not None and (
            rec is None or self.if_generation_not_match == gen
        ):
            # "If no live object exists, the precondition fails" (GCS); a
            # read of a missing object has answered 404 before this.
            raise err.not_modified() if read else err.precondition_failed()
        if (
            self.if_metageneration_not_match is not None
            and rec is not None
            and rec.metageneration == self.if_metageneration_not_match
        ):
            raise err.not_modified() if read else err.precondition_failed()
