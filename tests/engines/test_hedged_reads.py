"""Hedged reads against the emulator's heavy-tail knob, and the knob itself;
an ordered stream reading on behind a late read.

Each test runs its own emulator on the test's loop (knobs never leak). The
tail RNG is seeded: :func:`_seed_delaying` finds a seed whose draws hold
back the first GET and not the second, so "the duplicate wins" is
deterministic rather than a matter of luck.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from aioflux import (
    AsyncClient,
    ClientConfig,
    Downloader,
    DownloadOptions,
    InvalidArgument,
    ObjectInfo,
    aload_files,
)
from aioflux._engines.hedge import AUTO_FLOOR, AUTO_MIN_SAMPLES, Hedger
from aioflux.testing import Emulator, EmulatorProfile
from tests.conftest import FAST_RETRY
from tests.servers.raw_server import serving

BUCKET = "hedge"
SIZE = 64 * 1024
# How long a held-back GET waits before its first byte where its duplicate
# must win: far longer than any duplicate takes on a loaded machine, so
# which GET answered first is never a race. Nothing waits it out (the
# loser is cancelled; the emulator drops its handler at shutdown).
HELD = 60.0
# What the tests wait for is an event; this only bounds how long before
# it counts as never coming (a hang).
HANG = 30.0


def _data(i: int) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(256)) * (SIZE // 256)


def _seed_delaying(pattern: list[bool], fraction: float) -> int:
    """A tail seed whose successive media GETs are held back as ``pattern`` says."""
    for seed in range(10_000):
        rng = random.Random(seed)
        ok = True
        for delayed in pattern:
            hit = rng.random() < fraction
            if hit:
                rng.uniform(0.0, 1.0)  # the delay's own draw, as the emulator takes it
            if hit != delayed:
                ok = False
                break
        if ok:
            return seed
    raise AssertionError("no seed found")


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    async with Emulator() as emulator:
        emulator.create_bucket(BUCKET)
        for i in range(120):
            emulator.store.put(BUCKET, f"obj-{i:03d}", _data(i))
        yield emulator


async def _objects(client: AsyncClient, count: int) -> list[ObjectInfo]:
    return [await client.stat(BUCKET, f"obj-{i:03d}") for i in range(count)]


async def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def _lean_leftovers(client: AsyncClient) -> int:
    """Lean-pool sockets open but not idle in the pool (in use, or leaked)."""
    pool = client.transport._current().media
    assert pool is not None
    idle = sum(len(q) for q in pool._idle.values())
    return pool.sockets - idle


def _aiohttp_in_use(client: AsyncClient) -> int:
    connector = client.transport.session.connector
    assert connector is not None
    return len(getattr(connector, "_acquired", ()))


# -- the knob -------------------------------------------------------------------


def test_tail_knob_validation() -> None:
    for kwargs, field in [({"tail_fraction": 1.5}, "tail_fraction"),
                          ({"tail_fraction": -0.1}, "tail_fraction"),
                          ({"tail_delay": (2.0, 1.0)}, "tail_delay"),
                          ({"tail_delay": (-1.0, 1.0)}, "tail_delay")]:
        with pytest.raises(ValueError, match=field):
            EmulatorProfile(**kwargs)  # type: ignore[arg-type]


async def test_tail_knob_holds_back_a_seeded_fraction_before_the_first_byte(
        emu: Emulator) -> None:
    url = f"{emu.endpoint}/storage/v1/b/{BUCKET}/o/obj-000?alt=media"

    async def heads(n: int) -> list[bool]:
        """Which of ``n`` GETs the emulator held back (by its own count; a
        held-back one waited at least the tail's shortest delay for its head)."""
        held = []
        async with aiohttp.ClientSession() as http:
            for _ in range(n):
                before = emu.stats["tail_delays"]
                started = time.perf_counter()
                async with http.get(url) as r:
                    took = time.perf_counter() - started  # the head is in
                    assert r.status == 200 and await r.read() == _data(0)
                held.append(emu.stats["tail_delays"] > before)
                assert not held[-1] or took >= 0.15
                # A HEAD never draws: the tail is for bodies.
                async with http.head(url.replace("?alt=media", "")) as r:
                    assert r.status == 200
                assert emu.stats["tail_delays"] == before + held[-1]
        return held

    # Which GETs were held back is read from the emulator's count, not from
    # how long they took: on a loaded machine a GET not held back can take
    # longer than the tail's delay.
    emu.profile = EmulatorProfile(tail_fraction=0.3, tail_delay=(0.15, 0.2), tail_seed=5)
    delayed = await heads(30)
    assert 3 <= sum(delayed) <= 18  # ~30% of 30
    # Reassigning the profile restarts the seeded RNG: the same GETs wait.
    emu.profile = EmulatorProfile(tail_fraction=0.3, tail_delay=(0.15, 0.2), tail_seed=5)
    assert await heads(30) == delayed
    emu.profile = EmulatorProfile()
    assert await heads(10) == [False] * 10


# -- hedging ----------------------------------------------------------------------


@pytest.mark.parametrize("lean", [True, False])
async def test_hedged_read_beats_a_delayed_one_and_the_loser_is_released(
        emu: Emulator, lean: bool) -> None:
    config = ClientConfig(max_concurrency=8, retry=FAST_RETRY, lean_reads=lean)
    async with AsyncClient(config, endpoint=emu.endpoint) as client:
        (obj,) = await _objects(client, 1)
        seed = _seed_delaying([True, False], 0.5)
        emu.profile = EmulatorProfile(tail_fraction=0.5, tail_delay=(HELD, HELD), tail_seed=seed)
        down = Downloader(client, DownloadOptions(hedge_after=0.05, hedge_budget=1.0))
        data = await down.download(obj)
        assert data == _data(0) and zlib.crc32(data) == zlib.crc32(_data(0))
        assert emu.stats["get_media"] == 2 and emu.stats["tail_delays"] == 1
        hedge = down.stats.hedge
        assert (hedge.reads, hedge.sent, hedge.won, hedge.denied) == (1, 1, 1, 0)
        # Counted once: one object, its bytes once, one latency sample.
        assert down.stats.direct == 1 and down.stats.bytes == SIZE
        assert hedge.latency.count == 1
        # The client saw one answered GET; the cancelled one is no attempt
        # that finished (its bytes never arrived).
        assert client.stats.bytes_received == SIZE and client.stats.failures == 0
        # The cancelled GET's connection is gone, not parked mid-response.
        if lean:
            assert _lean_leftovers(client) == 0
        else:
            assert _aiohttp_in_use(client) == 0
        # And the client still reads normally over what is left.
        emu.profile = EmulatorProfile()
        assert await down.download(obj) == _data(0)
        assert down.stats.hedge.sent == 1


async def test_many_hedged_reads_are_counted_once(emu: Emulator) -> None:
    config = ClientConfig(max_concurrency=32, retry=FAST_RETRY)
    async with AsyncClient(config, endpoint=emu.endpoint) as client:
        objs = await _objects(client, 100)
        # The delays scale with this machine's read latency, measured now on
        # the same 100 reads without the tail: a fixed 0.1 s hedged reads
        # that were only slow on a loaded machine, their duplicates spent the
        # budget, and no held-back read won one.
        emu.profile = EmulatorProfile(ttfb=0.005)
        # (A hedger that never hedges: it times every read.)
        probe = Downloader(client, DownloadOptions(hedge_after=3600.0, disable_compose=True))
        await probe.download_many(objs)
        assert probe.stats.hedge.latency.count == 100 and probe.stats.hedge.sent == 0
        after = max(0.1, 2 * probe.stats.hedge.latency.percentile(1.0))
        emu.profile = EmulatorProfile(ttfb=0.005, tail_fraction=0.1,
                                      tail_delay=(10 * after, 10 * after), tail_seed=11)
        down = Downloader(client, DownloadOptions(hedge_after=after, hedge_budget=1.0,
                                                  disable_compose=True))
        requests_before, retries_before = client.stats.requests, client.stats.retries
        gets_before = emu.stats["get_media"]
        datas = await down.download_many(objs)
        assert [bytes(d) for d in datas] == [_data(i) for i in range(100)]
        hedge = down.stats.hedge
        # Which duplicates win depends on this machine's load: reads only
        # slow on a busy machine can spend the budget before a held-back
        # one asks, and then none wins. A won duplicate's counts are
        # test_hedged_read_beats_a_delayed_one's; here every GET, won or
        # lost, is counted once.
        assert hedge.sent >= 1 and hedge.won <= hedge.sent
        assert down.stats.direct == 100 and down.stats.bytes == 100 * SIZE
        assert hedge.reads == 100 and hedge.latency.count == 100
        # A GET held back longer than the read-stall timeout (a tail of 10x
        # a slow machine's latency) is retried: one more GET, counted as such.
        retried = client.stats.retries - retries_before
        assert emu.stats["get_media"] - gets_before == 100 + hedge.sent + retried
        assert client.stats.requests - requests_before == 100 + hedge.sent + retried
        assert _lean_leftovers(client) == 0
        # stream() yields every object once, hedged or not.
        seen = [info.name async for info, _ in down.stream(objs[:40], window=16)]
        assert seen == [o.name for o in objs[:40]]


async def test_budget_caps_the_duplicates(emu: Emulator) -> None:
    # Every read and duplicate in flight at once: no slow start of a bucket
    # new to the node (the request-rate controller's, 8 attempts at first,
    # would hold the duplicates back until the reads they hedge had ended).
    config = ClientConfig(max_concurrency=128, retry=FAST_RETRY, request_rate="off")
    async with AsyncClient(config, endpoint=emu.endpoint) as client:
        objs = await _objects(client, 100)
        # Every GET is held back, duplicates included: only the budget
        # stops one per read.
        emu.profile = EmulatorProfile(tail_fraction=1.0, tail_delay=(0.3, 0.3), tail_seed=1)
        down = Downloader(client, DownloadOptions(hedge_after=0.1, disable_compose=True))
        datas = await down.download_many(objs)
        assert [bytes(d) for d in datas] == [_data(i) for i in range(100)]
        hedge = down.stats.hedge
        assert hedge.sent == 5  # the default 5% of 100 reads
        assert hedge.denied == 95
        assert emu.stats["get_media"] == 105
        assert down.stats.direct == 100 and down.stats.bytes == 100 * SIZE


async def test_a_hedged_read_cancelled_twice_returns_once_both_reads_have_ended() -> None:
    # The hedger waits for the reads it cancels, so that none still holds a
    # permit or a socket when it returns. Cancelled again while waiting, it
    # stopped waiting (a shielded wait): a read whose unwinding takes a few
    # turns of the loop (opening a connection, releasing a response) was
    # still running when the hedged read had returned.
    running = 0

    async def read() -> bytes:
        nonlocal running
        running += 1
        try:
            await asyncio.Event().wait()  # never answers
        finally:
            for _ in range(3):
                await asyncio.sleep(0)
            running -= 1
        raise AssertionError("unreachable")

    hedger = Hedger(0.001, 1.0)
    task = asyncio.ensure_future(hedger.run(read))
    await _until(lambda: running == 2)  # the duplicate is out
    at_return: list[int] = []
    task.add_done_callback(lambda _: at_return.append(running))
    task.cancel()
    await asyncio.sleep(0)  # the hedger cancels both reads and waits for them...
    task.cancel()  # ...and is cancelled again while they unwind
    assert running == 2
    with pytest.raises(asyncio.CancelledError):
        await task
    assert at_return == [0]
    assert (hedger.stats.sent, hedger.stats.won) == (1, 0)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_a_hedged_read_cancelled_twice_gives_back_its_permits_first(lean: bool) -> None:
    # Both GETs are still opening their connection (a TLS handshake the
    # server never answers) when the read is cancelled, and it is
    # cancelled again while they unwind: a lean GET cancelled while
    # connecting takes a few turns of the loop to give back its socket and
    # its permit, which the hedged read returned still holding.
    accepted = closed = 0

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted, closed
        accepted += 1
        try:
            await reader.read()
        finally:
            closed += 1
            writer.close()

    async with serving(silent) as endpoint:
        config = ClientConfig(max_concurrency=8, lean_reads=lean, retry=FAST_RETRY)
        async with AsyncClient(config, endpoint=endpoint.replace("http:", "https:")) as client:
            state = client.transport._current()
            hedger = Hedger(0.01, 1.0, max_concurrency=8)
            task = asyncio.ensure_future(hedger.run(lambda: client.read(BUCKET, "obj")))
            await _until(lambda: accepted == 2)
            assert state.semaphore._value == 8 - 2  # each GET holds a permit
            task.cancel()
            await asyncio.sleep(0)
            task.cancel()
            assert state.semaphore._value == 8 - 2
            with pytest.raises(asyncio.CancelledError):
                await task
            assert state.semaphore._value == 8
            if lean:
                assert state.media is not None and state.media.sockets == 0
            assert (hedger.stats.sent, hedger.stats.won) == (1, 0)
            await _until(lambda: closed == 2)  # both sockets went


async def test_auto_engages_only_after_enough_samples(emu: Emulator) -> None:
    config = ClientConfig(max_concurrency=8, retry=FAST_RETRY)
    async with AsyncClient(config, endpoint=emu.endpoint) as client:
        objs = await _objects(client, AUTO_MIN_SAMPLES + 1)
        down = Downloader(client, DownloadOptions(hedge_after="auto", hedge_budget=1.0))
        hedger = down._hedger
        for obj in objs[:AUTO_MIN_SAMPLES - 1]:
            assert hedger.delay() is None
            await down.download(obj)
        # The last read before it engages is held back and waits it out.
        emu.profile = EmulatorProfile(tail_fraction=1.0, tail_delay=(0.4, 0.4), tail_seed=1)
        started = time.perf_counter()
        assert await down.download(objs[AUTO_MIN_SAMPLES - 1]) == _data(AUTO_MIN_SAMPLES - 1)
        held = time.perf_counter() - started
        assert held >= 0.4  # a lower bound: a busy machine only adds to it
        assert down.stats.hedge.sent == 0
        # Now the p95 of what was seen: the 19 reads not held back (the
        # floor under them), not the one that was.
        delay = hedger.delay()
        assert delay is not None and AUTO_FLOOR <= delay < held
        seed = _seed_delaying([True, False], 0.5)
        emu.profile = EmulatorProfile(tail_fraction=0.5, tail_delay=(HELD, HELD), tail_seed=seed)
        assert await down.download(objs[AUTO_MIN_SAMPLES]) == _data(AUTO_MIN_SAMPLES)
        assert (down.stats.hedge.sent, down.stats.hedge.won) == (1, 1)


@pytest.mark.parametrize("after", [0.25, None])
async def test_without_the_tail_no_duplicate_is_sent(emu: Emulator, after: float | None) -> None:
    config = ClientConfig(max_concurrency=32, retry=FAST_RETRY)
    async with AsyncClient(config, endpoint=emu.endpoint) as client:
        objs = await _objects(client, 100)
        emu.profile = dataclasses.replace(EmulatorProfile(ttfb=0.02, bandwidth=100e6))
        down = Downloader(client, DownloadOptions(hedge_after=after, hedge_budget=1.0,
                                                  disable_compose=True))
        datas = await down.download_many(objs)
        assert [bytes(d) for d in datas] == [_data(i) for i in range(100)]
        hedge = down.stats.hedge
        assert emu.stats["get_media"] == 100 + hedge.sent and emu.stats["tail_delays"] == 0
        if after is None:
            assert hedge.sent == 0
            return
        # A duplicate only for a read still unanswered after the delay
        # (none where the machine keeps up; a loaded one may hold a few
        # reads that long): the ``sent`` slowest reads each took at least
        # ``after``, by the hedger's own latencies (a bucket's upper edge,
        # never below the latency in it). A duplicate sent at once, or
        # after a delay misread, is one for a read faster than that.
        assert hedge.latency.count == 100
        if hedge.sent:
            assert hedge.latency.percentile((100 - hedge.sent + 0.5) / 100) >= after


def test_download_options_check_hedge_settings() -> None:
    for kwargs in ({"hedge_after": 0.0}, {"hedge_after": "soon"}, {"hedge_after": True},
                   {"hedge_after": float("nan")}, {"hedge_budget": 1.5},
                   {"hedge_budget": -0.1}):
        with pytest.raises(ValueError, match="hedge_"):
            DownloadOptions(**kwargs)  # type: ignore[arg-type]
    assert DownloadOptions(hedge_after="auto").hedge_after == "auto"
    assert DownloadOptions(hedge_after=1).hedge_after == 1


def test_bench_prints_batch_percentiles_and_hedges(run, emulator: Emulator,  # type: ignore[no-untyped-def]
                                                   bucket: str) -> None:
    # Batches of one read each, so the tail's draws go to the reads in
    # order: the 25th is held back (by then the default 5% budget has earned
    # a duplicate) and its duplicate is not. Writes and stats do not draw.
    seed = _seed_delaying([False] * 24 + [True, False], 0.1)
    # The session emulator: its profile is put back whatever happens.
    emulator.profile = EmulatorProfile(ttfb=0.005, tail_fraction=0.1, tail_delay=(HELD, HELD),
                                       tail_seed=seed)
    try:
        code, out, err = run("bench", f"gs://{bucket}/area", "--objects", "25", "--size",
                             "50000", "--ops", "batches", "--batch", "1", "--hedge-after",
                             # Far over a read on a loaded machine (reads 20-24
                             # may be hedged too), far under HELD.
                             "3", "--concurrency", "4", "--json")
    finally:
        emulator.profile = EmulatorProfile()
    assert code == 0, err
    (result,) = json.loads(out)["results"]
    assert result["op"] == "batches" and result["batches"] == 25
    assert result["bytes"] == 25 * 50_000  # the hedged read counted once
    assert (result["hedges_sent"], result["hedges_won"]) == (1, 1)
    # Latencies of the GETs that answered: the cancelled one never did
    # (a bench that waited for it would count it, HELD seconds later).
    assert result["requests"] == 25
    # So no batch waited for the held-back GET's answer, which it could
    # only have had after HELD.
    assert result["batch_p99_ms"] < HELD * 1000 and result["seconds"] < HELD
    assert 0 < result["batch_p50_ms"] <= result["batch_p95_ms"] <= result["batch_p99_ms"]
    code, out, _ = run("bench", f"gs://{bucket}/area", "--objects", "3", "--ops", "batches")
    assert code == 0 and "batches: 1 batch of up to 3, batch p50" in out


def test_bench_rejects_a_bad_hedge_after(run, bucket: str) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run("bench", f"gs://{bucket}/x", "--hedge-after", "soon")
    assert code == 2 and "--hedge-after: expected seconds or 'auto'" in err


async def test_stream_and_aload_files_hedge(emu: Emulator) -> None:
    config = ClientConfig(max_concurrency=8, retry=FAST_RETRY)
    async with AsyncClient(config, endpoint=emu.endpoint) as client:
        seed = _seed_delaying([True, False], 0.5)
        emu.profile = EmulatorProfile(tail_fraction=0.5, tail_delay=(HELD, HELD), tail_seed=seed)
        received = client.stats.bytes_received
        items = [item async for item in client.stream(
            f"gs://{BUCKET}/obj-007", options=DownloadOptions(hedge_after=0.05,
                                                              hedge_budget=1.0))]
        assert [(i.name, i.data) for i in items] == [("obj-007", _data(7))]
        assert emu.stats["get_media"] == 2
        # One body arrived, the duplicate's: the held-back GET never answered.
        assert client.stats.bytes_received - received == SIZE
        # aload_files: the default budget (5%) earns its first duplicate at
        # the 20th read; the 20th GET is held back, its duplicate is not.
        seed = _seed_delaying([False] * 19 + [True, False], 0.1)
        emu.profile = EmulatorProfile(tail_fraction=0.1, tail_delay=(HELD, HELD), tail_seed=seed)
        urls = [f"gs://{BUCKET}/obj-{i:03d}" for i in range(20)]
        received = client.stats.bytes_received
        got = [pair async for pair in aload_files(urls, client=client, concurrency=1,
                                                  hedge_after=0.05)]
        assert got == [(u, _data(i)) for i, u in enumerate(urls)]
        assert emu.stats["get_media"] == 2 + 21 and emu.stats["tail_delays"] == 2
        assert client.stats.bytes_received - received == 20 * SIZE
        with pytest.raises(InvalidArgument, match=r"aload_files\.hedge_after must be"):
            async for _ in aload_files(urls, client=client, hedge_after=-1.0):
                pass


def test_emulator_command_line_sets_the_tail() -> None:
    from aioflux.testing._serve import _knobs, build_parser

    args = build_parser().parse_args(["--profile", "gcs-like", "--tail-fraction", "0.01",
                                      "--tail-delay-ms", "500", "2000", "--seed", "17"])
    profile, _ = _knobs(args)
    assert profile == EmulatorProfile(ttfb=0.020, bandwidth=100e6, host_bandwidth=800e6,
                                      tail_fraction=0.01, tail_delay=(0.5, 2.0), tail_seed=17)
    default, _ = _knobs(build_parser().parse_args([]))
    assert default.tail_fraction == 0.0


# -- a late read in an ordered stream ---------------------------------------------


@pytest.mark.parametrize("reader", ["stream", "aload_files"])
async def test_an_ordered_stream_reads_on_behind_a_late_object(emu: Emulator,
                                                               reader: str) -> None:
    # The first object's GET waits until released; the 39 after it are read
    # from the emulator meanwhile (4 at a time), not held behind it, and
    # all 40 come out in order with their bytes once it is released: from a
    # Downloader's stream, and from aload_files of their URLs.
    config = ClientConfig(max_concurrency=8, retry=FAST_RETRY)
    async with AsyncClient(config, endpoint=emu.endpoint) as client:
        objs = await _objects(client, 40)
        release = asyncio.Event()

        class Late:
            """The client, its read of the first object held until released."""

            def __getattr__(self, attr: str) -> object:
                return getattr(client, attr)

            async def read(self, bucket: str, name: str, **kwargs: Any) -> bytes:
                if name == objs[0].name:
                    await release.wait()
                return await client.read(bucket, name, **kwargs)

        before = emu.stats["get_media"]
        got: list[tuple[str, bytes]] = []

        async def consume() -> None:
            if reader == "stream":
                down = Downloader(Late(), DownloadOptions(disable_compose=True))  # type: ignore[arg-type]
                async for obj, data in down.stream(objs, window=4):
                    got.append((obj.url, bytes(data)))
            else:
                async for url, data in aload_files([o.url for o in objs], client=Late(),  # type: ignore[arg-type]
                                                   concurrency=4):
                    got.append((url, data))

        task = asyncio.ensure_future(consume())
        try:
            await _until(lambda: emu.stats["get_media"] - before >= 39)
            assert got == []  # the first is still held: nothing handed out
            release.set()
            await asyncio.wait_for(task, HANG)
        finally:
            task.cancel()
        assert got == [(o.url, _data(i)) for i, o in enumerate(objs)]
        assert emu.stats["get_media"] - before == 40
