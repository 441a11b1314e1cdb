"""The http(s) store against a real nginx (Debian's package, see
tests/servers/nginx.py), once plain and once over TLS with a self-signed
certificate trusted through ``ClientConfig(ca_file=...)``: stat, ranges,
version pins, redirects, a bearer token, ``aioflux.open``, the CLI, and the
datasets over a brace pattern of tar shards and a list of URLs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import aioflux
from aioflux import ClientConfig, RetryPolicy
from aioflux._core.concurrency.portal import get_portal
from aioflux._core.errors import InvalidRequest, NotFound, PermissionDenied, TLSError
from aioflux._core.integrity.crc import crc32c
from aioflux.http import HttpStore
from tests.servers.nginx import TOKEN, Nginx, running_nginx
from tests.servers.tls_cert import self_signed

DATA = os.urandom(3 << 20)
FAST = RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0)


def _serve(root: Path) -> None:
    (root / "data").mkdir()
    (root / "data" / "x.bin").write_bytes(DATA)
    (root / "private").mkdir()
    (root / "private" / "p.bin").write_bytes(DATA[:1000])


@pytest.fixture(scope="module", params=["http", "https"])
def nginx(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, ClientConfig]]:
    root = tmp_path_factory.mktemp(f"nginx-{request.param}")
    _serve(root)
    tls = None
    config = ClientConfig(retry=FAST)
    if request.param == "https":
        certs = tmp_path_factory.mktemp("certs")
        self_signed(certs)
        tls = (certs / "cert.pem", certs / "key.pem")
        config = ClientConfig(retry=FAST, ca_file=certs / "cert.pem")
    with running_nginx(root, tls=tls) as running:
        yield running, config


def _store(nginx: tuple[Nginx, ClientConfig], token: str | None = None) -> HttpStore:
    server, config = nginx
    return HttpStore(config, scheme=server.endpoint.split(":", 1)[0], token=token)


async def test_stat_and_ranges(nginx: tuple[Nginx, ClientConfig]) -> None:
    server = nginx[0]
    async with _store(nginx) as store:
        info = await store.stat(server.bucket, "data/x.bin")
        assert info.size == len(DATA) and info.generation and info.updated
        for start, end in ((0, 1), (100, 200_000), (len(DATA) - 10, None), (0, None)):
            got = await store.read(server.bucket, "data/x.bin", start=start, end=end,
                                   generation=info.generation)
            assert got == DATA[start:end]
        fetched = await store.fetch(server.bucket, "data/x.bin", size=len(DATA),
                                    crc=crc32c(DATA), want_crc=True)
        assert fetched.crc == crc32c(DATA)
        with pytest.raises(NotFound):
            await store.stat(server.bucket, "data/missing.bin")
        with pytest.raises(InvalidRequest, match="416"):
            await store.read(server.bucket, "data/x.bin", start=len(DATA) + 5)
        moved = await store.read(server.bucket, "moved/data/x.bin", start=5, end=50)
        assert moved == DATA[5:50]  # nginx's 302 to the same origin, followed


async def test_a_replaced_file_is_never_read_at_its_old_pin(
        nginx: tuple[Nginx, ClientConfig]) -> None:
    server = nginx[0]
    path = server.root / "data" / "changing.bin"
    path.write_bytes(DATA[:5000])
    async with _store(nginx) as store:
        info = await store.stat(server.bucket, "data/changing.bin")
        assert await store.read(server.bucket, "data/changing.bin", end=100,
                                generation=info.generation) == DATA[:100]
        path.write_bytes(DATA[5000:10_000])
        stamp = path.stat().st_mtime + 10  # nginx's ETag is mtime-size
        os.utime(path, (stamp, stamp))
        with pytest.raises(NotFound, match="changed while it was read"):
            await store.read(server.bucket, "data/changing.bin", start=100, end=200,
                             generation=info.generation)
        assert await store.read(server.bucket, "data/changing.bin") == DATA[5000:10_000]


async def test_the_bearer_token(nginx: tuple[Nginx, ClientConfig]) -> None:
    server = nginx[0]
    async with _store(nginx) as anonymous:
        with pytest.raises(PermissionDenied):
            await anonymous.read(server.bucket, "private/p.bin")
    async with _store(nginx, token=TOKEN) as store:
        assert await store.read(server.bucket, "private/p.bin") == DATA[:1000]


def test_aioflux_open_reads_and_seeks(nginx: tuple[Nginx, ClientConfig]) -> None:
    server = nginx[0]
    store = _store(nginx)
    try:
        with aioflux.open(f"{server.endpoint}/data/x.bin", "rb", client=store) as f:
            assert f.read(10) == DATA[:10]
            f.seek(2 << 20)
            assert f.read(1000) == DATA[2 << 20:(2 << 20) + 1000]
            f.seek(0)
            assert f.read() == DATA
        with pytest.raises(InvalidRequest, match="read-only"):
            aioflux.open(f"{server.endpoint}/data/new.bin", "wb", client=store).close()
    finally:
        get_portal().call(store.aclose())


async def test_an_untrusted_certificate_is_a_tls_error(
        nginx: tuple[Nginx, ClientConfig]) -> None:
    server = nginx[0]
    if not server.endpoint.startswith("https"):
        pytest.skip("plain HTTP has no certificate")
    async with HttpStore(ClientConfig(retry=FAST), scheme="https") as store:
        with pytest.raises(TLSError, match="ca_file"):
            await store.stat(server.bucket, "data/x.bin")
