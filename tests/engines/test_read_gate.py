"""Gathered object reads past the client's permits wait at their top (the
read gate), not each one built and parked at the request semaphore."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import aioflux._net.checked_reads as checked_reads
from aioflux import AsyncClient, ClientConfig, S3Store
from aioflux._core.storage.protocol import ObjectStore
from aioflux.testing import Emulator

PERMITS = 4


def _store(emulator: Emulator, scheme: str) -> ObjectStore:
    config = ClientConfig(max_concurrency=PERMITS)
    if scheme == "gs":
        return AsyncClient(config, endpoint=emulator.endpoint)
    return S3Store(config, endpoint=emulator.s3_endpoint, region="us-east-1",
                   addressing="path")


@pytest.mark.parametrize("scheme", ["gs", "s3"])
async def test_reads_past_the_permits_wait_before_anything_is_built(
        emulator: Emulator, bucket: str, scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = {f"g/{i:02d}": os.urandom(1000 + i) for i in range(10 * PERMITS)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    built: list[str] = []

    class Counted(checked_reads._Read):
        def __init__(self, *args: Any) -> None:
            built.append(args[2])
            super().__init__(*args)

    monkeypatch.setattr(checked_reads, "_Read", Counted)
    async with _store(emulator, scheme) as store:
        reads = asyncio.gather(*(store.read(bucket, name) for name in data))
        # One turn of the loop: every read ran up to its first wait, and no
        # answer can have been looked at yet.
        await asyncio.sleep(0)
        assert len(built) == PERMITS
        assert await reads == list(data.values())
    assert len(built) == len(data)
