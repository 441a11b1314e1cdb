"""The emulator's S3 face: a path-style S3 API over the GCS emulator's store.

It is served on a listener of its own (``Emulator.s3_endpoint``), so no
request has to be guessed at: every request on that port is S3, every
request on the main port is GCS. Telling the two apart on one port by
``x-amz-*`` headers would misroute unsigned S3 requests and GCS XML
requests signed with SigV4-compatible HMAC keys alike. Both listeners share
the store, the profile (time to first byte, bandwidth), the QPS cap, the
faults and the counters, so an object written through one API is read
through the other, and a fault knob acts on both.

Addressing is path style only (``/bucket/key``); signatures are accepted
unverified (any ``Authorization``, presigned query or none), and so is the
``x-amz-content-sha256`` payload hash; ``aws-chunked`` bodies are decoded
and their trailing checksums verified (:mod:`._s3_body`). A requester-pays
bucket (``?requestPayment``, or ``Emulator.create_bucket(...,
requester_pays=True)``) refuses, 403 ``AccessDenied``, a request without
``x-amz-request-payer: requester`` (:mod:`._billing`). Counters in
``Emulator.stats`` carry an ``s3_`` prefix.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._billing import check_request_payer
from aioflux.testing._runtime import Runtime
from aioflux.testing._s3_common import (
    S3State,
    error_response,
    malformed_xml,
    parse_xml,
    xml_doc,
    xml_response,
)
from aioflux.testing._s3_list import list_buckets, list_objects, list_parts, list_uploads
from aioflux.testing._s3_multipart import abort, complete, create, upload_part
from aioflux.testing._s3_objects import (
    copy_object,
    copy_source,
    delete_object,
    delete_objects,
    get_object,
    put_object,
)

__all__ = ["S3Face"]

_log = logging.getLogger("aioflux.testing")

# Sub-resources the face implements; any other (?acl, ?tagging, ?versions...)
# is refused with 501 rather than answered as if it were a plain GET or PUT.
_KNOWN_SUBRESOURCES = frozenset({
    "acl", "accelerate", "analytics", "attributes", "cors", "encryption", "intelligent-tiering",
    "inventory", "legal-hold", "lifecycle", "logging", "metrics", "notification",
    "object-lock", "ownershipControls", "policy", "policyStatus", "publicAccessBlock",
    "replication", "requestPayment", "restore", "retention", "select", "tagging", "torrent",
    "versioning", "versions", "website", "versionId",
})


class S3Face:
    """Answers S3 requests from the emulator's runtime.

    Args:
        rt: the runtime shared with the GCS APIs.
        region: the region HeadBucket reports (``x-amz-bucket-region``).
    """

    def __init__(self, rt: Runtime, *, region: str = "us-east-1") -> None:
        self.state = S3State(rt, region)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Serve one request (the low-level server's handler)."""
        raw = request.rel_url.raw_path.lstrip("/")
        raw_bucket, _, raw_key = raw.partition("/")
        bucket, key = unquote(raw_bucket), unquote(raw_key)
        request_id = self.state.request_id()
        try:
            resp = await self._route(request, bucket, key)
        except err.ApiError as exc:
            resp = error_response(exc, bucket=bucket, key=key, request_id=request_id,
                                  head=request.method == "HEAD")
            if request.can_read_body and not request.content.at_eof():
                # Refused before its body was read: a client that sent
                # "Expect: 100-continue" never sends it (botocore then keeps the
                # connection), so the server would take the next request's
                # bytes for the body. Closing the connection keeps both sides
                # in step (tested by test_faults_reach_s3_requests).
                resp.force_close()
            return resp
        except ConnectionError:
            # The client went away mid-request; nobody to answer (as on the GCS port).
            self.state.rt.stats["client_disconnects"] += 1
            _log.debug("client %s dropped the connection during S3 %s %s", request.remote,
                       request.method, request.rel_url.path)
            return web.Response(status=499)
        if not resp.prepared:
            resp.headers["x-amz-request-id"] = request_id
        return resp

    async def _route(self, request: web.BaseRequest, bucket: str,
                     key: str) -> web.StreamResponse:
        st, rt, method, q = self.state, self.state.rt, request.method, request.query
        if bucket and not key and "requestPayment" in q:
            # The bucket owner's setting: asked and changed without the header.
            return await self._request_payment(request, bucket)
        unsupported = sorted(k for k in q if k in _KNOWN_SUBRESOURCES)
        if unsupported:
            raise err.ApiError(501, "invalid", f"?{unsupported[0]} is not implemented by this "
                               "emulator", xml_code="NotImplemented")
        if not bucket:
            if method == "GET":
                rt.admit("s3_list_buckets", object_request=False)
                return list_buckets(st)
            raise err.ApiError(405, "invalid", "The specified method is not allowed against "
                               "this resource.", xml_code="MethodNotAllowed")
        source = request.headers.get("x-amz-copy-source")
        check_request_payer(st.store, request, bucket,
                            *((copy_source(source)[0],) if source and key else ()))
        if not key:
            return await self._bucket(request, bucket)
        upload_id = q.get("uploadId")
        if method in ("PUT", "POST") and len(key.encode("utf-8", "surrogatepass")) > 1024:
            raise err.ApiError(400, "invalid", "Your key is too long", xml_code="KeyTooLongError")
        if method == "POST" and "uploads" in q:
            rt.admit("s3_initiate")
            return await create(st, request, bucket, key)
        if upload_id is not None:
            if method == "PUT":
                rt.admit("s3_put_part")
                return await upload_part(st, request, bucket, key, upload_id)
            if method == "POST":
                rt.admit("s3_complete")
                return await complete(st, request, bucket, key, upload_id)
            if method == "DELETE":
                rt.admit("s3_abort")
                return await abort(st, bucket, key, upload_id)
            if method == "GET":
                rt.admit("s3_list_parts")
                await rt.first_byte_delay()
                return list_parts(st, request, bucket, key, upload_id)
        elif method in ("GET", "HEAD"):
            rt.admit("s3_get" if method == "GET" else "s3_head")
            return await get_object(st, request, bucket, key)
        elif method == "PUT" and "x-amz-copy-source" in request.headers:
            rt.admit("s3_copy")
            return await copy_object(st, request, bucket, key)
        elif method == "PUT":
            rt.admit("s3_put")
            return await put_object(st, request, bucket, key)
        elif method == "DELETE":
            rt.admit("s3_delete")
            return await delete_object(st, request, bucket, key)
        raise err.ApiError(405, "invalid", "The specified method is not allowed against this "
                           "resource.", xml_code="MethodNotAllowed")

    async def _bucket(self, request: web.BaseRequest, bucket: str) -> web.StreamResponse:
        st, rt, method, q = self.state, self.state.rt, request.method, request.query
        region = {"x-amz-bucket-region": st.region_of(bucket)}
        if method == "HEAD":
            rt.admit("s3_head_bucket", object_request=False)
            st.store.bucket(bucket)
            return web.Response(status=200, headers=region)
        if method == "GET" and "location" in q:
            rt.admit("s3_bucket_location", object_request=False)
            st.store.bucket(bucket)
            # S3 answers an empty constraint for us-east-1.
            value = "" if st.region_of(bucket) == "us-east-1" else st.region_of(bucket)
            return xml_response(xml_doc("LocationConstraint", [], value), region)
        if method == "GET" and "uploads" in q:
            rt.admit("s3_list_uploads")
            await rt.first_byte_delay()
            return list_uploads(st, request, bucket)
        if method == "GET":
            rt.admit("s3_list")
            return await list_objects(st, request, bucket)
        if method == "POST" and "delete" in q:
            rt.admit("s3_delete_objects")
            return await delete_objects(st, request, bucket)
        if method == "PUT":
            rt.admit("s3_bucket_create", object_request=False)
            body = await rt.read_body(request)
            # An optional CreateBucketConfiguration names the bucket's region.
            location = ""
            if body.strip():
                location = next((el.text or "" for el in parse_xml(body).iter()
                                 if el.tag.rsplit("}", 1)[-1] == "LocationConstraint"), "")
            st.store.create_bucket(bucket)
            if location:
                st.records.bucket_regions[bucket] = location.strip()
            return web.Response(status=200, headers={"Location": f"/{bucket}"})
        if method == "DELETE":
            rt.admit("s3_bucket_delete", object_request=False)
            st.store.delete_bucket(bucket)
            st.records.bucket_regions.pop(bucket, None)
            return web.Response(status=204)
        raise err.ApiError(405, "invalid", "The specified method is not allowed against this "
                           "resource.", xml_code="MethodNotAllowed")

    async def _request_payment(self, request: web.BaseRequest,
                               bucket: str) -> web.StreamResponse:
        """GetBucketRequestPayment / PutBucketRequestPayment: whether the
        requester pays (:func:`~aioflux.testing._billing.check_request_payer`)."""
        rt = self.state.rt
        found = self.state.store.bucket(bucket)
        if request.method == "GET":
            rt.admit("s3_bucket_request_payment", object_request=False)
            payer = "Requester" if found.requester_pays else "BucketOwner"
            return xml_response(xml_doc("RequestPaymentConfiguration", [("Payer", payer)]))
        if request.method == "PUT":
            rt.admit("s3_bucket_request_payment", object_request=False)
            body = await rt.read_body(request)
            payer = next((el.text or "" for el in parse_xml(body).iter()
                          if el.tag.rsplit("}", 1)[-1] == "Payer"), "").strip()
            if payer not in ("Requester", "BucketOwner"):
                raise malformed_xml()
            found.requester_pays = payer == "Requester"
            return web.Response(status=200)
        raise err.ApiError(405, "invalid", "The specified method is not allowed against this "
                           "resource.", xml_code="MethodNotAllowed")
