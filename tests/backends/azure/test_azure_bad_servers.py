"""Hostile Azure servers: no read returns wrong bytes, no listing trusts a
bomb, no upload publishes the wrong size, no credential leaves the
endpoint or shows in a message.

A scripted server (asyncio, plain or TLS on 127.0.0.1) answers what the
Blob service never would: redirects, ranges other than asked, short and
cut bodies, bytes that fail the blob's crc32c or MD5, a block list that
commits another size, XML entity bombs, and error bodies that echo the
request's SAS or token. Each credential (an account key signing SAS
tokens, a SAS as given, a bearer token from a token credential over HTTPS)
is checked to reach this endpoint only.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import re
import ssl
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aioflux import (
    ChecksumMismatch,
    ClientConfig,
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ProtocolError,
    RetryPolicy,
    StorageError,
)
from aioflux._core.integrity.crc import Crc32c, crc32c, encode_crc32c
from aioflux._net.transport import Op
from aioflux.azure import AzureStore
from tests.servers.azurite import KEY
from tests.servers.raw_server import Listener
from tests.servers.tls_cert import self_signed

OBJ = bytes(range(256)) * 400  # 102,400 bytes
RETRY = RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0)
LEAN = pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
_RANGE = re.compile(rb"\r\n(?:x-ms-)?range: *bytes=(\d+)-(\d*)\r\n", re.IGNORECASE)
Answer = bytes | tuple[bytes, str] | None


def http(status: str, body: bytes = b"", **headers: str) -> bytes:
    # A keyword's "_" is a "-" of the header's name, "__" a "_".
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('__', '~').replace('_', '-').replace('~', '_')}: {value}"
              for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Script:
    """A scripted server: ``answer(method, target, head)`` gives the bytes
    to send (``(data, "close")`` closes after them), and every request's
    head and body is kept."""

    def __init__(self, answer: Callable[[str, str, bytes], Answer],
                 tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.tls = tls
        self.requests: list[bytes] = []
        self.bodies: list[bytes] = []
        self._listener = Listener(self._serve, tls=tls)

    async def __aenter__(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{await self._listener.start()}/acct"

    async def __aexit__(self, *exc: object) -> None:
        await self._listener.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                    return  # the client left, or the server is closing
                length = re.search(rb"\r\ncontent-length: *(\d+)", head, re.IGNORECASE)
                body = await reader.readexactly(int(length[1])) if length else b""
                self.requests.append(head)
                self.bodies.append(body)
                method, target = head.split(b" ", 2)[:2]
                answer = self.answer(method.decode(), target.decode(), head)
                if answer is None:
                    return
                data, then = answer if isinstance(answer, tuple) else (answer, "")
                writer.write(data)
                await writer.drain()
                if then:
                    return
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            writer.close()

    def heads(self, method: str) -> list[bytes]:
        return [h for h in self.requests if h.startswith(method.encode() + b" ")]


def blob_answer(data: bytes = OBJ, *, crc: int | None = None, md5: bool = False,
                short: int | None = None, cut: int | None = None,
                etag: str = '"0x8DC0000000000A1"',
                coding: str | None = None) -> Callable[[str, str, bytes], Answer]:
    """Get Blob of ``data``, honouring the range, with faults; ``coding`` is
    the blob's ``Content-Encoding`` (``data`` is then its stored bytes)."""

    def answer(method: str, target: str, head: bytes) -> Answer:
        match = _RANGE.search(head)
        first, last, status = 0, len(data) - 1, "200 OK"
        if match is not None:
            first, status = int(match[1]), "206 Partial Content"
            if match[2]:
                last = min(last, int(match[2]))
        if short is not None:
            last, status = min(last, first + short - 1), "206 Partial Content"
        body = data[first:last + 1]
        headers = {"ETag": etag, "x_ms_blob_type": "BlockBlob"}
        if coding is not None:
            headers["Content_Encoding"] = coding
        if crc is not None:
            headers["x_ms_meta_aioflux__crc32c"] = encode_crc32c(crc)
        if md5:
            digest = base64.b64encode(hashlib.md5(data).digest()).decode()
            headers["x_ms_blob_content_md5" if status.startswith("206") else "Content_MD5"] = \
                digest
        if status.startswith("206"):
            headers["Content_Range"] = f"bytes {first}-{last}/{len(data)}"
        response = http(status, body, **headers)
        if cut is not None and cut < len(body):
            return response[:len(response) - len(body) + cut], "close"
        return response

    return answer


