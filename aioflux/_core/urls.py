"""``gs://bucket/name`` parsing and validation."""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import InvalidURL

__all__ = ["GcsURL", "parse_url", "validate_bucket", "validate_object_name"]

# GCS bucket naming: 3-63 chars (up to 222 with dots), lowercase letters,
# digits, dashes, underscores and dots, starting and ending alphanumeric.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_MAX_OBJECT_NAME_BYTES = 1024


def validate_bucket(bucket: str, *, arg: str = "bucket") -> str:
    """Check a bucket name against GCS naming rules.

    Args:
        bucket: the bucket name.
        arg: the argument's name, for the message.

    Returns:
        The same name.

    Raises:
        InvalidURL: the name cannot be a GCS bucket (or is not a string).
    """
    if not isinstance(bucket, str):
        raise InvalidURL(f"{arg} must be a bucket name string, got {type(bucket).__name__}")
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise InvalidURL(f"{arg}: invalid bucket name {bucket!r}: use 3-63 lowercase letters, "
                         "digits, '-', '_' or '.', starting and ending with a letter or digit")
    if "." not in bucket and len(bucket) > 63:
        raise InvalidURL(f"{arg}: invalid bucket name {bucket!r}: longer than 63 characters")
    return bucket


def validate_object_name(name: str, *, arg: str = "name") -> str:
    """Check an object name against GCS naming rules.

    Args:
        name: the object name.
        arg: the argument's name, for the message.

    Returns:
        The same name.

    Raises:
        InvalidURL: not a string, empty, too long, not encodable as UTF-8
            (a lone surrogate), ``.``/``..``, or containing CR/LF.
    """
    if not isinstance(name, str):
        raise InvalidURL(f"{arg} must be an object name string, got {type(name).__name__}")
    if not name:
        raise InvalidURL(f"{arg}: object name is empty")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        # GCS names are UTF-8; a lone surrogate (from a bad os.fsdecode) has none.
        raise InvalidURL(f"{arg}: object name {name!r} is not valid UTF-8 ({exc.reason} at "
                         f"position {exc.start})") from None
    if len(encoded) > _MAX_OBJECT_NAME_BYTES:
        raise InvalidURL(
            f"{arg}: object name longer than {_MAX_OBJECT_NAME_BYTES} bytes: {name[:40]!r}...")
    if name in (".", ".."):
        raise InvalidURL(f"{arg}: object name {name!r} is not allowed")
    if "\r" in name or "\n" in name:
        raise InvalidURL(f"{arg}: object name {name!r} contains a line break")
    return name


class GcsURL(NamedTuple):
    """A parsed ``gs://bucket/name`` URL (``name`` may be empty for a bucket)."""

    bucket: str
    name: str

    def __str__(self) -> str:
        return f"gs://{self.bucket}/{self.name}"

    def join(self, *parts: str) -> GcsURL:
        """Append path parts with ``/``.

        Args:
            *parts: path segments.

        Returns:
            A new GcsURL.
        """
        name = "/".join(p.strip("/") for p in (self.name, *parts) if p.strip("/"))
        return GcsURL(self.bucket, name)


def parse_url(url: str, *, require_object: bool = False) -> GcsURL:
    """Parse ``gs://bucket[/name]``.

    Args:
        url: the URL.
        require_object: reject URLs that name only a bucket.

    Returns:
        GcsURL(bucket, name).

    Raises:
        InvalidURL: not a gs:// URL, bad bucket, or missing object name.
    """
    if not isinstance(url, str):
        raise InvalidURL(f"expected a gs:// URL string, got {type(url).__name__}")
    if not url.startswith("gs://"):
        raise InvalidURL(f"not a gs:// URL: {url!r}")
    bucket, _, name = url[len("gs://"):].partition("/")
    validate_bucket(bucket)
    if name:
        validate_object_name(name)
    elif require_object:
        raise InvalidURL(f"URL names no object: {url!r}")
    return GcsURL(bucket, name)
