"""Sizes that lie: memory grows with the bytes that arrive, never with a claim.

A scripted server (tests/servers/raw_server.py) declares an object of 512 MiB (or
2**60 bytes) in its HEAD, object resource and listing, and serves its 10
real bytes. ``aioflux.open(...).read()``, ``Downloader.download_many``, ``ObjectReader``
and the datasets must fail with a typed error naming the object, having
allocated at most the read-ahead or one wave of ranges (measured with
tracemalloc, which counts what the process allocated, however fast the
machine is), where they used to zero-fill the declared size before the
first request.
The local filesystem's analogue: a listing whose size is not the file's.
A size that really does not fit (a process whose address space is capped)
is a typed error too, not a ``MemoryError``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import aioflux
from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    Downloader,
    DownloadOptions,
    ObjectInfo,
    ProtocolError,
    ReaderOptions,
    RetryPolicy,
    StorageError,
)
from aioflux._core.concurrency.portal import get_portal
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._core.records.urls import parse_url
from aioflux._engines.download import WAVE_RANGES
from aioflux._engines.reader import ObjectReader
from aioflux.local import LocalStore
from aioflux.s3 import S3Store
from aioflux.torch import DatasetSettings, ObjectIterableDataset, ObjectMapDataset
from tests.servers.raw_server import RawServer

BODY = b"0123456789"
NAME = "d/obj"
LIE = 512 << 20
# More than any machine can allocate: the old code's MemoryError.
ABSURD = 1 << 60
RETRY = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)
# Small blocks and ranges, so that what the new code may allocate (the
# read-ahead, one wave of ranges: 16 MiB) is far below the lie.
READER = ReaderOptions(block_size=1 << 20, read_ahead=4)
RANGES = DownloadOptions(range_size=1 << 20)
BOUND = 40 << 20
JSON = {"Content-Type": "application/json"}
_RANGE = re.compile(rb"\r\nrange: *bytes=(\d+)-(\d*)\r\n", re.IGNORECASE)


def _http(status: str, body: bytes = b"", *, length: int | None = None,
          headers: Mapping[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body) if length is None else length}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class LiarServer(RawServer):
    """A GCS JSON API or S3 face whose metadata declares ``declared`` bytes
    for ``d/obj`` while its media answers serve the object's 10 real bytes."""

    def __init__(self, scheme: str, declared: int) -> None:
        super().__init__(self._answer)
        self.scheme, self.declared = scheme, declared
        self.media = 0

    def _answer(self, conn: int, index: int) -> bytes:
        head = self.requests[-1]
        method, target = head.split(b" ", 2)[:2]
        url = urlsplit(target.decode())
        query = parse_qs(url.query)
        if self.scheme == "gs":
            if "alt" in query:
                return self._media(head, {"x-goog-generation": "7"})
            resource = {"bucket": "bkt", "name": NAME, "size": str(self.declared),
                        "generation": "7", "crc32c": encode_crc32c(crc32c(BODY))}
            if url.path.endswith("/o"):
                return _http("200 OK", json.dumps({"items": [resource]}).encode(), headers=JSON)
            return _http("200 OK", json.dumps(resource).encode(), headers=JSON)
        etag = '"0123456789abcdef0123456789abcdef"'
        if method == b"HEAD":
            return _http("200 OK", length=self.declared, headers={"ETag": etag})
        if "list-type" in query:
            page = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bkt</Name>'
                    f"<Prefix>{query.get('prefix', [''])[0]}</Prefix><KeyCount>1</KeyCount>"
                    f"<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Contents>"
                    f"<Key>{NAME}</Key><ETag>{etag}</ETag><Size>{self.declared}</Size>"
                    f"</Contents></ListBucketResult>")
            return _http("200 OK", page.encode(), headers={"Content-Type": "application/xml"})
        return self._media(head, {"ETag": etag})

    def _media(self, head: bytes, headers: dict[str, str]) -> bytes:
        # What a store holding the 10 bytes answers: its real size.
        self.media += 1
        match = _RANGE.search(head)
        if match is None:
            return _http("200 OK", BODY, headers=headers)
        first = int(match[1])
        if first >= len(BODY):
            return _http("416 Requested Range Not Satisfiable", headers=headers)
        last = min(len(BODY) - 1, int(match[2])) if match[2] else len(BODY) - 1
        return _http("206 Partial Content", BODY[first:last + 1],
                     headers={"Content-Range": f"bytes {first}-{last}/{len(BODY)}", **headers})


Liar = Callable[[int], tuple[LiarServer, str, Any]]


@pytest.fixture(params=["gs", "s3"])
def liar(request: pytest.FixtureRequest) -> Iterator[Liar]:
    """``liar(declared)``: a running LiarServer, its endpoint and a store on
    it (all on the portal's loop, as the blocking API drives them)."""
    portal = get_portal()
    opened: list[tuple[LiarServer, Any]] = []

    def start(declared: int) -> tuple[LiarServer, str, Any]:
        server = LiarServer(request.param, declared)
        endpoint = portal.call(server.__aenter__())
        config = ClientConfig(retry=RETRY)
        store: Any
        if request.param == "gs":
            store = AsyncClient(config, endpoint=endpoint, credentials=None)
        else:
            store = S3Store(config, endpoint=endpoint, region="us-east-1", addressing="path")
        opened.append((server, store))
        return server, endpoint, store

    yield start
    for server, store in opened:
        portal.call(store.aclose())
        portal.call(server.__aexit__(None, None, None))


