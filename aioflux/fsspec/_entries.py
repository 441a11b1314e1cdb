"""fsspec's info dicts (``info``, ``ls`` and ``find`` entries) of objects and
folders, and the ObjectInfo a file's entry was made from.

A file's entry carries what every store reports (size, crc32c, version) and
gcsfs's names for the rest: ``generation``, ``md5``, ``updated`` and
``mtime``, so code written for gcsfs reads them by name.
"""

from __future__ import annotations

import datetime
from typing import Any

from .._core.integrity.crc import decode_crc32c, encode_crc32c
from .._core.records.types import ObjectInfo
from ._paths import join, split

__all__ = ["file_entry", "folder_entry", "object_info"]


def _time_of(updated: str | None) -> datetime.datetime | None:
    """An RFC 3339 time as a datetime (None for none, or one not parsed)."""
    if not updated:
        return None
    try:
        return datetime.datetime.fromisoformat(updated)
    except ValueError:
        return None


def file_entry(scheme: str, info: ObjectInfo) -> dict[str, Any]:
    """The entry of an object on ``scheme``'s store."""
    # "mtime" as gcsfs gives it (a UTC datetime), which pyarrow's handler
    # reads for its FileInfo and code written for gcsfs reads by name.
    return {"name": join(scheme, info.bucket, info.name), "size": info.size,
            "type": "file", "crc32c": None if info.crc32c is None
            else encode_crc32c(info.crc32c), "version": info.version,
            "generation": info.generation, "md5": info.md5, "updated": info.updated,
            "mtime": _time_of(info.updated),
            "content_type": info.content_type, "metadata": dict(info.metadata)}


def folder_entry(scheme: str, bucket: str, name: str) -> dict[str, Any]:
    """The entry of a folder (``name``, a trailing slash or not; ``""``: the bucket's root)."""
    return {"name": join(scheme, bucket, name.rstrip("/")), "size": 0, "type": "directory"}


def object_info(scheme: str, entry: dict[str, Any]) -> ObjectInfo:
    """The ObjectInfo a file's entry was made from (open() reads by it)."""
    bucket, name = split(scheme, entry["name"])
    return ObjectInfo(bucket, name, entry["size"], entry["generation"],
                      None if entry["crc32c"] is None else decode_crc32c(entry["crc32c"]),
                      entry["md5"], content_type=entry["content_type"],
                      updated=entry["updated"], metadata=entry["metadata"], scheme=scheme)
