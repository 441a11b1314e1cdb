"""Requester-pays buckets: who must name a project to bill, and how.

Only the refusal is modelled, not billing: a request to a requester-pays
bucket (:attr:`~aioflux.testing._records.Bucket.requester_pays`) that names
no payer is answered as GCS and S3 answer it, and one that names any is
served. GCS takes the project from the ``userProject`` query parameter
(the JSON API's, also accepted by the XML API) or the ``x-goog-user-project``
header (the XML API's, and Google's system parameter, which google-auth
sends with a credential's quota project on any API); S3 from
``x-amz-request-payer: requester`` (or its query form, in a presigned URL).
"""

from __future__ import annotations

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._store import Store

__all__ = ["check_request_payer", "check_user_project"]


def _paid(store: Store, buckets: tuple[str, ...]) -> str | None:
    """The first of ``buckets`` that is requester-pays (missing ones are
    left to the handlers, which answer 404)."""
    for name in buckets:
        bucket = store.buckets.get(name)
        if bucket is not None and bucket.requester_pays:
            return name
    return None


def check_user_project(store: Store, request: web.BaseRequest, *buckets: str) -> None:
    """Refuse a GCS request to a requester-pays bucket that names no project to bill.

    Args:
        store: the emulator's store.
        request: the request.
        buckets: the buckets it touches (a copy's source and destination).

    Raises:
        ApiError: 400 ``required`` / ``UserProjectMissing``.
    """
    paid = _paid(store, buckets)
    if paid is None:
        return
    if request.query.get("userProject", "").strip() or \
            request.headers.get("x-goog-user-project", "").strip():
        return
    raise err.user_project_missing(paid)


def check_request_payer(store: Store, request: web.BaseRequest, *buckets: str) -> None:
    """Refuse an S3 request to a requester-pays bucket that does not accept the charges.

    Args:
        store: the emulator's store.
        request: the request.
        buckets: the buckets it touches (a copy's source and destination).

    Raises:
        ApiError: 403 ``AccessDenied``.
    """
    if _paid(store, buckets) is None:
        return
    payer = request.headers.get("x-amz-request-payer") or \
        request.query.get("x-amz-request-payer", "")
    if payer.strip().lower() != "requester":
        raise err.requester_pays_denied()