def _peak(run: Callable[[], object]) -> tuple[BaseException, int]:
    """The error ``run`` raised and the most bytes allocated meanwhile."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        try:
            run()
        except BaseException as exc:  # the caller checks what it was
            error = exc
        else:
            raise AssertionError("a read of a size that lies succeeded")
        return error, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _typed(error: BaseException, scheme: str) -> None:
    assert isinstance(error, ProtocolError), repr(error)
    assert (error.operation, error.bucket, error.name) == ("read", "bkt", NAME)
    assert f"{scheme}://bkt/{NAME}" in str(error)


def _listed(store: Any) -> list[ObjectInfo]:
    """The objects the server's listing declares."""
    async def listing() -> list[ObjectInfo]:
        return [o async for o in store.list_objects("bkt", "d/")]

    return get_portal().call(listing())


def test_open_read_allocates_the_read_ahead_not_the_claim(liar: Liar) -> None:
    _, _, store = liar(LIE)
    scheme = store.features.scheme
    with aioflux.open(f"{scheme}://bkt/{NAME}", "rb", client=store, reader=READER) as f:
        assert isinstance(f, ObjectReader) and f.size == LIE  # the HEAD's (resource's) claim
        error, peak = _peak(f.read)
    _typed(error, scheme)
    assert peak < BOUND, peak >> 20


def test_object_reader_of_a_listed_claim(liar: Liar) -> None:
    _, _, store = liar(LIE)
    scheme = store.features.scheme
    reader = ObjectReader(store, "bkt", NAME, options=READER, info=_listed(store)[0])
    with reader:
        error, peak = _peak(reader.read)
    _typed(error, scheme)
    assert peak < BOUND, peak >> 20


def test_an_object_claimed_empty_is_held_to_its_checksum(liar: Liar) -> None:
    # A HEAD (resource) of 0 bytes whose crc32c (MD5 ETag) is the real 10
    # bytes': with no block to read, the reader handed out b"" unchecked.
    _, _, store = liar(0)
    url = f"{store.features.scheme}://bkt/{NAME}"
    with aioflux.open(url, "rb", client=store, reader=READER) as f:
        assert isinstance(f, ObjectReader) and f.size == 0
        for read in (f.read, f.readline, lambda: f.readinto(bytearray(4)), f.verify):
            with pytest.raises(ChecksumMismatch, match=url):
                read()
    # A listing's claim (S3's has no checksum), with the stat beside it.
    listed = _listed(store)[0]
    with ObjectReader(store, "bkt", NAME, options=READER, info=listed,
                      stat_beside=listed.crc32c is None) as reader:
        with pytest.raises(ChecksumMismatch, match=url):
            reader.read()


@pytest.mark.parametrize("declared", [LIE, ABSURD], ids=["512MiB", "2**60"])
def test_download_many_allocates_one_wave_not_the_claim(liar: Liar, declared: int) -> None:
    server, _, store = liar(declared)
    scheme = store.features.scheme
    objects = _listed(store)
    assert [o.size for o in objects] == [declared]
    error, peak = _peak(lambda: get_portal().call(Downloader(store, RANGES).download_many(objects)))
    _typed(error, scheme)
    assert peak < BOUND, peak >> 20
    # Only the first wave's ranges were asked for (and refused at once).
    assert 1 <= server.media <= WAVE_RANGES


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_datasets_allocate_one_wave_not_the_listed_claim(liar: Liar, kind: str) -> None:
    # Listed at 512 MiB: above the ranged threshold, the path datasets take
    # for objects of 32 MiB or more.
    _, endpoint, store = liar(LIE)
    scheme = store.features.scheme
    settings = DatasetSettings(endpoint=endpoint, download_options=RANGES, download_retry=RETRY)
    dataset: ObjectMapDataset[Any] | ObjectIterableDataset[Any]
    if kind == "map":
        dataset = ObjectMapDataset.from_prefix(f"{scheme}://bkt/d/", settings=settings)
        assert [o.size for o in dataset.objects] == [LIE]
        error, peak = _peak(lambda: dataset[0])
    else:
        dataset = ObjectIterableDataset.from_prefix(f"{scheme}://bkt/d/", settings=settings)
        error, peak = _peak(lambda: next(iter(dataset)))
    _typed(error, scheme)
    assert peak < BOUND, peak >> 20


# -- the local filesystem --------------------------------------------------------------------


@pytest.fixture
def ten_bytes(tmp_path: Path) -> tuple[LocalStore, ObjectInfo]:
    """A store and the ObjectInfo of its 10-byte file ``d/obj``."""
    (tmp_path / "d").mkdir()
    (tmp_path / NAME).write_bytes(BODY)
    bucket, prefix = parse_url(f"{tmp_path}/")
    store = LocalStore(ClientConfig(retry=RETRY))
    return store, get_portal().call(store.stat(bucket, prefix + NAME))


