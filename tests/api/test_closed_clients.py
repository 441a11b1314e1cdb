"""A closed client or store refuses later calls with InvalidArgument, instead
of opening connections nothing would close; closing only the connections
(the portal at shutdown, a dataset between uses, a collected ``Client``
wrapper) still reopens them on the next call, in any loop or forked child."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import time

import pytest

from aioflux import AsyncClient, Client, ClientConfig, InvalidArgument
from aioflux._core.concurrency.portal import call
from aioflux._core.settings.retry import RetryPolicy
from aioflux.s3 import S3Store
from aioflux.testing import MockRequest, MockResponse, MockTransport

GCS = "https://storage.example"
S3 = "https://s3.example.test"
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.002))


def _answer(_request: MockRequest) -> MockResponse:
    return MockResponse(200, {"Content-Length": "2", "ETag": '"e"'}, b"ok")


def _gcs() -> tuple[AsyncClient, MockTransport]:
    transport = MockTransport(_answer, config=CONFIG, endpoint=GCS)
    return AsyncClient(transport=transport, endpoint=GCS), transport


def _s3() -> tuple[S3Store, MockTransport]:
    transport = MockTransport(_answer, config=CONFIG, endpoint=S3)
    return S3Store(transport=transport, endpoint=S3, region="us-east-1"), transport


async def test_an_async_client_refuses_calls_after_aclose() -> None:
    client, transport = _gcs()
    async with client:
        assert await client.read("bkt", "k") == b"ok"
    sent = len(transport.requests)
    with pytest.raises(InvalidArgument, match=r"read gs://bkt/k: the client is closed .*"
                                              r"make a new client"):
        await client.read("bkt", "k")
    await client.aclose()  # closing again is fine
    assert len(transport.requests) == sent and transport.idle  # nothing reopened


def test_a_closed_async_client_refuses_in_another_loop_too() -> None:
    client, transport = _gcs()
    assert asyncio.run(client.read("bkt", "k")) == b"ok"
    asyncio.run(client.aclose())
    with pytest.raises(InvalidArgument, match="the client is closed"):
        asyncio.run(client.read("bkt", "k"))
    assert transport.idle


async def test_an_s3_store_refuses_calls_after_aclose() -> None:
    store, transport = _s3()
    assert await store.read("bkt", "k") == b"ok"
    await store.aclose()
    with pytest.raises(InvalidArgument, match=r"read s3://bkt/k: the S3Store is closed"):
        await store.read("bkt", "k")
    assert len(transport.requests) == 1 and transport.idle


def test_a_sync_client_refuses_calls_after_close() -> None:
    client = Client(CONFIG, endpoint="http://127.0.0.1:9")
    client.close()
    # Refused before any connection is tried (nothing listens on port 9).
    with pytest.raises(InvalidArgument, match=r"stat gs://bkt/k: the client is closed"):
        client.stat("bkt", "k")
    client.close()
    assert client.transport.idle


async def test_closing_the_connections_only_reopens_them() -> None:
    # What the portal does at shutdown and datasets do between uses.
    client, transport = _gcs()
    assert await client.read("bkt", "k") == b"ok"
    await transport.aclose()
    assert transport.idle and not transport.closed
    assert await client.read("bkt", "k") == b"ok"
    await client.aclose()


def test_a_collected_client_wrapper_leaves_its_async_client_usable() -> None:
    # CheckpointManager(client=Client(...)) keeps only the AsyncClient.
    wrapper = Client(CONFIG, endpoint=GCS)
    client, transport = _gcs()
    wrapper.aio = client
    assert call(client.read("bkt", "k")) == b"ok"
    del wrapper
    gc.collect()
    deadline = time.monotonic() + 10
    while not transport.idle and time.monotonic() < deadline:  # closed on the portal
        time.sleep(0.01)
    assert transport.idle and not transport.closed
    assert call(client.read("bkt", "k")) == b"ok"
    call(client.aclose())


def _in_child(client: AsyncClient, close_first: bool) -> None:
    import os

    try:
        if close_first:
            asyncio.run(client.aclose())  # the child's copy only
        ok = asyncio.run(client.read("bkt", "k")) == b"ok"
    except InvalidArgument:
        ok = close_first
    os._exit(0 if ok else 1)


@pytest.mark.parametrize("close_first", [False, True])
def test_after_fork_a_child_has_its_own_open_or_closed_state(close_first: bool) -> None:
    client, transport = _gcs()
    assert asyncio.run(client.read("bkt", "k")) == b"ok"  # the parent holds a session
    child = multiprocessing.get_context("fork").Process(target=_in_child,
                                                        args=(client, close_first))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    # Whatever the child did, the parent's client is open.
    assert not transport.closed
    assert asyncio.run(client.read("bkt", "k")) == b"ok"
    asyncio.run(client.aclose())
