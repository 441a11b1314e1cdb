"""The reader's ``read()`` of a long rest lands in the bytes it returns
(issue 61: one CPU cost a byte): no block buffer is allocated for bytes
the read fetches itself, the bytes grow in pieces as they arrive (never
to the size claimed up front), and no more GETs run at once than the
read-ahead allows. Counted with tracemalloc and a wrapped ``fetch``,
against the emulator."""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from typing import Any

import google_crc32c
import pytest

from aioflux import ChecksumMismatch, Client, ReaderOptions
from aioflux._engines.reader import ObjectReader
from aioflux.testing import Emulator

MiB = 1 << 20
# 18 blocks and a bit: pieces of 4, 4, 8 blocks, then the rest.
DATA = os.urandom(18 * 256 * 1024 + 12345)
OPTIONS = ReaderOptions(block_size=256 * 1024, read_ahead=4)


def _counting_fetch(monkeypatch: pytest.MonkeyPatch, client: Client) -> dict[str, int]:
    """GETs sent from now on, and the most running at once."""
    seen = {"gets": 0, "now": 0, "most": 0}
    fetch = client.aio.fetch

    async def counted(*args: Any, **kwargs: Any) -> Any:
        seen["gets"] += 1
        seen["now"] += 1
        seen["most"] = max(seen["most"], seen["now"])
        try:
            await asyncio.sleep(0)  # let the others start: a bound that holds only in turn is none
            return await fetch(*args, **kwargs)
        finally:
            seen["now"] -= 1

    monkeypatch.setattr(client.aio, "fetch", counted)
    return seen


def test_a_whole_read_allocates_its_bytes_and_no_blocks(
        sync_client: Client, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sync_client.write(bucket, "o", DATA)
    with ObjectReader(sync_client.aio, bucket, "o", options=OPTIONS) as r:
        seen = _counting_fetch(monkeypatch, sync_client)
        blocks: list[tuple[int, int]] = []
        fetch_block = r._window.fetch_block

        async def block(start: int, end: int) -> Any:
            blocks.append((start, end))
            return await fetch_block(start, end)

        monkeypatch.setattr(r._window, "fetch_block", block)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            out = r.read()
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        assert type(out) is bytes and out == DATA
        # Checked front to back, to the last block.
        assert r._check.next * r.block_size >= len(DATA) and r._check.corrupt is None
    # No block of its own, and the bytes returned with less than the
    # read-ahead's 1 MiB beside them (the emulator, in this process, is
    # counted too): blocks fetched and copied out took that 1 MiB more.
    assert blocks == []
    assert len(DATA) <= peak < len(DATA) + OPTIONS.block_size * OPTIONS.read_ahead, peak
    assert seen["gets"] == -(-len(DATA) // OPTIONS.block_size)  # each block fetched once
    assert 1 < seen["most"] <= OPTIONS.read_ahead


def test_a_rest_after_held_blocks_is_whole_and_checked(
        sync_client: Client, bucket: str, emulator: Emulator) -> None:
    sync_client.write(bucket, "o", DATA)
    with ObjectReader(sync_client.aio, bucket, "o", options=OPTIONS) as r:
        # A first read from inside the object leaves the read-ahead's blocks
        # held: the rest takes them, then fetches the others straight in.
        assert r.read(1000) == DATA[:1000]
        assert r.read(5 * MiB) == DATA[1000:1000 + 5 * MiB]
        assert r.read() == DATA[1000 + 5 * MiB:]
        assert r.read() == b""
        assert r._check.next * r.block_size >= len(DATA) and r._check.corrupt is None
    bad = bytearray(DATA)
    bad[len(DATA) - 100] ^= 1  # in the last piece's last block
    emulator.store.put(bucket, "bad", bytes(bad), crc32c=google_crc32c.value(DATA))
    with ObjectReader(sync_client.aio, bucket, "bad", options=OPTIONS) as r, \
            pytest.raises(ChecksumMismatch, match=f"gs://{bucket}/bad"):
        r.read()
