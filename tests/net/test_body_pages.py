"""A body's pages made present ahead of the socket's bytes (``_net/connection.py``
with ``_core/memory/prefault.py``): in the event loop's thread, holding the
GIL, never past the buffer, only memory not yet present, and the bytes
whole either way."""

from __future__ import annotations

import mmap
import os

import pytest

from aioflux._core.memory import prefault as prefault_mod
from aioflux._net import connection
from aioflux._net.http import MediaPool
from tests.servers.raw_server import RawServer

pytestmark = pytest.mark.skipif(prefault_mod._CALLS is None,
                                reason="MADV_POPULATE_WRITE: Linux 5.14 or later")

BIG = os.urandom(5 << 20)


def _response(body: bytes) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool, bool]]:
    """Each populate asked: its length, whether it held the GIL, and whether
    it populated."""
    asked: list[tuple[int, bool, bool]] = []
    real = prefault_mod.prefault

    def spied(address: int, length: int, *, holding_gil: bool = False) -> bool:
        done = real(address, length, holding_gil=holding_gil)
        asked.append((length, holding_gil, done))
        return done

    monkeypatch.setattr(connection, "prefault", spied)
    return asked


async def test_a_body_of_our_own_is_populated_ahead_in_the_loops_thread(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _spy(monkeypatch)
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)
    async with RawServer(lambda conn, i: _response(BIG)) as base:
        resp = await pool.get(base + "/o", {}, limit=len(BIG))
    pool.close()
    assert resp is not None and resp.body == BIG
    # Asked as the buffer filled (whether its pages were fresh is the
    # allocator's: a grown block may reuse heap pages touched before).
    assert asked and all(held for _, held, _ in asked)
    assert max(length for length, _, _ in asked) <= connection._POPULATE_AHEAD


async def test_a_callers_buffer_is_populated_only_where_fresh(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)
    async with RawServer(lambda conn, i: _response(BIG)) as base:
        asked = _spy(monkeypatch)
        written = bytearray(b"x" * len(BIG))  # every page present already
        resp = await pool.get(base + "/o", {}, memoryview(written), limit=len(BIG))
        assert resp is not None and written == BIG
        assert asked and not any(done for _, _, done in asked)

        asked.clear()
        fresh = mmap.mmap(-1, len(BIG))
        view = memoryview(fresh)
        resp = await pool.get(base + "/o", {}, view, limit=len(BIG))
        assert resp is not None and view == BIG
        assert any(done for _, _, done in asked)
        view.release()
        fresh.close()
    pool.close()


async def test_bodies_arrive_whole_where_populating_is_not_supported(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prefault_mod, "_CALLS", None)
    asked = _spy(monkeypatch)
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)
    async with RawServer(lambda conn, i: _response(BIG)) as base:
        resp = await pool.get(base + "/o", {}, limit=len(BIG))
    pool.close()
    assert resp is not None and resp.body == BIG and not any(done for _, _, done in asked)


async def test_every_page_of_a_fresh_buffer_is_populated_before_bytes_land_in_it(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # The socket is handed no more than the pages just populated: given the
    # whole rest of the buffer, one receive of all it held (MiBs) landed
    # past the populated MiB, a fault a page.
    spans: list[tuple[int, int]] = []
    handed: list[tuple[int, int]] = []
    real_prefault, real_get_buffer = prefault_mod.prefault, connection._Connection.get_buffer

    def spied(address: int, length: int, *, holding_gil: bool = False) -> bool:
        done = real_prefault(address, length, holding_gil=holding_gil)
        if done:
            spans.append((address, address + length))
        return done

    def get_buffer(self: connection._Connection, sizehint: int) -> memoryview:
        view = real_get_buffer(self, sizehint)
        ex = self._exchange
        if ex is not None and ex.dest is not None and view.nbytes:
            start = ex.dest_at + ex.got
            handed.append((start, start + view.nbytes))
        return view

    monkeypatch.setattr(connection, "prefault", spied)
    monkeypatch.setattr(connection._Connection, "get_buffer", get_buffer)
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)
    fresh = mmap.mmap(-1, len(BIG))
    view = memoryview(fresh)
    async with RawServer(lambda conn, i: _response(BIG)) as base:
        resp = await pool.get(base + "/o", {}, view, limit=len(BIG))
    pool.close()
    assert resp is not None and view == BIG
    # Each receive could write only into a span just populated (a span's
    # partial first and last pages are the kernel's to fault in).
    assert spans and handed
    for start, end in handed:
        assert any(lo <= start and end <= hi for lo, hi in spans), (start, end)
    covered = max(end for _, end in handed) - min(start for start, _ in handed)
    assert sum(hi - lo for lo, hi in spans) == covered  # each page populated once
    view.release()
    fresh.close()