def _local_typed(error: BaseException, info: ObjectInfo) -> None:
    assert isinstance(error, StorageError), repr(error)
    assert (error.operation, error.bucket, error.name) == ("read", info.bucket, info.name)
    assert info.url in str(error)


@pytest.mark.parametrize("declared", [LIE, ABSURD], ids=["512MiB", "2**60"])
def test_a_local_listing_that_claims_more_than_the_file(
        ten_bytes: tuple[LocalStore, ObjectInfo], declared: int) -> None:
    store, info = ten_bytes
    # With its crc32c: else the planner stats the file for one, and reads
    # the size the stat tells.
    listed = info.replace(size=declared, crc32c=crc32c(BODY))
    error, peak = _peak(lambda: get_portal().call(
        Downloader(store, RANGES).download_many([listed])))
    _local_typed(error, info)
    assert isinstance(error, ChecksumMismatch) and f"expected {declared}" in str(error)
    assert peak < BOUND, peak >> 20
    reader = ObjectReader(store, info.bucket, info.name, options=READER, info=listed)
    with reader:
        error, peak = _peak(reader.read)
    _local_typed(error, info)
    assert peak < BOUND, peak >> 20


@pytest.mark.parametrize("kind", ["open", "map"])
def test_a_file_truncated_after_its_listing(tmp_path: Path, kind: str) -> None:
    # A sparse 512 MiB file, listed or opened at that size, then cut to 10
    # bytes: the read finds it shorter than its stat.
    (tmp_path / "d").mkdir()
    path = tmp_path / NAME
    with path.open("wb") as f:
        f.truncate(LIE)
    bucket, prefix = parse_url(f"{tmp_path}/")
    info = ObjectInfo(bucket, prefix + NAME, LIE, scheme="file")
    if kind == "open":
        with aioflux.open(path.as_uri(), "rb", reader=READER) as f:
            assert isinstance(f, ObjectReader) and f.size == LIE
            path.write_bytes(BODY)
            error, peak = _peak(f.read)
    else:
        # No crc32c checks: else the planner stats a file that has no recorded
        # crc32c, and reads the size the stat tells.
        unchecked = DatasetSettings(download_options=RANGES, download_retry=RETRY,
                                    config=ClientConfig(verify_crc32c=False))
        dataset = ObjectMapDataset.from_prefix((tmp_path / "d").as_uri(), settings=unchecked)
        assert [o.size for o in dataset.objects] == [LIE]
        path.write_bytes(BODY)
        error, peak = _peak(lambda: dataset[0])
    _local_typed(error, info)
    assert peak < BOUND, peak >> 20


# -- a size that does not fit -----------------------------------------------------------------

_CAPPED = """
    import re, resource, sys
    import aioflux
    from aioflux import ClientConfig, Downloader
    from aioflux._core.concurrency.portal import get_portal
    from aioflux._core.records.urls import parse_url
    from aioflux.local import LocalStore

    folder, scenario = sys.argv[1], sys.argv[2]
    store = LocalStore(ClientConfig())

    def sparse(name, size):
        with open(f"{folder}/{name}", "wb") as f:
            f.truncate(size)  # zeros that take no disk
        return parse_url(f"{folder}/{name}")

    def run(bucket, name):
        if scenario == "open":
            with aioflux.open(f"{folder}/{name.rpartition('/')[2]}", "rb") as f:
                return f.read()
        if scenario == "download":
            info = get_portal().call(store.stat(bucket, name))
            return get_portal().call(Downloader(store).download(info))
        return get_portal().call(store.read(bucket, name))

    # The same read of a smaller file first: threads, arenas and imports
    # take their address space before the cap.
    run(*sparse("small", 256 << 20))
    big = sparse("big", 4 << 30)
    with open("/proc/self/status") as status:
        mapped = int(re.search(r"VmSize:\\s+(\\d+) kB", status.read())[1]) << 10
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (384 << 20), resource.RLIM_INFINITY))
    try:
        run(*big)
        print("read")
    except Exception as exc:
        print(type(exc).__name__, exc.__dict__.get("name"), exc)
"""


@pytest.mark.parametrize("scenario", ["open", "download", "read"])
def test_a_size_that_does_not_fit_is_a_typed_error(tmp_path: Path, scenario: str) -> None:
    # A real 4 GiB object (a sparse file) in a process that may map only
    # 384 MiB more: a StorageError naming it, not a bare MemoryError. Two
    # malloc arenas: a thread's first allocation after the cap must not map
    # a 64 MiB arena of its own.
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_CAPPED), str(tmp_path),
                          scenario], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MALLOC_ARENA_MAX": "2"})
    assert out.returncode == 0, out.stderr
    bucket, name = parse_url(f"{tmp_path}/big")
    assert out.stdout.startswith(f"StorageError {name} read file:///{bucket}/{name} failed: "), \
        out.stdout + out.stderr
    assert "bytes do not fit in memory" in out.stdout
