"""Parallel ranged reader against the emulator."""

from __future__ import annotations

import asyncio
import io
import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import google_crc32c
import pytest

import aioflux
from aioflux import (
    ChecksumMismatch,
    Client,
    NotFound,
    PreconditionFailed,
    ReaderOptions,
    ServerError,
)
from aioflux._core.records.types import ObjectInfo
from aioflux._engines.reader import ObjectReader
from aioflux.testing import Emulator

KiB = 1024


@pytest.fixture
def blob(sync_client: Client, bucket: str) -> bytes:
    data = os.urandom(1000 * KiB + 17)
    sync_client.write(bucket, "blob", data)
    return data


def test_sequential_read_uses_parallel_ranges(sync_client: Client, bucket: str, blob: bytes,
                                              emulator: Emulator) -> None:
    before = dict(emulator.stats)
    with aioflux.open(f"gs://{bucket}/blob", "rb", client=sync_client,
                      reader=ReaderOptions(block_size=64 * KiB, read_ahead=4)) as r:
        assert r.seekable() and r.readable()
        got = r.read()
    assert got == blob
    gets = sum(emulator.stats.values()) - sum(before.values())
    assert gets >= len(blob) // (64 * KiB)  # one ranged GET per block, plus the stat


def test_readinto_seek_tell_random_access(sync_client: Client, bucket: str, blob: bytes) -> None:
    rng = random.Random(7)
    with aioflux.open(f"gs://{bucket}/blob", "rb", client=sync_client,
                      reader=ReaderOptions(block_size=50 * KiB, read_ahead=3)) as r:
        for _ in range(40):
            start = rng.randrange(0, len(blob))
            n = rng.randrange(0, 200 * KiB)
            assert r.seek(start) == start
            buf = bytearray(n)
            got = r.readinto(buf)
            assert bytes(buf[:got]) == blob[start:start + n]
            assert r.tell() == start + got
        assert r.seek(-10, io.SEEK_END) == len(blob) - 10
        assert r.read(100) == blob[-10:]
        assert r.read(5) == b""
        r.seek(5)
        r.seek(5, io.SEEK_CUR)
        assert r.read(3) == blob[10:13]


def test_buffered_wrapper_and_readline_free_paths(sync_client: Client, bucket: str,
                                                  blob: bytes) -> None:
    raw = aioflux.open(f"gs://{bucket}/blob", "rb", client=sync_client,
                       reader=ReaderOptions(block_size=100 * KiB))
    with io.BufferedReader(raw, buffer_size=8 * KiB) as r:  # type: ignore[arg-type]
        assert r.read(10) == blob[:10]
        assert r.read() == blob[10:]


def test_missing_object(sync_client: Client, bucket: str) -> None:
    with pytest.raises(NotFound):
        aioflux.open(f"gs://{bucket}/nope", "rb", client=sync_client)


def test_generation_is_pinned(sync_client: Client, bucket: str, blob: bytes) -> None:
    r = ObjectReader(sync_client.aio, bucket, "blob", options=ReaderOptions(block_size=100 * KiB,
                                                                            read_ahead=1))
    assert r.read(10) == blob[:10]
    sync_client.write(bucket, "blob", b"new content")
    r.seek(500 * KiB)  # outside the read-ahead window: a fresh GET of the old generation
    with pytest.raises(NotFound):
        r.read(10)
    r.close()