def store_at(endpoint: str, lean: bool = True, **kw: Any) -> AzureStore:
    kw.setdefault("sas_token", "sv=2023-11-03&ss=b&srt=sco&sp=rwdl&se=2099-01-01&sig=SECRETSIG%3D")
    return AzureStore(ClientConfig(lean_reads=lean, retry=RETRY, max_concurrency=4),
                      endpoint=endpoint, **kw)


# -- reads ---------------------------------------------------------------------------------


@LEAN
async def test_redirects_are_errors_on_every_path(lean: bool) -> None:
    elsewhere = Script(lambda m, t, h: http("200 OK", b"<html>login</html>"))
    async with elsewhere as other:
        server = Script(lambda m, t, h: (http("302 Found", b"" if m == "HEAD" else b"moved",
                                              Location=f"{other}/x", Connection="close"),
                                         "close"))
        async with server as base, store_at(base, lean) as store:
            upload = store.start_upload("ctr", "o", content_type="a/b", part_size=10)
            calls = {
                "read": store.read("ctr", "o"),
                "ranged read": store.read("ctr", "o", start=5, end=10),
                "stat": store.stat("ctr", "o"),
                "list": store.list("ctr").__anext__(),
                "delete": store.delete("ctr", "o"),
                "copy": store.copy("ctr", "o", "ctr", "o2"),
                "write": store.write("ctr", "o", b"0123456789"),
                "block": upload.put(1, memoryview(b"0123456789")),
            }
            for what, call in calls.items():
                with pytest.raises(ProtocolError, match="HTTP 302") as info:
                    await call
                assert info.value.attempts == 1, what
    assert elsewhere.requests == []


@LEAN
@pytest.mark.parametrize(("answer", "read", "message"), [
    (http("206 Partial Content", b"ABCDEFGHIJ", Content_Range="bytes 0-9/20", ETag='"0x1"'),
     {"start": 10, "end": 20}, "Content-Range bytes 0-9/20"),
    (http("206 Partial Content", b"ABCDEFGHIJ", ETag='"0x1"'), {"start": 10, "end": 20},
     "without a valid Content-Range"),
    (http("206 Partial Content", b"ABCDE", Content_Range="bytes 10-19/20", ETag='"0x1"'),
     {"start": 10, "end": 20}, "Content-Length 5 disagrees"),
    (http("200 OK", b"ABCDEFGHIJ", ETag='"0x1"'), {"start": 2, "end": 4}, "whole object"),
])
async def test_a_range_other_than_asked_is_refused(lean: bool, answer: bytes,
                                                   read: dict[str, int], message: str) -> None:
    async with Script(lambda m, t, h: answer) as base, store_at(base, lean) as store:
        with pytest.raises(ProtocolError, match=message):
            await store.read("ctr", "o", **read)


@LEAN
async def test_short_and_cut_bodies_resume_and_stay_checked(lean: bool) -> None:
    for faults in ({"short": 30_000}, {"cut": 40_000}):
        server = Script(blob_answer(crc=crc32c(OBJ), **faults))  # type: ignore[arg-type]
        async with server as base, store_at(base, lean) as store:
            assert await store.read("ctr", "o") == OBJ
        ranges = [m[1] for h in server.requests if (m := _RANGE.search(h))]
        assert len(server.requests) >= 3 and ranges[0] != b"0", faults
        # Every resumed attempt pins the version the first answer came from.
        assert all(b'if-match: "0x8dc0000000000a1"' in h.lower()
                   for h in server.requests[1:]), faults


