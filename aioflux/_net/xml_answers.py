"""What the XML stores (S3, Azure) read of an answer alike: a failure
named by the request, a ``Last-Modified`` as a listing's time, and lxml,
imported once, for their listing pages."""

from __future__ import annotations

import email.utils
import functools
from collections.abc import Callable
from typing import Any, NoReturn

from .._core.errors import StorageError, describe
from .failures import Op

__all__ = ["fail", "lxml_etree", "rfc3339"]


def fail(op: Op, what: str, cause: BaseException | None = None) -> NoReturn:
    """Raise a StorageError saying what was wrong with ``op``'s answer."""
    raise StorageError(f"{describe(op.operation, op.bucket, op.name, op.scheme)} failed: {what}",
                       operation=op.operation, bucket=op.bucket, name=op.name) from cause


def rfc3339(http_date: str | None) -> str | None:
    """``Last-Modified`` (an HTTP date) as the RFC 3339 time a listing gives."""
    if not http_date:
        return None
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def lxml_etree(missing: Callable[[], Exception]) -> Any:
    """``lxml.etree``.

    Raises:
        Exception: ``missing()``, the store's error naming its extra, where
            lxml is not installed.
    """
    etree = _etree()
    if etree is None:
        raise missing()
    return etree


@functools.cache
def _etree() -> Any:
    try:
        from lxml import etree
    except ImportError:
        return None
    return etree
