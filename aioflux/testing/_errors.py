"""GCS-shaped errors raised by the emulator's store and handlers.

One exception type, :class:`ApiError`, carries everything needed to render
the error the way real GCS does on either API: the JSON API body
(``{"error": {"code", "message", "errors": [...]}}``) and the XML API body
(``<Error><Code/><Message/><Details/></Error>``). The store raises it
without knowing which API asked, so both renderings live here.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import escape

from aiohttp import web

__all__ = [
    "ApiError",
    "bad_digest",
    "bucket_not_empty",
    "bucket_exists",
    "invalid",
    "no_such_bucket",
    "no_such_object",
    "no_such_upload",
    "not_modified",
    "precondition_failed",
    "range_not_satisfiable",
    "rate_limited",
    "requester_pays_denied",
    "unavailable",
    "user_project_missing",
]

# XML code used when the caller did not name one, keyed by JSON reason.
_XML_CODES: dict[str, str] = {
    "notFound": "NoSuchKey",
    "conditionNotMet": "PreconditionFailed",
    "invalid": "InvalidArgument",
    "required": "InvalidArgument",
    "conflict": "Conflict",
    "rateLimitExceeded": "SlowDown",
    "backendError": "ServiceUnavailable",
    "requestedRangeNotSatisfiable": "InvalidRange",
    "notModified": "NotModified",
}


class ApiError(Exception):
    """An HTTP error with both GCS renderings.

    Args:
        status: HTTP status code.
        reason: JSON API ``errors[0].reason`` (``notFound``, ``invalid``...).
        message: JSON API message, worded like GCS.
        xml_code: XML API ``<Code>``; derived from ``reason`` when omitted.
        xml_message: XML API ``<Message>``; ``message`` when omitted.
        details: XML API ``<Details>`` (usually ``bucket/object``).
        headers: extra response headers (``Retry-After`` on 429).
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        xml_code: str | None = None,
        xml_message: str | None = None,
        details: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        # Raised to a test by the store's own methods (``create_bucket``,
        # ``bucket``, ``delete_bucket``...) too, where GCS's words ("the
        # named bucket") name nothing: the details do.
        text = f"{status} {reason}: {message}"
        if details and details not in message:
            text = f"{text} ({details})"
        super().__init__(text)
        self.status = status
        self.reason = reason
        self.message = message
        self.xml_code = xml_code or _XML_CODES.get(reason, "InvalidArgument")
        self.xml_message = xml_message or message
        self.details = details
        self.headers = headers or {}

    def json_response(self) -> web.Response:
        """Render as a JSON API response.

        Returns:
            The response, with an empty body for 304 as GCS sends.
        """
        if self.status == 304:
            return web.Response(status=304, headers=self.headers)
        body = {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
            }
        }
        return web.Response(
            status=self.status,
            body=json.dumps(body).encode(),
            content_type="application/json",
            charset="UTF-8",
            headers=self.headers,
        )

    def xml_response(self, *, head: bool = False) -> web.Response:
        """Render as an XML API response.

        Args:
            head: omit the body (responses to HEAD carry none).

        Returns:
            The response.
        """
        if self.status == 304 or head:
            return web.Response(status=self.status, headers=self.headers)
        details = f"<Details>{escape(self.details)}</Details>" if self.details else ""
        body = (
            "<?xml version='1.0' encoding='UTF-8'?><Error>"
            f"<Code>{escape(self.xml_code)}</Code>"
            f"<Message>{escape(self.xml_message)}</Message>{details}</Error>"
        )
        return web.Response(
            status=self.status,
            body=body.encode(),
            content_type="application/xml",
            charset="UTF-8",
            headers=self.headers,
        )


def no_such_bucket(bucket: str) -> ApiError:
    """Return the 404 for a missing bucket."""
    return ApiError(
        404,
        "notFound",
        "The specified bucket does not exist.",
        xml_code="NoSuchBucket",
        details=bucket,
    )