def test_an_open_that_failed_leaves_nothing_for_the_collector(tmp_path: Path) -> None:
    # The reader half built by an open of a missing object: its finalizer's
    # close() met no lock ("Exception ignored ... AttributeError", shown
    # under python -X dev and by pytest's unraisable-exception check).
    script = textwrap.dedent(f"""
        import gc, aioflux
        try:
            aioflux.open({str(tmp_path / "missing")!r}, "rb")
        except aioflux.NotFound:
            pass
        gc.collect()
        print("done")
    """)
    out = subprocess.run([sys.executable, "-X", "dev", "-c", script], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "done\n", out.stderr
    assert out.stderr == ""


def test_empty_object(sync_client: Client, bucket: str) -> None:
    sync_client.write(bucket, "e", b"")
    with aioflux.open(f"gs://{bucket}/e", "rb", client=sync_client) as r:
        assert r.read() == b""


def _fetches(monkeypatch: pytest.MonkeyPatch, client: Client) -> list[tuple[int, int]]:
    """The ranges the reader fetches from now on."""
    seen: list[tuple[int, int]] = []
    fetch = client.aio.fetch

    async def recorded(*args: object, **kwargs: int) -> object:
        seen.append((kwargs["start"], kwargs["end"]))
        return await fetch(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(client.aio, "fetch", recorded)
    return seen


def test_a_small_read_after_a_seek_fetches_just_its_bytes(
        sync_client: Client, bucket: str, blob: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    block, size = 100 * KiB, len(blob)
    seen = _fetches(monkeypatch, sync_client)
    with ObjectReader(sync_client.aio, bucket, "blob",
                      options=ReaderOptions(block_size=block, read_ahead=3)) as r:
        r.seek(-100, io.SEEK_END)  # a Parquet footer
        assert r.read(100) == blob[-100:]
        assert seen == [(size - 100, size)]
        assert r.read(50) == b""
        r.seek(size // 2)
        assert r.read(block // 4) == blob[size // 2:size // 2 + block // 4]
        assert seen[1:] == [(size // 2, size // 2 + block // 4)]
        del seen[:]
        # Going on from there is read by blocks, with read-ahead.
        assert r.read(10) == blob[size // 2 + block // 4:size // 2 + block // 4 + 10]
        # (The read-ahead's requests may start after the read returns.)
        assert seen[0] == (5 * block, 6 * block)
        assert set(seen) <= {(i * block, (i + 1) * block) for i in (5, 6, 7)}
        r.seek(6 * block + 5)  # bytes a block holds: from the block
        assert r.read(200) == blob[6 * block + 5:6 * block + 205]
        assert (6 * block + 5, 6 * block + 205) not in seen
        r.seek(3 * block + 7)  # more than a quarter block: by blocks
        assert r.read(block // 4 + 1) == blob[3 * block + 7:3 * block + 7 + block // 4 + 1]
        assert (3 * block, 4 * block) in seen
        assert all(e - s in (block, size % block) for s, e in seen[1:])


def test_reading_back_from_the_front_after_a_footer_is_still_checked(
        sync_client: Client, bucket: str, blob: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fetches(monkeypatch, sync_client)
    with ObjectReader(sync_client.aio, bucket, "blob",
                      options=ReaderOptions(block_size=100 * KiB, read_ahead=3)) as r:
        r.seek(-22, io.SEEK_END)  # torch.load: a zip's end record, then its first header
        r.read(22)
        r.seek(0)
        assert r.read(30) == blob[:30]
        assert seen[1] == (0, 100 * KiB)  # block 0 from its start: the crc32c goes on
        assert r.read() == blob[30:]
        assert r._check.next * r.block_size >= len(blob) and r._check.corrupt is None


def test_a_stale_recent_info_reads_the_current_version(
        sync_client: Client, bucket: str, blob: bytes) -> None:
    old = sync_client.stat(bucket, "blob")
    options = ReaderOptions(block_size=100 * KiB, read_ahead=2)
    sync_client.write(bucket, "blob", b"the new version")
    with ObjectReader(sync_client.aio, bucket, "blob", options=options, info=old,
                      recent=True) as r:
        assert r.size == len(blob)  # as the cache said, until a read finds it stale
        assert r.read() == b"the new version"
        assert r.size == 15 and r.info.generation != old.generation
    with ObjectReader(sync_client.aio, bucket, "blob", options=options, info=old,
                      recent=True) as r:
        r.seek(-10, io.SEEK_END)  # a small read after a seek finds it stale too,
        with pytest.raises(PreconditionFailed):  # and the size the seek used is gone:
            r.read(10)  # the last 10 bytes are not there, nor are they nothing
        r.seek(4)
        assert r.read(3) == b"new"
    small = sync_client.stat(bucket, "blob")
    sync_client.write(bucket, "blob", blob)
    with ObjectReader(sync_client.aio, bucket, "blob", options=options, info=small,
                      recent=True) as r:
        r.seek(1000)  # past the end the cache named: the store says where it is now
        assert r.read(10) == blob[1000:1010]
    with ObjectReader(sync_client.aio, bucket, "blob", options=options, info=old) as r:
        with pytest.raises(NotFound):  # not from a cache: the version is pinned
            r.read(10)
    sync_client.delete(bucket, "blob")
    with ObjectReader(sync_client.aio, bucket, "blob", options=options, info=small,
                      recent=True) as r, pytest.raises(NotFound):
        r.read(10)


def test_an_object_of_one_block_is_read_whole_from_its_footer(
        sync_client: Client, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    small = os.urandom(60 * KiB)
    sync_client.write(bucket, "small", small)
    seen = _fetches(monkeypatch, sync_client)
    with ObjectReader(sync_client.aio, bucket, "small",
                      options=ReaderOptions(block_size=100 * KiB, read_ahead=3)) as r:
        r.seek(-100, io.SEEK_END)  # a small Parquet file's footer: the file, in one GET
        assert r.read(100) == small[-100:]
        r.seek(0)
        assert r.read(1000) == small[:1000]  # its data: already here
    assert seen == [(0, len(small))]


def test_a_long_read_no_read_ahead_holds_goes_straight_into_the_buffer(
        sync_client: Client, bucket: str, blob: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Parquet row group: after the footer, one read from near the front to
    # near the end. Its whole blocks are fetched into the caller's buffer,
    # all at once; the block it ends inside is fetched whole and kept.
    block, size = 100 * KiB, len(blob)
    seen = _fetches(monkeypatch, sync_client)
    with ObjectReader(sync_client.aio, bucket, "blob",
                      options=ReaderOptions(block_size=block, read_ahead=2)) as r:
        r.seek(-100, io.SEEK_END)
        r.read(100)
        del seen[:]
        r.seek(4)
        buf = bytearray(size - 4 - 500)
        assert r.readinto(buf) == len(buf) and bytes(buf) == blob[4:-500]
        assert r.read() == blob[-500:]  # from the block kept, then the last one
    ends_in = (size - 501) // block
    assert sorted(seen) == [(4, block)] + [(i * block, (i + 1) * block)  # each once
                                           for i in range(1, ends_in + 1)] + [(10 * block, size)]


def test_the_read_ahead_past_a_long_read_starts_with_it(
        sync_client: Client, bucket: str, blob: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    # pyarrow reads the rest of a row group once the long read returns: the
    # blocks after it are on their way by then, not asked for only then.
    block = 100 * KiB
    fetch = sync_client.aio.fetch
    seen: list[int] = []
    ahead: list[asyncio.Event] = []

    async def gated(*args: object, **kwargs: int) -> object:
        if not ahead:
            ahead.append(asyncio.Event())
        seen.append(kwargs["start"])
        if kwargs["start"] == 5 * block:
            ahead[0].set()
        elif kwargs["start"] < 5 * block:  # the long read's GETs wait for it
            try:
                await asyncio.wait_for(ahead[0].wait(), 30)
            except TimeoutError:
                raise AssertionError("the read-ahead waited for the long read") from None
        return await fetch(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sync_client.aio, "fetch", gated)
    with ObjectReader(sync_client.aio, bucket, "blob",
                      options=ReaderOptions(block_size=block, read_ahead=2)) as r:
        r.seek(4)
        buf = bytearray(5 * block - 4)
        assert r.readinto(buf) == len(buf) and bytes(buf) == blob[4:5 * block]
        assert r.read(block) == blob[5 * block:6 * block]
    assert seen.count(5 * block) == 1


def test_a_long_read_from_the_front_is_still_checked(
        sync_client: Client, bucket: str, blob: bytes, emulator: Emulator) -> None:
    options = ReaderOptions(block_size=100 * KiB, read_ahead=2)
    with ObjectReader(sync_client.aio, bucket, "blob", options=options) as r:
        buf = bytearray(len(blob))
        assert r.readinto(buf) == len(blob) and bytes(buf) == blob
        assert r._check.next * r.block_size >= len(blob) and r._check.corrupt is None
    bad = bytearray(blob)
    bad[-1] ^= 1  # in the last block, which is read as a block
    emulator.store.put(bucket, "bad", bytes(bad), crc32c=google_crc32c.value(blob))
    bad[300 * KiB] ^= 1  # in a whole block fetched straight into the buffer
    bad[-1] ^= 1
    emulator.store.put(bucket, "bad2", bytes(bad), crc32c=google_crc32c.value(blob))
    for name in ("bad", "bad2"):
        with ObjectReader(sync_client.aio, bucket, name, options=options) as r:
            with pytest.raises(ChecksumMismatch, match=f"gs://{bucket}/{name}"):
                r.readinto(bytearray(len(blob)))


@pytest.mark.parametrize("rest", ["read", "readinto", "peek"])
def test_reads_going_on_inside_a_block_are_still_checked(
        sync_client: Client, bucket: str, blob: bytes, emulator: Emulator, rest: str) -> None:
    # Blocks 0 and 1 held by a first read, a long read ending inside block 3
    # (no room to keep it: its part goes straight into the buffer, then the
    # read-ahead fetches it whole); the next read goes on from inside it.
    # The check counted a block only when read from its start: it stopped
    # at block 3, and a flipped byte past it loaded in silence (found only
    # by verify(), which read those blocks again).
    options = ReaderOptions(block_size=100 * KiB, read_ahead=2)
    bad = bytearray(blob)
    bad[600 * KiB] ^= 1
    emulator.store.put(bucket, "bad", bytes(bad), crc32c=google_crc32c.value(blob))
    for name, body in (("blob", blob), ("bad", bytes(bad))):
        with ObjectReader(sync_client.aio, bucket, name, options=options) as r:
            assert r.read(10) == body[:10]
            head = bytearray(350 * KiB - 10)
            assert r.readinto(head) == len(head) and bytes(head) == body[10:350 * KiB]

            def on(r: ObjectReader = r, left: int = len(body) - 350 * KiB) -> bytes:
                if rest == "peek":
                    r.peek(1)
                if rest == "readinto":
                    buf = bytearray(left)
                    return bytes(buf[:r.readinto(buf)])
                return r.read()

            if name == "bad":
                with pytest.raises(ChecksumMismatch, match=f"gs://{bucket}/bad"):
                    on()
            else:
                assert on() == body[350 * KiB:]
                assert r._check.next * r.block_size >= len(body) and r._check.corrupt is None


def test_a_long_read_failing_stops_every_get_and_can_be_read_again(
        sync_client: Client, bucket: str, blob: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    block = 100 * KiB
    fetch = sync_client.aio.fetch
    failing, running = [True], [0]

    async def flaky(*args: object, **kwargs: object) -> object:
        running[0] += 1
        try:
            if failing[0] and kwargs["start"] == 5 * block:
                raise ServerError("read: HTTP 503 (scripted)", operation="read",
                                  bucket=bucket, name="blob")
            return await fetch(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            running[0] -= 1

    monkeypatch.setattr(sync_client.aio, "fetch", flaky)
    with ObjectReader(sync_client.aio, bucket, "blob",
                      options=ReaderOptions(block_size=block, read_ahead=2)) as r:
        buf = bytearray(len(blob))
        with pytest.raises(ServerError):
            r.readinto(buf)
        assert running[0] == 0  # none left writing into the caller's buffer
        assert r.tell() == 0
        failing[0] = False
        assert r.readinto(buf) == len(blob) and bytes(buf) == blob


def test_a_long_read_on_a_stale_recent_info_reads_the_current_version(
        sync_client: Client, bucket: str, blob: bytes) -> None:
    old = sync_client.stat(bucket, "blob")
    newer = os.urandom(len(blob) - 1000)
    sync_client.write(bucket, "blob", newer)
    with ObjectReader(sync_client.aio, bucket, "blob", info=old, recent=True,
                      options=ReaderOptions(block_size=100 * KiB, read_ahead=2)) as r:
        buf = bytearray(len(blob))
        assert r.readinto(buf) == len(newer) and bytes(buf[:len(newer)]) == newer
        assert r.info.generation != old.generation


def _as_listed(client: Client, bucket: str, name: str) -> ObjectInfo:
    """The object's info as an S3 listing gives it: no checksums."""
    return client.stat(bucket, name)._replace(crc32c=None, md5=None)


def _stat_after_first_get(monkeypatch: pytest.MonkeyPatch, client: Client,
                          between: Callable[[], object] = lambda: None) -> None:
    """The store's stat answers only once a GET has returned (``between``
    runs then): an open that stat'ed first would wait for good."""
    stat, fetch = client.aio.stat, client.aio.fetch
    fetched = asyncio.Event()

    async def gated_fetch(*args: object, **kwargs: object) -> object:
        try:
            return await fetch(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            fetched.set()

    async def late_stat(*args: object, **kwargs: object) -> object:
        try:
            await asyncio.wait_for(fetched.wait(), 30)
        except TimeoutError:
            raise AssertionError("the stat ran before any GET") from None
        between()
        return await stat(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(client.aio, "fetch", gated_fetch)
    monkeypatch.setattr(client.aio, "stat", late_stat)


def test_a_stat_beside_the_first_get_gives_the_checksum_checked(
        sync_client: Client, bucket: str, blob: bytes, emulator: Emulator,
        monkeypatch: pytest.MonkeyPatch) -> None:
    bad = bytearray(blob)
    bad[200 * KiB] ^= 1
    emulator.store.put(bucket, "bad", bytes(bad), crc32c=google_crc32c.value(blob))
    listed = {name: _as_listed(sync_client, bucket, name) for name in ("blob", "bad")}
    _stat_after_first_get(monkeypatch, sync_client)
    options = ReaderOptions(block_size=100 * KiB, read_ahead=2)
    with ObjectReader(sync_client.aio, bucket, "blob", info=listed["blob"], recent=True,
                      stat_beside=True, options=options) as r:
        assert r.read() == blob
        assert r.info.crc32c == google_crc32c.value(blob)
    for read in (lambda r: r.read(), lambda r: r.readinto(bytearray(len(blob)))):
        with ObjectReader(sync_client.aio, bucket, "bad", info=listed["bad"], recent=True,
                          stat_beside=True, options=options) as r:
            with pytest.raises(ChecksumMismatch, match=f"gs://{bucket}/bad"):
                read(r)


@pytest.mark.parametrize("first", ["footer", "by blocks", "long"])
def test_a_stat_beside_finding_another_version_reads_that_one(
        sync_client: Client, bucket: str, blob: bytes, emulator: Emulator,
        monkeypatch: pytest.MonkeyPatch, first: str) -> None:
    listed = _as_listed(sync_client, bucket, "blob")
    newer = os.urandom(len(blob) // 2)
    # Replaced between the first GET (pinned: the old bytes) and the stat.
    _stat_after_first_get(monkeypatch, sync_client, lambda: emulator.store.put(
        bucket, "blob", newer, crc32c=google_crc32c.value(newer)))
    with ObjectReader(sync_client.aio, bucket, "blob", info=listed, recent=True,
                      stat_beside=True,
                      options=ReaderOptions(block_size=100 * KiB, read_ahead=2)) as r:
        if first == "footer":  # one exact GET
            r.seek(len(newer) - 100)
            assert r.read(100) == newer[-100:]
        elif first == "by blocks":
            assert r.read(10) == newer[:10]
        else:  # straight into the buffer
            buf = bytearray(len(blob))
            assert r.readinto(buf) == len(newer) and buf[:len(newer)] == newer
        assert r.info.generation != listed.generation and r.size == len(newer)
        r.seek(0)
        assert r.read() == newer


def test_a_stat_beside_failing_fails_the_read_and_the_next_asks_again(
        sync_client: Client, bucket: str, blob: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = _as_listed(sync_client, bucket, "blob")
    failures = [ServerError("stat: HTTP 503 (scripted)", operation="stat", bucket=bucket,
                            name="blob")]

    def fail_once() -> None:
        if failures:
            raise failures.pop()

    _stat_after_first_get(monkeypatch, sync_client, fail_once)
    with ObjectReader(sync_client.aio, bucket, "blob", info=listed, recent=True,
                      stat_beside=True,
                      options=ReaderOptions(block_size=100 * KiB, read_ahead=2)) as r:
        with pytest.raises(ServerError):
            r.read(10)  # fetched, but never handed out unchecked
        assert r.tell() == 0
        assert r.read() == blob
        assert r.info.crc32c == google_crc32c.value(blob)  # checked against it


@pytest.mark.parametrize("stat_beside", [False, True])
def test_lines_read_front_to_back_are_checked_and_are_io_s(
        sync_client: Client, bucket: str, emulator: Emulator,
        monkeypatch: pytest.MonkeyPatch, stat_beside: bool) -> None:
    # Lines within a block held are sliced from it (not through read());
    # the block's start still goes through the check, so a flipped byte in
    # any block fails the pass, and the lines are io's, sizes included.
    rng = random.Random(7)
    data = b"".join(b"x" * rng.randrange(0, 300) + b"\n" for _ in range(4000))
    good = google_crc32c.value(data)
    sync_client.write(bucket, "lines", data)
    bad = bytearray(data)
    bad[len(data) // 2 + 3] ^= 1  # mid-block, where the fast path slices
    emulator.store.put(bucket, "bad-lines", bytes(bad), crc32c=good)
    listed = {name: _as_listed(sync_client, bucket, name) for name in ("lines", "bad-lines")}
    if stat_beside:
        _stat_after_first_get(monkeypatch, sync_client)
    options = ReaderOptions(block_size=100 * KiB, read_ahead=2)

    def reader(name: str) -> ObjectReader:
        if stat_beside:
            return ObjectReader(sync_client.aio, bucket, name, info=listed[name], recent=True,
                                stat_beside=True, options=options)
        return ObjectReader(sync_client.aio, bucket, name, options=options)

    with reader("lines") as r:
        assert list(r) == io.BytesIO(data).readlines()
        assert r._check.next * r.block_size >= len(data) and r._check.corrupt is None
    with reader("lines") as r:
        ref = io.BytesIO(data)
        for size in [7, 1, 0, 500, -1] * 2000:
            assert r.readline(size) == ref.readline(size)
    with reader("bad-lines") as r, pytest.raises(ChecksumMismatch, match="bad-lines"):
        for _ in r:
            pass
