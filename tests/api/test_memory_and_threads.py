"""Memory bounds and thread safety as a careful user meets them: slow
consumers of the sync streams, and the sync API called where it would wait
on its own event loop."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import IO

import pytest

import aioflux
from aioflux import Client, DownloadOptions, ReaderOptions
from aioflux._net.http import BodyTruncated, MediaPool
from aioflux.testing import Emulator
from tests.servers.raw_server import RawServer


def _settled(read: object, quiet: float = 0.4, most: float = 5.0) -> int:
    """``read()`` once it stopped changing for ``quiet`` seconds."""
    assert callable(read)
    begin = time.monotonic()
    last, since = read(), time.monotonic()
    while time.monotonic() - begin < most:
        time.sleep(0.05)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return int(last)


def test_a_slow_consumer_of_the_sync_stream_holds_at_most_the_prefetch_budget(
        sync_client: Client, emulator: Emulator, bucket: str) -> None:
    # 32 objects of 256 KiB behind a 1 MiB budget: the async stream holds
    # about 4 ahead of its consumer; the blocking twin queued up to 64 ready
    # items for the next hop whatever their size, so a consumer busy with its
    # first item had the whole prefix downloaded behind it (with 256 MiB
    # objects, 16 GiB).
    size, count, budget = 256 * 1024, 32, 1 << 20
    for i in range(count):
        emulator.store.put(bucket, f"p/{i:03d}", bytes([i]) * size)
    base = sync_client.stats.bytes_received
    items = sync_client.stream(bucket, "p/", concurrency=16,
                               options=DownloadOptions(prefetch_bytes=budget))
    try:
        first = next(items)
        assert first.data == bytes([int(first.name[2:])]) * size
        held = _settled(lambda: sync_client.stats.bytes_received - base)
        # The budget, a quarter more for the hand-off, and the item in hand.
        assert held <= budget + budget // 4 + size, held / size
        rest = list(items)
    finally:
        items.close()
    names = sorted([first.name] + [item.name for item in rest])
    assert names == [f"p/{i:03d}" for i in range(count)]
    assert all(item.data == bytes([int(item.name[2:])]) * size for item in rest)


_ON_THE_LOOP = """
    import os, sys, concurrent.futures
    import aioflux
    from aioflux import BridgeError, ReaderOptions, WriterOptions
    from aioflux._core.concurrency.portal import get_portal

    path = sys.argv[1]
    with open(path, "wb") as f:
        f.write(b"x" * (3 << 20))
    reader = aioflux.open(path, "rb", reader=ReaderOptions(block_size=1 << 20))
    writer = aioflux.open(path + ".out", "wb",
                          writer=WriterOptions(part_size=1 << 20, max_in_flight=1))

    def on_the_loop():
        scenario = sys.argv[2]
        if scenario == "load_files":
            return list(aioflux.load_files([path, path]))
        if scenario == "read":
            return reader.read()
        writer.write(b"y" * (3 << 20))
        writer.close()

    async def callback():
        return on_the_loop()

    try:
        get_portal().submit(callback()).result(timeout=5)
        print("returned")
    except concurrent.futures.TimeoutError:
        print("hang")
    except BridgeError as exc:
        print("BridgeError:", exc)
    sys.stdout.flush()
    os._exit(0)  # a hung loop thread would hold up a normal exit
"""


@pytest.mark.parametrize("scenario", ["load_files", "read", "write"])
def test_blocking_calls_on_the_portal_loop_fail_typed_instead_of_hanging(
        tmp_path: Path, scenario: str) -> None:
    # Code the loop runs (a custom Auth, an async callback) that reaches the
    # sync API must get a BridgeError: load_files, a reader's read and a
    # writer's write waited for work only that blocked loop could do.
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_ON_THE_LOOP),
                          str(tmp_path / "obj"), scenario],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("BridgeError:"), out.stdout + out.stderr
    assert "event loop thread" in out.stdout


def test_threads_sharing_a_reader_each_get_whole_reads(tmp_path: Path) -> None:
    # As on a built-in file (io.BufferedReader), each read() of a reader
    # shared by threads is whole and in turn. Unlocked, two reads took the
    # same position, dropped each other's blocks (a ProtocolError "no bytes
    # at offset" from a healthy store) and could account a block's crc32c
    # twice, a false ChecksumMismatch.
    data = random.Random(7).randbytes(24 << 20)
    path = tmp_path / "shared.bin"
    path.write_bytes(data)
    step = 100_000
    for _ in range(2):
        chunks: list[bytes] = []
        errors: list[BaseException] = []
        with aioflux.open(path, "rb", reader=ReaderOptions(block_size=256 << 10,
                                                           read_ahead=4)) as f:
            threads = [threading.Thread(target=_read_chunks, args=(f, step, chunks, errors))
                       for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        assert not errors, errors
        # Every read whole and none twice: the chunks are the file's.
        assert sorted(chunks) == sorted(data[i:i + step] for i in range(0, len(data), step))


def _read_chunks(f: IO[bytes], step: int, chunks: list[bytes],
                 errors: list[BaseException]) -> None:
    try:
        while got := f.read(step):
            chunks.append(got)
    except BaseException as exc:
        errors.append(exc)


async def test_reads_waiting_for_a_lean_socket_fall_back_together() -> None:
    # Two reads wait for the one lean socket the limit leaves; when it goes
    # and the other pool (aiohttp) holds the whole limit, the first read
    # woken falls back to aiohttp. The second was never woken: no lean
    # socket was left to give it a turn, so it waited forever (a sync
    # client.read hung after client.close() with writes in flight).
    body = b"x" * 1000
    answer = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    server = RawServer(lambda conn, i: (answer[:100], "stall") if conn == 0 else answer)
    elsewhere = [1]
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=0.3, idle_timeout=5,
                     connection_limit=2, sockets_elsewhere=lambda: elsewhere[0])
    async with server as base:
        first = asyncio.create_task(pool.get(base + "/o", {}))
        while pool.sockets == 0:
            await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(pool.get(base + "/o", {})) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waiting)
        elsewhere[0] = 2  # aiohttp now holds the whole limit
        with pytest.raises(BodyTruncated):
            await first
        # None: repeat the request through aiohttp.
        assert await asyncio.wait_for(asyncio.gather(*waiting), 3) == [None, None]
    pool.close()