def no_such_object(bucket: str, name: str) -> ApiError:
    """Return the 404 for a missing object (or object generation)."""
    return ApiError(
        404,
        "notFound",
        f"No such object: {bucket}/{name}",
        xml_code="NoSuchKey",
        xml_message="The specified key does not exist.",
        details=f"{bucket}/{name}",
    )


def no_such_upload(upload_id: str) -> ApiError:
    """Return the 404 for an unknown multipart upload or resumable session."""
    return ApiError(
        404,
        "notFound",
        "The requested upload was not found.",
        xml_code="NoSuchUpload",
        details=upload_id,
    )


def bucket_exists(bucket: str) -> ApiError:
    """Return the 409 for creating a bucket that exists."""
    return ApiError(
        409,
        "conflict",
        "Your previous request to create the named bucket succeeded and you already own it.",
        xml_code="BucketAlreadyOwnedByYou",
        details=bucket,
    )


def bucket_not_empty(bucket: str) -> ApiError:
    """Return the 409 for deleting a bucket that still holds objects."""
    return ApiError(
        409,
        "conflict",
        "The bucket you tried to delete is not empty.",
        xml_code="BucketNotEmpty",
        details=bucket,
    )


def precondition_failed(details: str = "") -> ApiError:
    """Return the 412 for a failed ``if*Match`` precondition."""
    return ApiError(
        412,
        "conditionNotMet",
        "At least one of the pre-conditions you specified did not hold.",
        details=details,
    )


def not_modified() -> ApiError:
    """Return the 304 GCS answers a read whose ``if*NotMatch`` matched."""
    return ApiError(304, "notModified", "Not Modified")


def invalid(message: str, *, xml_code: str = "InvalidArgument", details: str = "") -> ApiError:
    """Return a 400 ``invalid`` error.

    Args:
        message: the GCS-worded message.
        xml_code: the XML ``<Code>`` (``InvalidPart``, ``EntityTooSmall``...).
        details: XML ``<Details>``.
    """
    return ApiError(400, "invalid", message, xml_code=xml_code, details=details)


def bad_digest(kind: str, sent: str, computed: str) -> ApiError:
    """Return the 400 for a client hash that does not match the bytes.

    Args:
        kind: ``CRC32C`` or ``MD5``.
        sent: the base64 value the client sent.
        computed: the base64 value of the received bytes.
    """
    return ApiError(
        400,
        "invalid",
        f'Provided {kind} "{sent}" doesn\'t match calculated {kind} "{computed}".',
        xml_code="BadDigest",
        xml_message=f"The {kind} you specified did not match what we computed.",
    )


def range_not_satisfiable(size: int) -> ApiError:
    """Return the 416 for a Range outside the object."""
    return ApiError(
        416,
        "requestedRangeNotSatisfiable",
        "The requested range cannot be satisfied.",
        headers={"Content-Range": f"bytes */{size}"},
    )


def rate_limited() -> ApiError:
    """Return the 429 used for injected faults and the QPS cap."""
    return ApiError(
        429,
        "rateLimitExceeded",
        "The rate of requests exceeds the rate limit. Please reduce the rate of requests.",
        xml_code="SlowDown",
        xml_message="Please reduce your request rate.",
        headers={"Retry-After": "0"},
    )


def unavailable() -> ApiError:
    """Return the injected 503."""
    return ApiError(
        503,
        "backendError",
        "We encountered an internal error. Please try again.",
        xml_code="ServiceUnavailable",
        xml_message="Service Unavailable. Please try again.",
    )


def user_project_missing(bucket: str) -> ApiError:
    """Return GCS's 400 for a request to a requester-pays bucket that names
    no project to bill (``required`` on the JSON API, ``UserProjectMissing``
    on the XML API)."""
    return ApiError(
        400,
        "required",
        "Bucket is a requester pays bucket but no user project provided.",
        xml_code="UserProjectMissing",
        xml_message="Bucket is a Requester Pays bucket but no User Project provided.",
        details=bucket,
    )


def requester_pays_denied() -> ApiError:
    """Return S3's 403 for a request to a requester-pays bucket without
    ``x-amz-request-payer: requester`` (S3 says no more than this)."""
    return ApiError(403, "forbidden", "Access Denied", xml_code="AccessDenied")
