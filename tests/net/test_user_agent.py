"""The default User-Agent names the distribution and its version, on both
HTTP paths (aiohttp for JSON API calls, the lean client for object bodies)."""

from __future__ import annotations

import importlib.metadata
import re

import pytest

import aioflux
from aioflux import AsyncClient, ClientConfig, RetryPolicy
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from tests.servers.raw_server import RawServer

BODY = b"user agent"


def _answer(nth: int) -> bytes:
    # The first request is the JSON API's metadata GET (exists), the second
    # the media GET (read), each on its own connection (the two HTTP paths
    # keep separate pools), so they are told apart by the overall count.
    if nth == 0:
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    return (f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\n"
            f"x-goog-hash: crc32c={encode_crc32c(crc32c(BODY))}\r\n\r\n").encode() + BODY


async def test_user_agent_names_distribution_and_version() -> None:
    server = RawServer(lambda conn, i: _answer(len(server.requests) - 1))
    config = ClientConfig(retry=RetryPolicy(max_attempts=1))
    async with server as base, AsyncClient(config, endpoint=base) as client:
        assert await client.exists("bkt", "obj") is False
        assert await client.read("bkt", "obj") == BODY
    agents = [re.search(rb"(?im)^user-agent: *(.*?)\r$", head) for head in server.requests]
    assert len(agents) == 2 and all(agents), server.requests
    assert {m.group(1).decode() for m in agents if m} == {f"aioflux-storage/{aioflux.__version__}"}


def test_version_is_the_installed_distributions() -> None:
    # pyproject.toml reads the version from aioflux/_version.py: one source.
    try:
        installed = importlib.metadata.version("aioflux-storage")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("aioflux-storage is not installed (an install from before the rename)")
    assert installed == aioflux.__version__
