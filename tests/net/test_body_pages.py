"""A body's pages made present ahead of the socket's bytes (``_net/connection.py``
with ``_core/memory/prefault.py``): in the event loop's thread, holding the
GIL, never past the buffer, only memory not yet present, and the bytes
whole either way."""

from __future__ import annotations

import ctypes
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


async def test_every_page_handed_to_the_socket_is_present_before_bytes_land_in_it(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # The socket is handed no more than the pages just populated: given the
    # whole rest of the buffer, one receive of all it held (MiBs) lands past
    # the populated MiB, a fault a page. Each whole page of each range handed
    # over is asked of the kernel (mincore) as it is handed over: present,
    # whether populated here or already (a huge page, say).
    mincore = prefault_mod._CALLS[2]  # type: ignore[index]
    page = mmap.PAGESIZE
    absent: list[int] = []
    handed = 0
    real_get_buffer = connection._Connection.get_buffer

    def get_buffer(self: connection._Connection, sizehint: int) -> memoryview:
        nonlocal handed
        view = real_get_buffer(self, sizehint)
        ex = self._exchange
        if ex is not None and ex.dest is not None and view.nbytes:
            start = ex.dest_at + ex.got
            first, end = -(-start // page) * page, (start + view.nbytes) // page * page
            if end > first:
                pages = (end - first) // page
                resident = (ctypes.c_ubyte * pages)()
                assert mincore(first, end - first, resident) == 0
                absent.extend(first + k * page for k in range(pages) if not resident[k] & 1)
                handed += pages
        return view

    monkeypatch.setattr(connection._Connection, "get_buffer", get_buffer)
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)
    fresh = mmap.mmap(-1, len(BIG))
    view = memoryview(fresh)
    async with RawServer(lambda conn, i: _response(BIG)) as base:
        resp = await pool.get(base + "/o", {}, view, limit=len(BIG))
    pool.close()
    assert resp is not None and view == BIG
    assert handed >= len(BIG) // page - 2 and absent == []
    view.release()
    fresh.close()
