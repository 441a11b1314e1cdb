"""An S3 answer declaring entities is refused, not expanded.

S3 never sends a DTD. ElementTree expands a document's internal entities
(expat refuses only past 8 MiB and 100 times the input), so a 5 KiB answer
to CreateMultipartUpload made an 8 MB upload id, and an answer at the
64 MiB cap of a metadata document could take GBs: the cap bounded nothing.
The listing parser (lxml) resolves no entities; the other answers now
refuse a DTD as well, before anything is expanded.
"""

from __future__ import annotations

import os

import pytest
from aiohttp import web

from aioflux import ClientConfig, ProtocolError, RetryPolicy, S3Store
from tests.servers.web_server import Served, Server

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
# 1,000 x 1,000 x 8 = 8 MB of text from a 5 KiB document.
EXPANDING = ('<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "' + "x" * 1000 + '">'
             '<!ENTITY b "' + "&a;" * 1000 + '"><!ENTITY c "' + "&b;" * 8 + '">]>'
             f"<InitiateMultipartUploadResult {NS}><UploadId>&c;</UploadId>"
             "</InitiateMultipartUploadResult>").encode()


async def test_an_answer_with_a_dtd_is_refused_before_its_entities_expand() -> None:
    assert len(EXPANDING) < 5 << 10

    async def answer(request: web.Request, served: Served) -> web.Response:
        if request.method == "POST" and "uploads" in request.query:
            return web.Response(body=EXPANDING, content_type="application/xml")
        return web.Response(status=204)

    async with Server(answer) as (endpoint, served), S3Store(
            ClientConfig(retry=RetryPolicy(max_attempts=1)), endpoint=endpoint,
            region="us-east-1", addressing="path", anonymous=True) as store:
        upload = store.start_upload("bkt", "big")
        with pytest.raises(ProtocolError, match=r"^initiate multipart upload s3://bkt/big "
                                                r"failed: .*DTD") as caught:
            await upload.put(1, memoryview(os.urandom(5 << 20)))
        assert (caught.value.bucket, caught.value.name) == ("bkt", "big")
        await upload.abort()
        # No part went up under an upload id the server never named.
        assert served.paths == ["POST /bkt/big?uploads"]


async def test_an_answer_without_a_dtd_still_parses() -> None:
    async def answer(request: web.Request, served: Served) -> web.Response:
        if request.method == "POST" and "uploads" in request.query:
            return web.Response(body=f'<?xml version="1.0" encoding="UTF-8"?>\n'
                                     f"<InitiateMultipartUploadResult {NS}><UploadId>U&amp;1"
                                     "</UploadId></InitiateMultipartUploadResult>".encode(),
                                content_type="application/xml")
        return web.Response(status=204)

    async with Server(answer) as (endpoint, _), S3Store(
            ClientConfig(retry=RetryPolicy(max_attempts=1)), endpoint=endpoint,
            region="us-east-1", addressing="path", anonymous=True) as store:
        assert await store._multipart.initiate("bkt", "big", "text/plain") == "U&1"


def test_a_dtd_in_utf16_is_refused_too() -> None:
    # "<!DOCTYPE" is other bytes in UTF-16, which expat reads as well: the
    # quick look for it must not let such a document through.
    from aioflux._net.transport import Op
    from aioflux._net.xml_doctype import refuse_doctype

    doc = ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE r [<!ENTITY a "aaaa">]>'
           '<r>&a;</r>')
    for raw in (doc.encode("utf-16"), doc.encode("utf-16-le"), doc.encode("utf-16-be")):
        with pytest.raises(ProtocolError, match="declares a DTD"):
            refuse_doctype(raw, Op("upload", "bkt", "o", "s3"))
    refuse_doctype(doc.replace('<!DOCTYPE r [<!ENTITY a "aaaa">]>', "").replace("&a;", "x")
                   .encode("utf-16"), Op("upload", "bkt", "o", "s3"))
