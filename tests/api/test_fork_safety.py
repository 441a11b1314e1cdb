"""Objects made before a fork, met in the forked child (a DataLoader worker
is one): they never hang it, and never touch the parent's uploads.

A child has no copy of the parent's event-loop thread. Work handed to the
parent's loop there waited forever: a writer the parent had dropped, once
the child's garbage collector aborted it, hung the worker."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
import warnings

import pytest

import aioflux
from aioflux import AsyncClient, BridgeError, Client, ReaderOptions, WriterOptions
from aioflux._core.concurrency.portal import get_portal
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux._engines.writer import UnclosedWriterWarning
from tests.servers.forking import in_fork

MiB = 1 << 20


def _collect_silently() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, (ResourceWarning,
                                                            UnclosedWriterWarning))], caught


def test_a_writer_dropped_before_the_fork_is_collected_in_the_child(
        sync_client: Client, bucket: str) -> None:
    options = WriterOptions(part_size=5 * MiB)
    gc.disable()  # the writer stays uncollected garbage until the child runs
    # Inside the check from the start: once the collector is back on, any
    # allocation may collect the writer before the explicit collect() below.
    with pytest.warns(UnclosedWriterWarning, match=f"unclosed writer gs://{bucket}/dropped"):
        try:
            writer = aioflux.open(f"gs://{bucket}/dropped", "wb", client=sync_client,
                                  writer=options)
            writer.write(os.urandom(6 * MiB))  # a part went up: an upload is open
            writer.cycle = writer  # type: ignore[attr-defined]  # only the cyclic GC frees it
            del writer
            in_fork(_collect_silently)  # the child's copy: the upload and data are the parent's
        finally:
            gc.enable()
        gc.collect()  # the parent's own copy is aborted here, as usual
    assert list(sync_client.list_objects(bucket)) == []


def test_a_child_never_aborts_nor_continues_the_parents_upload(sync_client: Client,
                                                               bucket: str) -> None:
    data = os.urandom(7 * MiB)
    with aioflux.open(f"gs://{bucket}/parent", "wb", client=sync_client,
                      writer=WriterOptions(part_size=5 * MiB)) as writer:
        writer.write(data[:6 * MiB])

        def child() -> None:
            with pytest.raises(BridgeError, match="forked child"):
                writer.write(b"more")
            with pytest.raises(BridgeError, match="forked child"):
                writer.close()
            writer.abort()  # the child's copy only

        in_fork(child)
        writer.write(data[6 * MiB:])
    assert sync_client.read(bucket, "parent") == data


async def test_a_child_never_aborts_nor_continues_the_parents_async_upload(
        client: AsyncClient, bucket: str) -> None:
    # As ObjectWriter: the child's copy of an async writer refuses. It used
    # to send its part to the parent's upload (then hang in close()).
    data = os.urandom(7 * MiB)
    writer = AsyncObjectWriter(client, bucket, "parent", options=WriterOptions(part_size=5 * MiB))
    await writer.write(data[:6 * MiB])

    def child() -> None:
        async def use() -> None:
            with pytest.raises(BridgeError, match="forked child"):
                await writer.write(b"more")
            with pytest.raises(BridgeError, match="forked child"):
                await writer.close()
            await writer.abort()  # the child's copy only

        asyncio.run(use())

    in_fork(child, timeout=15)
    await writer.write(data[6 * MiB:])
    info = await writer.close()
    assert info.size == len(data) and await client.read(bucket, "parent") == data


@pytest.mark.parametrize("scheme", ["gs", "file"])
def test_a_reader_opened_before_the_fork_reads_in_the_child(
        scheme: str, sync_client: Client, bucket: str, tmp_path: os.PathLike[str]) -> None:
    data = os.urandom(3 * MiB + 5)
    url = f"gs://{bucket}/r" if scheme == "gs" else os.path.join(tmp_path, "r")
    client = sync_client if scheme == "gs" else None
    with aioflux.open(url, "wb", client=client) as f:
        f.write(data)
    options = ReaderOptions(block_size=256 * 1024, read_ahead=4)
    with aioflux.open(url, "rb", client=client, reader=options) as reader:
        assert reader.read(1000) == data[:1000]  # read-ahead now in flight

        def child() -> None:
            # The parent's read-ahead never completes here: fetched anew.
            assert reader.read() == data[1000:]
            reader.seek(0)
            assert reader.read() == data

        in_fork(child)
        assert reader.read() == data[1000:]


def test_the_parents_loop_refuses_work_in_the_child() -> None:
    portal = get_portal()

    async def nothing() -> int:
        return 1

    assert portal.call(nothing()) == 1

    def child() -> None:
        with pytest.raises(BridgeError, match="forked child"):
            portal.call(nothing())
        with pytest.raises(BridgeError, match="forked child"):
            portal.submit(nothing())
        assert get_portal().call(nothing()) == 1  # this process's own loop

    in_fork(child)


def test_a_listing_left_half_read_before_the_fork_is_collected_in_the_child(
        sync_client: Client, bucket: str) -> None:
    for i in range(5):
        sync_client.write(bucket, f"o{i}", b"x")
    gc.disable()
    try:
        names = iter(sync_client.list_objects(bucket))
        assert next(names).name == "o0"
        holder = [names]
        holder.append(holder)  # type: ignore[arg-type]  # only the cyclic GC frees it
        del names, holder

        def child() -> None:
            unraisable: list[object] = []
            sys.unraisablehook = unraisable.append
            gc.collect()  # closes the generator, whose pump is the parent's
            assert unraisable == []

        in_fork(child)
    finally:
        gc.enable()
    gc.collect()


def test_locks_another_thread_held_at_the_fork_are_not_the_childs() -> None:
    import asyncio

    from aioflux._api import stores
    from aioflux._core.auth import SharedCall

    refresh = SharedCall(lambda: "token", name="refresh")
    assert asyncio.run(refresh()) == "token"
    # As a refresh thread, or a thread picking a default store, would hold
    # them at the very moment of a fork:
    with refresh._lock, stores._lock:

        def child() -> None:
            assert asyncio.run(refresh()) == "token"
            assert stores.default_store("file") is stores.default_store("file")

        in_fork(child)


def test_a_zstd_writer_dropped_before_the_fork_is_never_freed_in_the_child(
        sync_client: Client, bucket: str) -> None:
    # Freeing its compressor joins zstd worker threads that did not survive
    # the fork; the child's next threads then segfaulted or hung.
    pytest.importorskip("zstandard")
    sync_client.write(bucket, "small", b"hello")
    gc.disable()
    # Checked from the start: once the collector is back on, any allocation
    # may collect the writers before the explicit collect() below.
    with pytest.warns(UnclosedWriterWarning, match="unclosed writer"):
        try:
            for i in range(3):
                writer = aioflux.open(f"gs://{bucket}/z{i}", "wb", client=sync_client,
                                      compression="zstd")
                writer.write(os.urandom(4 * MiB))  # zstd's worker threads now run
                writer.cycle = writer  # type: ignore[attr-defined]
                del writer

            def child() -> None:
                gc.collect()
                workers = [threading.Thread(target=time.sleep, args=(0.01,))
                           for _ in range(20)]
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join()
                with Client(endpoint=sync_client.aio.endpoint) as client:
                    for _ in range(10):
                        assert client.read(bucket, "small") == b"hello"

            in_fork(child)
        finally:
            gc.enable()
        gc.collect()
    assert [o.name for o in sync_client.list_objects(bucket)] == ["small"]


def test_a_child_using_the_parents_client_reports_no_unclosed_session(
        sync_client: Client, bucket: str) -> None:
    # A DataLoader worker reading through a Client its parent used: the
    # parent's session (its sockets are the parent's, never closed here) was
    # dropped at the child's first request, and its collection logged
    # "Unclosed client session" and "Unclosed connector" in every worker.
    sync_client.write(bucket, "x", b"x")
    assert sync_client.read(bucket, "x") == b"x"  # kept-alive connections now

    def child() -> None:
        import logging

        logged: list[str] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                logged.append(record.getMessage())

        logging.getLogger("asyncio").addHandler(Keep())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert sync_client.read(bucket, "x") == b"x"
            assert sync_client.stat(bucket, "x").size == 1  # through aiohttp too
            gc.collect()
        assert not [w for w in caught if issubclass(w.category, (ResourceWarning,
                                                                UnclosedWriterWarning))], caught
        assert not [m for m in logged if "Unclosed" in m], logged

    in_fork(child)
    assert sync_client.read(bucket, "x") == b"x"  # the parent's connections still serve


def test_a_forked_childs_stats_count_only_its_own_requests(sync_client: Client,
                                                           bucket: str) -> None:
    # A DataLoader worker's client.stats started from its parent's counts,
    # and reported the parent's requests as its own.
    sync_client.write(bucket, "s", b"abc")
    assert sync_client.read(bucket, "s") == b"abc"
    parent = sync_client.stats
    before = (parent.requests, parent.bytes_sent, parent.bytes_received,
              {op: h.count for op, h in parent.latency.items()})
    assert before[0] >= 2 and before[2] == 3

    def child() -> None:
        stats = sync_client.stats
        assert (stats.requests, stats.retries, stats.failures, stats.bytes_sent,
                stats.bytes_received, stats.latency, dict(stats.retries_by_cause)) == \
            (0, 0, 0, 0, 0, {}, {}), stats
        assert sync_client.read(bucket, "s") == b"abc"
        assert (stats.requests, stats.bytes_received) == (1, 3), stats
        assert {op: h.count for op, h in stats.latency.items()} == {"read": 1}

    in_fork(child)
    after = (parent.requests, parent.bytes_sent, parent.bytes_received,
             {op: h.count for op, h in parent.latency.items()})
    assert after == before  # the parent's own, untouched by the child