@LEAN
@pytest.mark.parametrize("check", ["crc32c", "md5"])
async def test_bytes_failing_the_blobs_crc32c_or_md5_are_a_checksum_mismatch(
        lean: bool, check: str) -> None:
    corrupt = bytearray(OBJ)
    corrupt[5000] ^= 1
    # The crc32c aioflux stored in the metadata, else Azure's MD5 of the blob.
    answer = blob_answer(bytes(corrupt), crc=crc32c(OBJ)) if check == "crc32c" else None
    if check == "md5":
        good = base64.b64encode(hashlib.md5(OBJ).digest()).decode()

        def answer(m: str, t: str, h: bytes) -> Answer:
            return http("200 OK", bytes(corrupt), ETag='"0x1"', Content_MD5=good)
    assert answer is not None
    server = Script(answer)
    async with server as base, store_at(base, lean) as store:
        # The MD5 is the blob's Content-MD5 (not an ETag, as S3's).
        with pytest.raises(ChecksumMismatch,
                           match="MD5 .* its Content-MD5" if check == "md5" else check):
            await store.read("ctr", "o")
        # A whole blob assembled from ranges is held to the same crc32c.
        if check == "crc32c":
            with pytest.raises(ChecksumMismatch):
                await store.fetch("ctr", "o", size=len(OBJ), crc=crc32c(OBJ))
    assert len(server.requests) >= 3  # retried before giving up


@LEAN
@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@pytest.mark.parametrize("checked", ["md5", "unchecked"])
async def test_a_content_coded_blob_reads_as_its_stored_bytes(lean: bool, coding: str,
                                                             checked: str) -> None:
    # Azure never transforms a blob: one stored with Content-Encoding comes
    # back coded whatever the request accepts, and its Content-MD5 is of
    # the coded bytes. Decoded, they failed their MD5 every time, or (a
    # block list's blob has no MD5) were silently other bytes.
    stored = gzip.compress(OBJ) if coding == "gzip" else zlib.compress(OBJ)
    server = Script(blob_answer(stored, md5=checked == "md5", coding=coding))
    async with server as base, store_at(base, lean) as store:
        assert await store.read("ctr", "o") == stored
        assert await store.read("ctr", "o", start=10, end=30) == stored[10:30]
        assert (await store.fetch("ctr", "o", size=len(stored))).data == stored
        assert store.stats.lean_fallbacks == 0  # read where it arrived
    assert len(server.requests) == 3  # each at the first attempt
    assert all(b"accept-encoding: identity" in h.lower() for h in server.requests)


# -- listings --------------------------------------------------------------------------------


BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lollollollollollollollollollol">
<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
<!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
<!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
<!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
<!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
<!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">]>
<EnumerationResults><Blobs><Blob><Name>&lol9;</Name><Properties>
<Content-Length>1</Content-Length><Etag>0x1</Etag></Properties></Blob></Blobs>
<NextMarker/></EnumerationResults>"""
EXTERNAL = b"""<?xml version="1.0"?>
<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<EnumerationResults><Blobs><Blob><Name>&x;</Name><Properties>
<Content-Length>1</Content-Length><Etag>0x1</Etag></Properties></Blob></Blobs>
<NextMarker/></EnumerationResults>"""


def _page(*names: str, marker: str = "") -> bytes:
    blobs = "".join(f"<Blob><Name>{n}</Name><Properties><Content-Length>1</Content-Length>"
                    f"<Etag>0x{i + 1:X}</Etag></Properties></Blob>" for i, n in enumerate(names))
    return (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs>{blobs}'
            f"</Blobs><NextMarker>{marker}</NextMarker></EnumerationResults>").encode()


@pytest.mark.parametrize("document", [BOMB, EXTERNAL], ids=["billion-laughs", "external"])
async def test_xml_entities_are_refused_not_expanded(document: bytes) -> None:
    server = Script(lambda m, t, h: http("200 OK", document, Content_Type="application/xml"))
    started = time.process_time()
    async with server as base, store_at(base) as store:
        with pytest.raises(StorageError, match="XML") as refused:
            [o async for o in store.list_objects("ctr")]
    assert time.process_time() - started < 5  # a bounded parse, nothing expanded
    assert "root:" not in str(refused.value) and "lollol" not in str(refused.value)


@pytest.mark.parametrize(("pages", "prefix", "message"), [
    ([_page("b", "b")], "", "'b' twice"),
    ([_page("a", marker="m1"), _page("b", "a")], "", "'a' twice"),
    ([_page("a", marker="m1"), _page("b", marker="m1")], "", "page token"),
    ([_page("zzz/outside")], "a", "not under the prefix"),
])
async def test_a_page_breaking_the_listing_promise_is_refused(pages: list[bytes], prefix: str,
                                                              message: str) -> None:
    served = iter(pages)
    server = Script(lambda m, t, h: http("200 OK", next(served)))
    async with server as base, store_at(base) as store:
        with pytest.raises(ProtocolError, match=message):
            [o async for o in store.list_objects("ctr", prefix)]


async def test_a_kept_promise_lists_every_page_with_its_marker() -> None:
    pages = iter([_page("a", "b", marker="2!opaque/+="), _page("c")])
    server = Script(lambda m, t, h: http("200 OK", next(pages)))
    async with server as base, store_at(base) as store:
        assert [o.name async for o in store.list_objects("ctr")] == ["a", "b", "c"]
    assert b"marker=2%21opaque%2F%2B%3D" in server.requests[1]


@pytest.mark.parametrize("names", [
    ("a\U0001F600", "a\ue000", "b"),  # UTF-16 code units: a surrogate before U+E000
    ("Path A", "Path A/dat1", "Path A-B", "Path A-B/dat2"),  # a hierarchical namespace
], ids=["utf-16", "hns"])
async def test_azures_own_order_lists(names: tuple[str, ...]) -> None:
    pages = iter([_page(*names[:2], marker="m1"), _page(*names[2:])])
    server = Script(lambda m, t, h: http("200 OK", next(pages)))
    async with server as base, store_at(base) as store:
        assert [o.name async for o in store.list_objects("ctr")] == list(names)


def _hns_page(delimited: bool) -> bytes:
    # What List Blobs answers on an account with a hierarchical namespace
    # (API 2020-10-02 on): every directory is an entry too, 0 bytes, marked
    # by its ResourceType (and azure's hdi_isfolder metadata).
    def entry(name: str, kind: str, size: int) -> str:
        meta = "<Metadata><hdi_isfolder>true</hdi_isfolder></Metadata>" if kind == "directory" \
            else ""
        return (f"<Blob><Name>{name}</Name><Properties><Content-Length>{size}</Content-Length>"
                f"<Etag>0x{len(name):X}</Etag><ResourceType>{kind}</ResourceType></Properties>"
                f"{meta}</Blob>")

    if delimited:
        blobs = entry("data", "directory", 0) + "<BlobPrefix><Name>data/</Name></BlobPrefix>" \
            + entry("top.bin", "file", 3)
    else:
        blobs = "".join((entry("data", "directory", 0), entry("data/a.bin", "file", 5),
                         entry("data/sub", "directory", 0), entry("data/sub/b.bin", "file", 7),
                         entry("top.bin", "file", 3)))
    return (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs>{blobs}'
            f"</Blobs><NextMarker/></EnumerationResults>").encode()


async def test_a_hierarchical_namespaces_directories_are_not_listed_as_blobs() -> None:
    # Else every directory of an abfss:// account was a 0-byte object: read
    # as an empty sample, copied as an empty file where a folder belongs.
    pages = iter([_hns_page(False), _hns_page(True)])
    server = Script(lambda m, t, h: http("200 OK", next(pages)))
    async with server as base, store_at(base) as store:
        flat = [(o.name, o.size) async for o in store.list_objects("ctr")]
        (page,) = [p async for p in store.list("ctr", delimiter="/")]
    assert flat == [("data/a.bin", 5), ("data/sub/b.bin", 7), ("top.bin", 3)]
    assert [o.name for o in page.objects] == ["top.bin"] and page.prefixes == ["data/"]


async def test_names_past_the_end_offset_are_dropped_not_the_end_of_the_listing() -> None:
    # In path order "Path A/dat1" (past the end: '/' > '.') comes before
    # "Path A-B" (below it: '-' < '.'): the listing goes on past the first
    # name beyond the end.
    pages = iter([_page("Path A", "Path A/dat1", marker="m1"), _page("Path A-B", "Path B")])
    server = Script(lambda m, t, h: http("200 OK", next(pages)))
    async with server as base, store_at(base) as store:
        got = [o.name async for o in store.list_objects("ctr", end_offset="Path A.")]
    assert got == ["Path A", "Path A-B"] and len(server.requests) == 2


# -- uploads -----------------------------------------------------------------------------------


async def test_a_block_list_that_commits_another_size_is_deleted_and_raised() -> None:
    data = b"x" * 2500

    def answer(method: str, target: str, head: bytes) -> Answer:
        if method == "PUT":
            return http("201 Created", ETag='"0x2A"')
        if method == "HEAD":
            # The committed blob is shorter than what was sent.
            return http("200 OK", ETag='"0x2A"', x_ms_meta_aioflux__crc32c=encode_crc32c(
                crc32c(data)))
        if method == "DELETE":
            return http("202 Accepted")
        return http("500 Internal Server Error")

    server = Script(answer)
    async with server as base, store_at(base) as store:
        upload = store.start_upload("ctr", "o", content_type="a/b", part_size=1000)
        await upload.put(1, memoryview(data)[:1000])
        await upload.put(2, memoryview(data)[1000:2000])
        expected = Crc32c()
        expected.update(data)
        with pytest.raises(ChecksumMismatch, match="committed 0 bytes") as failed:
            await upload.finish(3, memoryview(data)[2000:], expected)
        assert "was deleted" in str(failed.value)
    (deleted,) = server.heads("DELETE")
    assert b'if-match: "0x2a"' in deleted.lower()  # that version only
    commit = next(b for h, b in zip(server.requests, server.bodies, strict=True)
                  if b"comp=blocklist" in h)
    ids = re.findall(rb"<Latest>([^<]+)</Latest>", commit)
    assert len(ids) == 3 and len({len(i) for i in ids}) == 1  # equal-length ids, in order
    assert [base64.b64decode(i)[-5:] for i in ids] == [b"00001", b"00002", b"00003"]


async def test_a_put_blob_answer_with_another_md5_is_deleted_and_raised() -> None:
    def answer(method: str, target: str, head: bytes) -> Answer:
        if method == "PUT":
            return http("201 Created", ETag='"0x7"', Content_MD5=base64.b64encode(
                hashlib.md5(b"other").digest()).decode())
        return http("202 Accepted")

    server = Script(answer)
    async with server as base, store_at(base) as store:
        with pytest.raises(ChecksumMismatch, match="MD5"):
            await store.write("ctr", "o", b"payload")
    put, = server.heads("PUT")
    assert base64.b64encode(hashlib.md5(b"payload").digest()) in put  # Content-MD5 sent
    assert b'if-match: "0x7"' in server.heads("DELETE")[0].lower()


# -- copies ------------------------------------------------------------------------------------


COPIED = b"x" * 1000
COPIED_MD5 = base64.b64encode(hashlib.md5(COPIED).digest()).decode()


def _copy_answer(*looks: bytes) -> Callable[[str, str, bytes], Answer]:
    """A source of COPIED, a Copy Blob answered 202 pending (its ETag the
    empty blob's), then the destination's HEADs: ``looks``, the last one
    again and again."""
    seen = iter(looks)
    last = looks[-1]

    def answer(method: str, target: str, head: bytes) -> Answer:
        nonlocal last
        if method == "HEAD" and "/src" in target:
            return _sized(http("200 OK", ETag='"0x1"', Content_MD5=COPIED_MD5,
                               x_ms_meta_aioflux__crc32c=encode_crc32c(crc32c(COPIED))),
                          len(COPIED))
        if method == "PUT" and "comp=copy" in target:
            return http("204 No Content")
        if method == "PUT":
            return http("202 Accepted", ETag='"0x2"', x_ms_copy_status="pending",
                        x_ms_copy_id="id1")
        if method == "HEAD":
            last = next(seen, last)
            return last
        return http("202 Accepted")

    return answer


def _sized(head: bytes, size: int) -> bytes:
    # A HEAD's Content-Length is the blob's size, with no body after it.
    return head.replace(b"Content-Length: 0", f"Content-Length: {size}".encode(), 1)


def _look(status: str, etag: str = '"0x2"', size: int = 0, md5: str | None = None,
          **headers: str) -> bytes:
    if md5 is not None:
        headers["Content_MD5"] = md5
    return _sized(http("200 OK", ETag=etag, x_ms_copy_status=status, x_ms_copy_id="id1",
                       x_ms_meta_aioflux__crc32c=encode_crc32c(crc32c(COPIED)), **headers),
                  size)


def _request_lines(server: Script) -> list[str]:
    return [h.split(b"\r\n")[0].decode().split("?sv=")[0].split("&sv=")[0]
            for h in server.requests]


async def test_a_pending_copy_is_the_blob_the_head_reporting_success_describes() -> None:
    done = _look("success", '"0x3"', len(COPIED), COPIED_MD5)
    server = Script(_copy_answer(_look("pending"), done))
    async with server as base, store_at(base) as store:
        info = await store.copy("ctr", "src", "ctr", "dst")
    # Not the ETag of the empty blob the copy started with (0x2).
    assert info.generation == 0x3 and info.size == len(COPIED)
    assert server.heads("DELETE") == []


async def test_a_pending_copy_that_completes_wrong_is_deleted_and_raised() -> None:
    wrong = base64.b64encode(hashlib.md5(COPIED[:999]).digest()).decode()
    server = Script(_copy_answer(_look("pending"), _look("success", '"0x3"', 999, wrong)))
    async with server as base, store_at(base) as store:
        with pytest.raises(ChecksumMismatch, match="size and MD5 differ") as failed:
            await store.copy("ctr", "src", "ctr", "dst")
    assert "az://ctr/dst" in str(failed.value) and "was deleted" in str(failed.value)
    (deleted,) = server.heads("DELETE")
    assert b'if-match: "0x3"' in deleted.lower()  # the completed copy, exactly


@pytest.mark.parametrize("state", ["failed", "aborted"])
async def test_a_copy_that_fails_is_raised_and_what_it_left_deleted(state: str) -> None:
    # Azure leaves an empty blob carrying the source's metadata.
    server = Script(_copy_answer(_look("pending"), _look(
        state, '"0x4"', x_ms_copy_status_description="500 InternalError Copy failed "
                                                     "sig=LEAKED")))
    async with server as base, store_at(base) as store:
        with pytest.raises(StorageError) as failed:
            await store.copy("ctr", "src", "ctr", "dst")
    message = str(failed.value)
    assert f"the copy ended {state!r} (500 InternalError Copy failed" in message
    assert "LEAKED" not in message and "az://ctr/dst" in message
    assert (failed.value.bucket, failed.value.name, failed.value.reason) == ("ctr", "dst", state)
    (deleted,) = server.heads("DELETE")
    assert b'if-match: "0x4"' in deleted.lower()


async def test_a_copy_pending_past_the_deadline_is_aborted_and_deleted() -> None:
    server = Script(_copy_answer(_look("pending"), _look("aborted", '"0x5"')))
    # A deadline shorter than the first wait between looks: aborted after one.
    config = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0,
                                            deadline=0.001))
    async with server as base, AzureStore(config, endpoint=base,
                                          sas_token="sv=2023&sig=SECRETSIG%3D") as store:
        with pytest.raises(StorageError, match=r"still pending at RetryPolicy\.deadline") as late:
            await store.copy("ctr", "src", "ctr", "dst")
    assert "az://ctr/dst" in str(late.value) and late.value.reason == "CopyPending"
    assert _request_lines(server) == [
        "HEAD /acct/ctr/src", "PUT /acct/ctr/dst", "HEAD /acct/ctr/dst",
        "PUT /acct/ctr/dst?comp=copy&copyid=id1", "HEAD /acct/ctr/dst", "DELETE /acct/ctr/dst"]
    abort = server.requests[3]
    assert b"x-ms-copy-action: abort" in abort.lower()
    # What the abort left (looked at again after it), exactly.
    assert b'if-match: "0x5"' in server.heads("DELETE")[0].lower()


async def test_a_copy_written_over_while_pending_is_left_alone() -> None:
    other = _sized(http("200 OK", ETag='"0x9"'), 5)  # a write: no copy properties
    server = Script(_copy_answer(_look("pending"), other))
    async with server as base, store_at(base) as store:
        with pytest.raises(Conflict, match="replaced while the copy was pending"):
            await store.copy("ctr", "src", "ctr", "dst")
    assert server.heads("DELETE") == []


@pytest.mark.parametrize("status", ["pending", "success"])
async def test_a_copy_whose_destination_is_deleted_meanwhile_is_the_copys_not_found(
        status: str) -> None:
    # Deleted while the copy was pending, or just after it succeeded: the
    # error is the copy's, not that of the HEAD that found the blob gone.
    def answer(method: str, target: str, head: bytes) -> Answer:
        if method == "PUT":
            return http("202 Accepted", ETag='"0x2"', x_ms_copy_status=status,
                        x_ms_copy_id="id1")
        if "/src" in target:
            return _copy_answer(_look("pending"))(method, target, head)
        return http("404 The specified blob does not exist.", x_ms_error_code="BlobNotFound")

    server = Script(answer)
    async with server as base, store_at(base) as store:
        with pytest.raises(NotFound) as failed:
            await store.copy("ctr", "src", "ctr", "dst")
    assert (failed.value.operation, failed.value.bucket, failed.value.name) == (
        "copy", "ctr", "dst")
    assert str(failed.value).startswith("copy az://ctr/dst failed")
    assert server.heads("DELETE") == []


# -- credentials: only to the endpoint, never in a message ---------------------------------------


ECHO_SAS = "sv=2023-11-03&ss=b&srt=sco&sp=rwdl&se=2099-01-01&sig=SECRETSIG%3D"


def _echo(method: str, target: str, head: bytes) -> Answer:
    # An error body that repeats the whole request, credentials and all.
    text = head.decode("latin-1").replace("&", "&amp;").replace("<", "&lt;")
    body = (f"<?xml version='1.0'?><Error><Code>AuthorizationFailure</Code><Message>"
            f"denied: {text}</Message></Error>").encode()
    return http("403 Forbidden", body, Content_Type="application/xml")


def _assert_clean(message: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in message, message
    assert "az://ctr/o" in message


@LEAN
async def test_an_echoed_sas_is_redacted(lean: bool) -> None:
    server = Script(_echo)
    async with server as base, store_at(base, lean, sas_token=ECHO_SAS) as store:
        for call in (store.read("ctr", "o"), store.write("ctr", "o", b"x")):
            with pytest.raises(PermissionDenied) as denied:
                await call
            _assert_clean(str(denied.value), "SECRETSIG", ECHO_SAS)
    assert all(b"sig=SECRETSIG%3D" in h for h in server.requests)  # sent, to it only


async def test_an_echoed_key_signed_sas_is_redacted() -> None:
    server = Script(_echo)
    async with server as base, store_at(base, sas_token=None, account="acct",
                                        account_key=KEY) as store:
        with pytest.raises(PermissionDenied) as denied:
            await store.read("ctr", "o")
    sig = re.search(rb"sig=([^& ]+)", server.requests[0])
    assert sig is not None
    _assert_clean(str(denied.value), sig[1].decode(), KEY)


@pytest.mark.parametrize("code", ["AuthenticationFailed", "AuthorizationFailure"])
async def test_a_key_signed_sas_refused_with_a_403_is_signed_anew_once(
        code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import azure.storage.blob as blob

    signed = 0
    sign = blob.generate_account_sas

    def counted(*args: object, **kwargs: object) -> str:
        nonlocal signed
        signed += 1
        return f"{sign(*args, **kwargs)}&n={signed}"  # type: ignore[arg-type]

    monkeypatch.setattr(blob, "generate_account_sas", counted)
    refused = http("403 Forbidden", f"<Error><Code>{code}</Code></Error>".encode())
    answers = iter([refused])

    def answer(method: str, target: str, head: bytes) -> Answer:
        return next(answers, None) or blob_answer(crc=crc32c(OBJ))(method, target, head)

    server = Script(answer)
    async with server as base, store_at(base, sas_token=None, account="acct",
                                        account_key=KEY) as store:
        assert await store.read("ctr", "o") == OBJ
        assert store.stats.retries_by_cause.get("PermissionDenied") == 1
    assert signed == 2
    assert b"&n=1 " in server.requests[0] and b"&n=2 " in server.requests[1]
    # Refused again: raised after one renewal, not a loop.
    server = Script(lambda m, t, h: refused)
    async with server as base, store_at(base, sas_token=None, account="acct",
                                        account_key=KEY) as store:
        with pytest.raises(PermissionDenied):
            await store.read("ctr", "o")
    assert len(server.requests) == 2
    # A SAS given as is cannot be renewed: one request.
    server = Script(lambda m, t, h: refused)
    async with server as base, store_at(base) as store:
        with pytest.raises(PermissionDenied):
            await store.read("ctr", "o")
    assert len(server.requests) == 1


class FakeCredential:
    """A token credential as azure-identity's: ``get_token(scope)``."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    def get_token(self, *scopes: str, **kwargs: object) -> Any:
        from azure.core.credentials import AccessToken

        self.scopes.extend(scopes)
        return AccessToken(f"TOKEN{len(self.scopes)}SECRET", int(time.time()) + 3600)


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    server, _ = self_signed(tmp_path)
    return server, str(tmp_path / "cert.pem")


async def test_a_bearer_token_goes_to_the_https_endpoint_only(
        tls: tuple[ssl.SSLContext, str]) -> None:
    context, ca_file = tls
    credential = FakeCredential()
    other = Script(lambda m, t, h: http("200 OK", OBJ), tls=context)
    async with other as elsewhere:
        home = Script(_echo, tls=context)
        async with home as base, AzureStore(
                ClientConfig(retry=RETRY, ca_file=ca_file), endpoint=base,
                credential=credential) as store:
            with pytest.raises(PermissionDenied) as denied:
                await store.read("ctr", "o")
            _assert_clean(str(denied.value), "TOKEN1SECRET", "TOKEN2SECRET")
            # Off the endpoint's origin, no token.
            await store.transport.get_media(Op("read", "ctr", "o", "az"), f"{elsewhere}/x",
                                            lambda resp: resp)
    assert credential.scopes[0] == "https://storage.azure.com/.default"
    assert all(b"authorization: bearer token" in h.lower() for h in home.requests)
    assert b"authorization" not in other.requests[0].lower()
    assert b"x-ms-version: " in home.requests[0].lower()
    # A 403 is no 401: the token was not renewed for it.
    assert len(credential.scopes) == 1


async def test_a_401_renews_the_token_once(tls: tuple[ssl.SSLContext, str]) -> None:
    context, ca_file = tls
    credential = FakeCredential()
    answers = iter([http("401 Unauthorized", b"<Error><Code>InvalidAuthenticationInfo</Code>"
                                             b"</Error>")])

    def answer(method: str, target: str, head: bytes) -> Answer:
        return next(answers, None) or blob_answer(crc=crc32c(OBJ))(method, target, head)

    server = Script(answer, tls=context)
    async with server as base, AzureStore(ClientConfig(retry=RETRY, ca_file=ca_file),
                                          endpoint=base, credential=credential) as store:
        assert await store.read("ctr", "o") == OBJ
    assert len(credential.scopes) == 2
    assert b"TOKEN1SECRET" in server.requests[0] and b"TOKEN2SECRET" in server.requests[1]


async def test_a_copy_sent_again_after_a_401_authorizes_its_source_anew(
        tls: tuple[ssl.SSLContext, str]) -> None:
    context, ca_file = tls
    credential = FakeCredential()
    puts = 0
    done = _look("success", etag='"0x3"', size=len(COPIED), md5=COPIED_MD5)

    def answer(method: str, target: str, head: bytes) -> Answer:
        nonlocal puts
        if method == "PUT":
            puts += 1
            if puts == 1:
                return http("401 Unauthorized",
                            b"<Error><Code>InvalidAuthenticationInfo</Code></Error>")
            return http("202 Accepted", ETag='"0x3"', x_ms_copy_status="success",
                        x_ms_copy_id="id1")
        return _copy_answer(done)(method, target, head)

    server = Script(answer, tls=context)
    async with server as base, AzureStore(ClientConfig(retry=RETRY, ca_file=ca_file),
                                          endpoint=base, credential=credential) as store:
        assert (await store.copy("ctr", "src", "ctr", "dst")).size == len(COPIED)
    sent = [re.findall(rb"(?i)\r\n(authorization|x-ms-copy-source-authorization): ([^\r]+)", h)
            for h in server.heads("PUT")]
    assert [sorted(v for _, v in pair) for pair in sent] == [
        [b"Bearer TOKEN1SECRET"] * 2, [b"Bearer TOKEN2SECRET"] * 2]


def test_a_bearer_token_over_plain_http_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="plain HTTP, and Microsoft Entra ID tokens go "
                                              "over HTTPS only"):
        AzureStore(endpoint="http://127.0.0.1:1/acct", credential=FakeCredential())


@LEAN
async def test_a_sas_goes_to_the_endpoint_only(lean: bool) -> None:
    other = Script(lambda m, t, h: http("200 OK", OBJ))
    async with other as elsewhere:
        home = Script(blob_answer(crc=crc32c(OBJ)))
        async with home as base, store_at(base, lean, sas_token=ECHO_SAS) as store:
            assert await store.read("ctr", "o") == OBJ
            await store.transport.get_media(Op("read", "ctr", "o", "az"), f"{elsewhere}/x",
                                            lambda resp: resp)
    assert b"sig=SECRETSIG%3D" in home.requests[0]
    assert b"sig=" not in other.requests[0]
