"""The reader's promises under stress, against the emulator: the memory
bound of ``block_size * read_ahead`` on every path, reads after (and
racing) ``close()``, and a failed read that consumes nothing."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from aioflux import Client, InvalidArgument, ReaderOptions, ServerError
from aioflux._engines.reader import ObjectReader

KiB = 1024
BLOCK = 100 * KiB


@pytest.fixture
def blob(sync_client: Client, bucket: str) -> bytes:
    # No newline: a readline goes on to the next block.
    data = os.urandom(1000 * KiB + 17).replace(b"\n", b"-")
    sync_client.write(bucket, "blob", data)
    return data


def _script_fetch(monkeypatch: pytest.MonkeyPatch, client: Client,
                  before: Callable[[dict[str, Any]], None]) -> list[tuple[int, int]]:
    """Every GET the reader sends from now on, ``before`` run first (it may
    raise); returns the ranges asked for."""
    seen: list[tuple[int, int]] = []
    fetch = client.aio.fetch

    async def scripted(*args: Any, **kwargs: Any) -> Any:
        seen.append((kwargs["start"], kwargs["end"]))
        before(kwargs)
        return await fetch(*args, **kwargs)

    monkeypatch.setattr(client.aio, "fetch", scripted)
    return seen


class _Counting(dict[int, Any]):
    """A reader's block table that remembers how many blocks it held at once."""

    most = 0

    def __setitem__(self, key: int, value: Any) -> None:
        super().__setitem__(key, value)
        self.most = max(self.most, len(self))


def test_a_long_read_after_a_seek_holds_at_most_read_ahead_blocks(
        sync_client: Client, bucket: str, blob: bytes) -> None:
    # Blocks 0 and 1 held from a read at the front, then a long read from
    # 250 KiB ending inside block 7: the block it ends inside was fetched on
    # top of the two (three blocks with a read-ahead of 2).
    with ObjectReader(sync_client.aio, bucket, "blob",
                      options=ReaderOptions(block_size=BLOCK, read_ahead=2)) as r:
        r._window.blocks = table = _Counting()
        assert r.read(10) == blob[:10]
        assert table.most == 2
        r.seek(250 * KiB)
        buf = bytearray(500 * KiB)
        assert r.readinto(buf) == len(buf) and bytes(buf) == blob[250 * KiB:750 * KiB]
        assert table.most <= 2
        assert r.read() == blob[750 * KiB:]  # the rest, from where it ended
        assert table.most <= 2


def test_a_read_failing_midway_consumes_nothing(
        sync_client: Client, bucket: str, blob: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    # Read by blocks from the read-ahead: block 0 is taken, block 1's GET
    # failed. The position moved past block 0 anyway, so reading again (as
    # the error says one may) skipped its bytes.
    failing = [True]

    def fail_block_1(kwargs: dict[str, Any]) -> None:
        if failing[0] and kwargs["start"] == BLOCK:
            raise ServerError("read: HTTP 503 (scripted)", operation="read", bucket=bucket,
                              name="blob")

    _script_fetch(monkeypatch, sync_client, fail_block_1)
    with ObjectReader(sync_client.aio, bucket, "blob",
                      options=ReaderOptions(block_size=BLOCK, read_ahead=2)) as r:
        assert r.read(10) == blob[:10]
        for read in (lambda: r.read(BLOCK), lambda: r.readinto(bytearray(BLOCK)),
                     lambda: r.readline(), lambda: r.read(2 << 20)):
            with pytest.raises(ServerError):
                read()
            assert r.tell() == 10
        failing[0] = False
        assert r.read(BLOCK) == blob[10:10 + BLOCK]


def test_a_read_that_waited_out_a_close_fetches_nothing(
        sync_client: Client, bucket: str, blob: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    # A thread's read found the reader open, then close() ran on another
    # thread before the read went on: it fetched blocks for the closed
    # reader, which nothing dropped (GETs and read-ahead memory kept going).
    seen = _script_fetch(monkeypatch, sync_client, lambda kwargs: None)
    r = ObjectReader(sync_client.aio, bucket, "blob",
                     options=ReaderOptions(block_size=BLOCK, read_ahead=2))
    portal = r._window.portal
    checked, closed = threading.Event(), threading.Event()
    refuse = portal.refuse_loop_thread

    def in_between(op: str = "") -> None:
        # Runs in the read, after its open check and before its lock.
        if threading.current_thread() is worker:
            checked.set()
            assert closed.wait(60)
        refuse(op)

    monkeypatch.setattr(portal, "refuse_loop_thread", in_between)
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.append(r.read(10))
        except Exception as exc:
            outcome.append(exc)

    worker = threading.Thread(target=read)
    worker.start()
    assert checked.wait(60)
    r.close()
    closed.set()
    worker.join(60)
    assert isinstance(outcome[0], InvalidArgument), outcome
    assert "closed" in str(outcome[0])
    assert seen == [] and r._window.blocks == {}


def test_threads_of_a_forked_child_adopt_its_copy_once(
        monkeypatch: pytest.MonkeyPatch, sync_client: Client, bucket: str,
        blob: bytes) -> None:
    # A forked child's copy (here: a reader whose pid is not this process's)
    # is adopted by the first read. Two threads reading it at once each
    # adopted it and each put in a lock of its own: their reads then ran
    # side by side, each under its own lock.
    from aioflux._engines import reader_blocks

    reader = ObjectReader(sync_client.aio, bucket, "blob",
                          options=ReaderOptions(block_size=BLOCK, read_ahead=2))
    reader._window.pid = -1
    both = threading.Barrier(2)
    portal = reader_blocks.get_portal

    def meeting() -> Any:
        # Both threads meet here while adopting, unless one waits for the
        # other to finish adopting first (then the wait gives up).
        try:
            both.wait(timeout=0.5)
        except threading.BrokenBarrierError:
            pass
        return portal()

    monkeypatch.setattr(reader_blocks, "get_portal", meeting)
    locks: list[Any] = []
    threads = [threading.Thread(target=lambda: locks.append(reader._window.locked()))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.setattr(reader_blocks, "get_portal", portal)
    assert len(locks) == 2 and locks[0] is locks[1] is reader._window.lock
    assert reader._window.pid == os.getpid()
    assert reader.read() == blob
    reader.close()
