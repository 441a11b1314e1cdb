"""Requests through an HTTPS proxy, as a machine behind one makes them.

A CONNECT proxy on 127.0.0.1 (it records what it is asked and relays
bytes) stands between aioflux and a TLS front of the bundled emulator (a
relay that ends TLS with a test certificate). Through ``HTTPS_PROXY`` an
``https://`` endpoint is reached by CONNECT tunnels only: the proxy sees
the target and its own credentials, never a token or a byte of data in
the clear. ``NO_PROXY`` and plain ``http://`` endpoints go direct, and a
proxy aioflux cannot speak to is refused when the client is made.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aioflux import AsyncClient, ClientConfig, InvalidArgument, RetryPolicy
from aioflux.testing import Emulator
from tests.servers.raw_server import Listener
from tests.servers.tls_cert import self_signed

TOKEN = "ya29.secret-token-of-the-test"
DATA = os.urandom(300_000)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                seen: bytearray | None = None) -> None:
    try:
        while chunk := await reader.read(65536):
            if seen is not None:
                seen += chunk
            writer.write(chunk)
            await writer.drain()
    except ConnectionError:
        pass  # the other side hung up: close ours too
    finally:
        writer.close()


@dataclass
class Proxy:
    """A CONNECT-only proxy: ``asked`` holds each request line and its
    ``Proxy-Authorization``; ``relayed`` every byte that went through."""

    url: str = ""
    asked: list[tuple[str, str | None]] = field(default_factory=list)
    relayed: bytearray = field(default_factory=bytearray)
    listener: Listener | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        auth = next((line.split(":", 1)[1].strip() for line in head[1:]
                     if line.lower().startswith("proxy-authorization:")), None)
        self.asked.append((head[0], auth))
        method, target, _ = head[0].split(" ", 2)
        if method != "CONNECT":  # a plain-http request would show us everything
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        host, port = target.rsplit(":", 1)
        assert self.listener is not None
        up_reader, up_writer = await self.listener.connect(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(_pipe(reader, up_writer, self.relayed),
                             _pipe(up_reader, writer, self.relayed))


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    found = Proxy()
    found.listener = Listener(found.serve)
    found.url = f"http://127.0.0.1:{await found.listener.start()}"
    try:
        yield found
    finally:
        await found.listener.close()


@pytest.fixture
async def tls_front(emulator: Emulator, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """``(https endpoint, CA file)``: TLS ended here, bytes relayed to the emulator."""
    server_ctx, _ = self_signed(tmp_path)
    plain = emulator.endpoint.split("://", 1)[1]
    host, port = plain.rstrip("/").rsplit(":", 1)

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await listener.connect(host, int(port))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    listener = Listener(relay, tls=server_ctx)
    front = await listener.start()
    try:
        yield f"https://127.0.0.1:{front}", str(tmp_path / "cert.pem")
    finally:
        await listener.close()


async def _round_trip(endpoint: str, ca_file: str | None, bucket: str) -> None:
    config = ClientConfig(ca_file=ca_file, retry=RetryPolicy(max_attempts=2))
    async with AsyncClient(config, endpoint=endpoint, credentials=TOKEN) as client:
        await client.write(bucket, "through/proxy.bin", DATA)
        assert await client.read(bucket, "through/proxy.bin") == DATA
        assert await client.read(bucket, "through/proxy.bin", start=5, end=70_000) \
            == DATA[5:70_000]
        assert (await client.stat(bucket, "through/proxy.bin")).size == len(DATA)
        names = [o.name async for o in client.list_objects(bucket, "through/")]
        assert names == ["through/proxy.bin"]
        await client.delete(bucket, "through/proxy.bin")


async def test_an_https_endpoint_goes_through_the_proxy_by_connect_only(
        emulator: Emulator, bucket: str, proxy: Proxy, tls_front: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint, ca_file = tls_front
    user_proxy = proxy.url.replace("http://", "http://alice:s3cret@")
    monkeypatch.setenv("HTTPS_PROXY", user_proxy)
    await _round_trip(endpoint, ca_file, bucket)
    target = endpoint.split("://", 1)[1]
    expected_auth = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    assert proxy.asked and all(asked == (f"CONNECT {target} HTTP/1.1", expected_auth)
                               for asked in proxy.asked), proxy.asked
    # TLS end to end: the proxy never saw the token nor the data.
    assert len(proxy.relayed) > len(DATA)
    assert TOKEN.encode() not in proxy.relayed and DATA[:64] not in proxy.relayed


async def test_no_proxy_and_plain_http_endpoints_go_direct(
        emulator: Emulator, bucket: str, proxy: Proxy, tls_front: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint, ca_file = tls_front
    monkeypatch.setenv("https_proxy", proxy.url)
    monkeypatch.setenv("ALL_PROXY", proxy.url)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    # A plain-http endpoint: a proxy would read its Authorization header.
    await _round_trip(emulator.endpoint, None, bucket)
    # NO_PROXY names the host (curl's and requests' syntax).
    monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.1")
    await _round_trip(endpoint, ca_file, bucket)
    assert proxy.asked == []


@pytest.mark.parametrize("value", ["socks5://127.0.0.1:1080", "http://127.0.0.1:99999"])
async def test_a_proxy_aioflux_cannot_use_is_refused_when_the_client_is_made(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HTTPS_PROXY", value)
    with pytest.raises(InvalidArgument, match="HTTPS_PROXY / ALL_PROXY ") as info:
        AsyncClient(endpoint="https://storage.example.com")
    assert "1080" not in str(info.value) and "99999" not in str(info.value)
    # Not for an endpoint the proxy would not serve.
    async with AsyncClient(endpoint="http://127.0.0.1:9"):
        pass
