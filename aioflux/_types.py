"""Plain records returned by the client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._crc import decode_crc32c

__all__ = ["ListPage", "MultipartUploadInfo", "ObjectInfo", "PartInfo"]

# The only object fields the listing hot path asks for: smaller pages, faster
# JSON parsing (GCS returns ~30 fields per item otherwise).
LIST_FIELDS = "nextPageToken,prefixes,items(name,size,generation,crc32c)"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """Metadata of one object.

    Attributes:
        bucket: bucket name.
        name: object name.
        size: size in bytes.
        generation: GCS generation (changes on every overwrite).
        crc32c: crc32c of the content as uint32, if known.
        md5: base64 md5 if known (absent for composite objects).
        metageneration: metadata generation, if known.
        content_type: content type, if known.
        updated: RFC 3339 time of the last update, if known.
        metadata: custom metadata.
    """

    bucket: str
    name: str
    size: int
    generation: int = 0
    crc32c: int | None = None
    md5: str | None = None
    metageneration: int | None = None
    content_type: str | None = None
    updated: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """``gs://bucket/name``."""
        return f"gs://{self.bucket}/{self.name}"

    @classmethod
    def from_json(cls, bucket: str, item: dict[str, Any]) -> ObjectInfo:
        """Build from a JSON API object resource.

        Args:
            bucket: bucket to use when the resource omits it.
            item: the resource dict.

        Returns:
            ObjectInfo.
        """
        crc = item.get("crc32c")
        meta = item.get("metageneration")
        return cls(
            bucket=item.get("bucket", bucket),
            name=item["name"],
            size=int(item.get("size", 0)),
            generation=int(item.get("generation", 0)),
            crc32c=decode_crc32c(crc) if crc else None,
            md5=item.get("md5Hash"),
            metageneration=int(meta) if meta is not None else None,
            content_type=item.get("contentType"),
            updated=item.get("updated"),
            metadata=dict(item.get("metadata") or {}),
        )


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a listing (at most 1000 objects on GCS)."""

    objects: list[ObjectInfo]
    prefixes: list[str]
    next_page_token: str | None


@dataclass(frozen=True, slots=True)
class PartInfo:
    """One uploaded part of an XML multipart upload."""

    number: int
    etag: str
    size: int


@dataclass(frozen=True, slots=True)
class MultipartUploadInfo:
    """An open (not completed, not aborted) XML multipart upload."""

    bucket: str
    name: str
    upload_id: str
    initiated: str
