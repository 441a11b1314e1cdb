"""The disk cache across processes, killed writers, load_files/stream and the CLI.

Every test reads real objects from the emulator and checks bytes; request
counts come from the emulator's counters.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from aioflux import AsyncClient, InvalidArgument, LocalStore, ObjectInfo, load_files
from aioflux._core.records.urls import parse_url
from aioflux._engines.cache import DiskCache, Unclaimable, info
from aioflux._engines.iterables import stream
from aioflux.testing import Emulator, EmulatorProfile

CHILD_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}

# A child that fills the cache with one object, its fetch/write slowed at a
# chosen point so the parent can act while it holds the entry's lock.
CHILD = textwrap.dedent("""
    import asyncio, os, sys, time
    from aioflux import AsyncClient
    from aioflux._engines.cache import DiskCache, _files

    root, endpoint, bucket, name, mode = sys.argv[1:6]
    go = sys.argv[6] if mode == "slow" else None  # the file that lets a slow fetch end
    real_write = _files._write_all

    def half_then_hang(fd, data):
        view = memoryview(data)
        if len(view) > 1 << 20:  # the object's bytes, not the header
            real_write(fd, view[: len(view) // 2])
            print("half written", flush=True)
            time.sleep(600)
        real_write(fd, data)

    if mode == "kill":
        _files._write_all = half_then_hang

    async def main():
        async with AsyncClient(endpoint=endpoint) as client:
            obj = await client.stat(bucket, name)

            async def fetch(objects):
                if mode == "slow":
                    print("fetching", flush=True)
                    deadline = time.monotonic() + 60
                    while not os.path.exists(go) and time.monotonic() < deadline:
                        await asyncio.sleep(0.01)  # until the other process waits
                return [await client.read(o.bucket, o.name) for o in objects]

            cache = DiskCache(root)
            data = await cache.get(obj, fetch)
            print("stored", len(data), cache.stats.misses, flush=True)

    asyncio.run(main())
""")


def child(root: Path, emulator: Emulator, bucket: str, name: str,
          mode: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(root), emulator.endpoint, bucket,
                             name, mode, *extra], stdout=subprocess.PIPE, text=True,
                            env=CHILD_ENV)


async def read_all(client: AsyncClient, objects: list[ObjectInfo]) -> list[bytes | bytearray]:
    return [await client.read(o.bucket, o.name) for o in objects]


async def test_killed_writer_leaves_no_entry(emulator: Emulator, bucket: str, tmp_path: Path,
                                             client: AsyncClient) -> None:
    body = os.urandom(8 << 20)
    emulator.store.put(bucket, "big", body)
    root = tmp_path / "cache"
    proc = child(root, emulator, bucket, "big", "kill")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "half written"
        assert info(str(root)).temporaries == 1
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()  # waits and closes the pipe
    torn = info(str(root))
    assert (torn.entries, torn.temporaries) == (0, 1)  # nothing visible, the temp left over
    cache = DiskCache(root)
    obj = await client.stat(bucket, "big")
    before = emulator.stats["get_media"]
    # The killed writer's lock died with it: no wait, a normal miss.
    data = await cache.get(obj, lambda objs: read_all(client, objs))
    assert data == body and emulator.stats["get_media"] - before == 1
    assert (cache.stats.misses, cache.stats.waits, cache.stats.stored) == (1, 0, 1)
    healed = info(str(root))
    assert (healed.entries, healed.temporaries) == (1, 0)  # the stale temp was swept
    assert os.listdir(root / "locks") == []
    assert await cache.get(obj, lambda objs: read_all(client, objs)) == body
    assert cache.stats.hits == 1


async def test_second_process_waits_for_the_first_fill(emulator: Emulator, bucket: str,
                                                       tmp_path: Path,
                                                       client: AsyncClient) -> None:
    body = os.urandom(300_000)
    emulator.store.put(bucket, "obj", body)
    root = tmp_path / "cache"
    before = emulator.stats["get_media"]
    go = tmp_path / "go"
    proc = child(root, emulator, bucket, "obj", "slow", str(go))
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "fetching"  # it holds the entry's lock
        cache = DiskCache(root)
        obj = await client.stat(bucket, "obj")
        take = cache._lock

        def lock(*args: Any) -> Any:
            got = take(*args)
            if got[1]:  # found the entry busy: the child may fill it now
                go.touch()
            return got

        cache._lock = lock  # type: ignore[method-assign]
        fetched: list[str] = []

        async def fetch(objects: list[ObjectInfo]) -> list[bytes | bytearray]:
            fetched.extend(o.name for o in objects)
            return await read_all(client, objects)

        assert await cache.get(obj, fetch) == body
        assert fetched == []  # waited for the other process instead of fetching
        assert (cache.stats.waits, cache.stats.hits, cache.stats.misses) == (1, 1, 0)
        assert proc.stdout.readline().split() == ["stored", "300000", "1"]
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.communicate()
    assert emulator.stats["get_media"] - before == 1


TWO_PROCESSES = textwrap.dedent("""
    import os, random, sys, time
    from aioflux import DownloadOptions
    from aioflux.torch import DatasetSettings, ObjectMapDataset

    url, endpoint, root, go = sys.argv[1:5]
    settings = DatasetSettings(endpoint=endpoint, cache_dir=root,
                               download_options=DownloadOptions(disable_compose=True))
    ds = ObjectMapDataset.from_prefix(url, settings=settings)
    order = list(range(len(ds)))
    random.Random(7).shuffle(order)  # the same order in both: they want the same batches
    print("ready", flush=True)
    while not os.path.exists(go):  # both start together
        time.sleep(0.001)
    got = {}
    for start in range(0, len(order), 8):
        batch = order[start:start + 8]
        for i, data in zip(batch, ds.__getitems__(batch)):
            got[ds.objects[i].name] = bytes(data)
    import hashlib
    for name in sorted(got):
        print(name, hashlib.sha256(got[name]).hexdigest())
    s = ds._source.cache.stats
    print("stats", s.misses, s.hits, s.waits, file=sys.stderr)
""")


def test_two_processes_fill_each_entry_once(emulator: Emulator, bucket: str,
                                            tmp_path: Path) -> None:
    import hashlib

    data = {f"d/{i:03d}": os.urandom(20_000) for i in range(48)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    root, go = tmp_path / "cache", tmp_path / "go"
    before = Counter(emulator.stats)
    # Each fill takes long enough to overlap (6 batches: 1.5 s a process),
    # though one process start a second after the other.
    emulator.profile = EmulatorProfile(ttfb=0.25)
    try:
        procs = [subprocess.Popen([sys.executable, "-c", TWO_PROCESSES, f"gs://{bucket}/d/",
                                   emulator.endpoint, str(root), str(go)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=CHILD_ENV) for _ in range(2)]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        go.touch()
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        emulator.profile = EmulatorProfile()
    want = "".join(f"{n} {hashlib.sha256(b).hexdigest()}\n" for n, b in sorted(data.items()))
    for (out, err), proc in zip(outs, procs, strict=True):
        assert proc.returncode == 0, err
        assert out == want
    misses, hits, waits = zip(*([int(n) for n in err.split("stats ")[1].split()]
                                for _, err in outs), strict=True)
    assert sum(misses) == 48 and sum(hits) == 48  # each entry fetched by exactly one process
    assert sum(waits) > 0  # ... the other waited for it
    assert (Counter(emulator.stats) - before)["get_media"] == 48
    assert info(str(root)).entries == 48


async def test_object_without_version_is_not_cached(emulator: Emulator, bucket: str,
                                                    tmp_path: Path,
                                                    client: AsyncClient) -> None:
    emulator.store.put(bucket, "v", b"versioned")
    obj = (await client.stat(bucket, "v")).replace(generation=0)  # no token to key on
    cache = DiskCache(tmp_path / "cache")
    for _ in range(2):
        assert await cache.get(obj, lambda objs: read_all(client, objs)) == b"versioned"
    assert (cache.stats.uncached, cache.stats.stored, cache.stats.hits) == (2, 0, 0)


def test_load_files_with_cache(emulator: Emulator, bucket: str, tmp_path: Path) -> None:
    data = {f"gs://{bucket}/f/{i}": os.urandom(5000) for i in range(10)}
    for url, body in data.items():
        emulator.store.put(bucket, url.split("/", 3)[3], body)
    from aioflux import Client

    with Client(endpoint=emulator.endpoint) as c:
        for round_ in range(2):
            before = Counter(emulator.stats)
            got = dict(load_files(list(data), client=c, cache_dir=tmp_path / "cache"))
            assert got == data
            sent = Counter(emulator.stats) - before
            # A URL has no version: one stat each, then the body from disk.
            assert sent["get_metadata"] == 10
            assert sent["get_media"] == (10 if round_ == 0 else 0)
    with pytest.raises(InvalidArgument, match="cache_limit needs a cache_dir"):
        load_files(list(data), cache_limit=10)


async def test_stream_with_cache(emulator: Emulator, bucket: str, tmp_path: Path,
                                 client: AsyncClient) -> None:
    data = {f"s/{i:02d}": os.urandom(3000) for i in range(20)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    cache = DiskCache(tmp_path / "cache", 1 << 20)
    for round_ in range(2):
        before = emulator.stats["get_media"]
        got = {item.name: item.data async for item in stream(client, bucket, "s/", cache=cache)}
        assert got == data
        assert emulator.stats["get_media"] - before == (20 if round_ == 0 else 0)
    assert (cache.stats.misses, cache.stats.hits) == (20, 20)


async def test_client_stream_with_cache_dir(emulator: Emulator, bucket: str, tmp_path: Path,
                                           client: AsyncClient) -> None:
    # The stores' own stream (gs here; file below) and the sync Client's.
    data = {f"t/{i:02d}": os.urandom(2000 + i) for i in range(12)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    root = tmp_path / "cache"
    for round_ in range(2):
        before = emulator.stats["get_media"]
        got = {item.name: item.data async for item in client.stream(bucket, "t/", cache_dir=root)}
        assert got == data
        assert emulator.stats["get_media"] - before == (12 if round_ == 0 else 0)
    from aioflux import Client

    with Client(endpoint=emulator.endpoint) as sync:
        before = emulator.stats["get_media"]
        assert {i.name: i.data for i in sync.stream(bucket, "t/", cache_dir=root)} == data
        assert emulator.stats["get_media"] == before
    files = tmp_path / "files"
    (files / "x").mkdir(parents=True)
    (files / "x" / "a").write_bytes(b"local bytes")
    store = LocalStore()
    url = parse_url(str(files) + "/")
    got_local = [i.data async for i in store.stream(url.bucket, url.name, cache_dir=root)]
    assert got_local == [b"local bytes"]
    with pytest.raises(InvalidArgument, match="cache_limit"):
        client.stream(bucket, "t/", cache_limit=10)


def test_cli_cache_info_and_clear(run, emulator: Emulator, bucket: str,  # type: ignore[no-untyped-def]
                                  tmp_path: Path) -> None:
    for i in range(5):
        emulator.store.put(bucket, f"c/{i}", os.urandom(1000 + i))
    root = tmp_path / "cache"
    urls = [f"gs://{bucket}/c/{i}" for i in range(5)]
    from aioflux import Client

    with Client(endpoint=emulator.endpoint) as c:
        assert len(list(load_files(urls, client=c, cache_dir=root, cache_limit=1 << 20))) == 5
    code, out, err = run("cache", "info", str(root))
    assert code == 0, err
    assert "entries      5\n" in out and "limit        1048576 (1.0 MiB)" in out
    code, out, err = run("cache", "info", str(root), "--json")
    assert code == 0 and '"entries": 5' in out
    code, out, err = run("cache", "clear", str(root))
    assert code == 0 and out.startswith("removed 5 entries")
    assert info(str(root)).entries == 0
    # Not a cache directory: refused, nothing touched.
    (tmp_path / "precious").write_text("keep me")
    code, out, err = run("cache", "clear", str(tmp_path))
    assert code == 1 and "not an aioflux cache directory" in err
    assert (tmp_path / "precious").read_text() == "keep me"


def test_an_opener_without_a_limit_keeps_the_recorded_one(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, tmp_path: Path) -> None:
    for i in range(3):
        emulator.store.put(bucket, f"kept/{i}", os.urandom(1000 + i))
    root = tmp_path / "cache"
    urls = [f"gs://{bucket}/kept/{i}" for i in range(3)]
    from aioflux import Client

    with Client(endpoint=emulator.endpoint) as c:
        assert len(list(load_files(urls, client=c, cache_dir=root, cache_limit=1 << 20))) == 3
        # A later reader of the same cache gives no limit: it evicts nothing,
        # so the limit that bounds the cache is still the first one.
        assert len(list(load_files(urls, client=c, cache_dir=root))) == 3
        assert info(str(root)).limit == 1 << 20
        code, out, err = run("cache", "info", str(root))
        assert code == 0, err
        assert "limit        1048576 (1.0 MiB)" in out  # was "none recorded"
        # A new limit replaces it.
        assert len(list(load_files(urls, client=c, cache_dir=root, cache_limit=1 << 21))) == 3
        assert info(str(root)).limit == 1 << 21


def test_a_limited_writer_after_unlimited_ones_keeps_the_limit(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, tmp_path: Path) -> None:
    # Writers without a limit do not keep the usage count: a limited one that
    # trusted it evicted nothing while the entries were 5.8 times its limit.
    for i in range(40):
        emulator.store.put(bucket, f"u/{i}", os.urandom(4000))
    root = tmp_path / "cache"
    urls = [f"gs://{bucket}/u/{i}" for i in range(40)]
    from aioflux import Client

    with Client(endpoint=emulator.endpoint) as c:
        assert len(list(load_files(urls[:2], client=c, cache_dir=root, cache_limit=1 << 20))) == 2
        assert len(list(load_files(urls[2:39], client=c, cache_dir=root))) == 37  # no limit
        assert info(str(root)).bytes > 100_000
        assert len(list(load_files(urls[39:], client=c, cache_dir=root,
                                   cache_limit=50_000))) == 1
    assert info(str(root)).bytes <= 50_000
    # A marker a crash left empty: info says no limit, not a traceback.
    (root / "aioflux-cache.json").write_text("")
    assert info(str(root)).limit is None
    code, _, err = run("cache", "info", str(root))
    assert code == 0 and "Traceback" not in err, err


async def test_eviction_during_a_read_does_not_tear_it(emulator: Emulator, bucket: str,
                                                        tmp_path: Path, client: AsyncClient,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux._engines.cache import _files, clear

    body = os.urandom(200_000)
    emulator.store.put(bucket, "e", body)
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20)
    obj = await client.stat(bucket, "e")
    assert await cache.get(obj, lambda objs: read_all(client, objs)) == body
    real_pread = os.pread
    cleared: list[tuple[int, int]] = []

    def pread_after_clear(fd: int, n: int, offset: int) -> bytes:
        if not cleared:  # the entry is opened: now another process clears the cache
            cleared.append(clear(str(root)))
        return real_pread(fd, n, offset)

    monkeypatch.setattr(_files.os, "pread", pread_after_clear)
    assert await cache.get(obj, lambda objs: read_all(client, objs)) == body
    assert [removed for removed, _ in cleared] == [1]
    assert (cache.stats.hits, cache.stats.corrupt, cache.stats.misses) == (1, 0, 1)
    assert info(str(root)).entries == 0  # gone from the directory, read whole all the same


async def test_aload_files_with_cache(emulator: Emulator, bucket: str, tmp_path: Path,
                                      client: AsyncClient) -> None:
    from aioflux import aload_files

    data = {f"gs://{bucket}/a/{i}": os.urandom(4000) for i in range(6)}
    for url, body in data.items():
        emulator.store.put(bucket, url.split("/", 3)[3], body)
    for round_ in range(2):
        before = emulator.stats["get_media"]
        got = {url: body async for url, body in aload_files(list(data), client=client,
                                                             cache_dir=tmp_path / "c")}
        assert got == data
        assert emulator.stats["get_media"] - before == (6 if round_ == 0 else 0)


async def test_unusable_cache_dir_is_a_typed_error(emulator: Emulator, bucket: str,
                                                   tmp_path: Path, client: AsyncClient) -> None:
    emulator.store.put(bucket, "x", b"x")
    (tmp_path / "a-file").write_text("not a directory")
    cache = DiskCache(tmp_path / "a-file" / "cache")
    obj = await client.stat(bucket, "x")
    with pytest.raises(InvalidArgument, match=r"cache .*a-file/cache: cannot be used"):
        await cache.get(obj, lambda objs: read_all(client, objs))


async def test_a_fill_that_takes_too_long_is_read_around(emulator: Emulator, bucket: str,
                                                         tmp_path: Path,
                                                         client: AsyncClient) -> None:
    body = os.urandom(50_000)
    emulator.store.put(bucket, "slow", body)
    root = tmp_path / "cache"
    go = tmp_path / "go"
    proc = child(root, emulator, bucket, "slow", "slow", str(go))
    try:
        assert proc.stdout is not None
        # It holds the lock until this process is done waiting.
        assert proc.stdout.readline().strip() == "fetching"
        cache = DiskCache(root, wait_limit=0.2)
        obj = await client.stat(bucket, "slow")
        fetched: list[str] = []

        async def fetch(objects: list[ObjectInfo]) -> list[bytes | bytearray]:
            fetched.extend(o.name for o in objects)
            return await read_all(client, objects)

        assert await cache.get(obj, fetch) == body
        go.touch()
        assert fetched == ["slow"]  # read itself after 0.2 s, not stored by this process
        assert (cache.stats.waits, cache.stats.stored, cache.stats.misses) == (1, 0, 0)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.communicate()
    assert info(str(root)).entries == 1  # the slow filler still stored it


# -- a cache_dir holding someone else's files ---------------------------------

# Files a user may keep where the cache would sweep (tmp/), evict and clear
# (entries/<fan>/): a directory given as cache_dir=os.getcwd() or "~".
_USER_FILES = {"tmp/notes.txt": b"scratch", "tmp/" + "a" * 64 + ".txt": b"hex-like",
               "entries/ab/results.csv": b"a,b\n1,2\n", "entries/notes/x": b"x",
               "entries/ab/" + "c" * 62 + ".bak": b"backup"}


def _put_user_files(root: Path) -> None:
    for name, body in _USER_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(body)


def _user_files_left(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in _USER_FILES
            if (root / name).is_file()}


def test_a_non_empty_directory_without_the_marker_is_refused(emulator: Emulator, bucket: str,
                                                            tmp_path: Path) -> None:
    emulator.store.put(bucket, "o", b"object")
    project = tmp_path / "project"
    _put_user_files(project)
    (project / "README").write_text("mine")
    why = (f"cache {project}: not a cache directory (it holds 'README', 'entries', 'tmp' but no "
           "aioflux-cache.json): a cache deletes files it takes for its own in its directory, "
           "so it uses only a new or empty one, or one a cache made")
    with pytest.raises(InvalidArgument) as refused:
        DiskCache(project)
    assert str(refused.value) == why
    from aioflux import Client

    with Client(endpoint=emulator.endpoint) as c, pytest.raises(InvalidArgument) as refused:
        list(load_files([f"gs://{bucket}/o"], client=c, cache_dir=project, cache_limit=1))
    assert str(refused.value) == why
    assert _user_files_left(project) == _USER_FILES
    assert sorted(os.listdir(project)) == ["README", "entries", "tmp"]  # no marker, no locks/


async def test_a_directory_filled_before_the_cache_opens_is_refused_then(
        emulator: Emulator, bucket: str, tmp_path: Path, client: AsyncClient) -> None:
    emulator.store.put(bucket, "o", b"object")
    obj = await client.stat(bucket, "o")
    empty, later = tmp_path / "empty", tmp_path / "later"
    empty.mkdir()
    assert await DiskCache(empty).get(obj, lambda objs: read_all(client, objs)) == b"object"
    assert info(str(empty)).entries == 1  # an empty directory is adopted
    cache = DiskCache(later)  # not there yet
    _put_user_files(later)
    with pytest.raises(InvalidArgument, match=r"not a cache directory \(it holds 'entries', "
                                              r"'tmp' but no aioflux-cache.json\)"):
        await cache.get(obj, lambda objs: read_all(client, objs))
    assert _user_files_left(later) == _USER_FILES


async def test_sweeps_eviction_and_clear_touch_only_the_caches_own_names(
        emulator: Emulator, bucket: str, tmp_path: Path, client: AsyncClient) -> None:
    from aioflux._engines.cache import clear

    bodies = {f"e/{i}": os.urandom(4096) for i in range(6)}
    for name, body in bodies.items():
        emulator.store.put(bucket, name, body)
    objects = [await client.stat(bucket, name) for name in bodies]
    root = tmp_path / "cache"
    await DiskCache(root).get(objects[0], lambda objs: read_all(client, objs))
    # Dropped into a cache directory later; plus a temporary of a killed
    # writer, in the exact form the cache writes, which must still go.
    _put_user_files(root)
    stale = root / "tmp" / f"{'d' * 64}.12345.0badcafe"
    stale.write_bytes(b"torn")
    # Room for two entries: each new one evicts.
    cache = DiskCache(root, 2 * 4096 + 1000)
    got = await cache.get_many(objects, lambda objs: read_all(client, objs))
    assert got == list(bodies.values())
    assert cache.stats.evictions >= 4
    assert not stale.exists()
    assert _user_files_left(root) == _USER_FILES
    found = info(str(root))
    assert found.entries >= 1 and found.temporaries == 0
    assert clear(str(root))[0] == found.entries
    assert info(str(root)).entries == 0
    assert _user_files_left(root) == _USER_FILES


async def test_lookup_put_and_claim_for_entries_a_caller_fills_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a compressed shard's fill uses: look up without fetching, store
    what it made, and claim a name so that one process at a time fills."""
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20)
    unit = ObjectInfo("b", "shard.gz#data=0-5", 5, 7, scheme="file")
    assert await cache.lookup(unit) is None
    assert await cache.put(unit, b"hello") == "stored"
    assert await cache.put(unit, b"hello") == "skipped"  # there already
    assert await cache.put(unit._replace(name="other", size=3), b"hello") == "skipped"  # size
    assert await cache.lookup(unit) == b"hello"
    assert (cache.stats.hits, cache.stats.stored) == (1, 1)
    # Another version of the shard: another entry.
    assert await cache.lookup(unit._replace(generation=8)) is None
    # A corrupt entry is dropped and missed, then stored again.

    entry = cache.layout.entry(cache.key(unit)[0])  # type: ignore[index]
    with open(entry, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b"!")
    assert await cache.lookup(unit) is None and not os.path.exists(entry)
    assert cache.stats.corrupt == 1
    assert await cache.put(unit, b"hello") == "stored" and await cache.lookup(unit) == b"hello"
    # A disk that cannot take it: "failed", counted.
    from aioflux._engines.cache import _files

    def full(*args: object, **kwargs: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(_files, "write_entry", full)
        assert await cache.put(unit._replace(generation=9), b"hello") == "failed"
    assert cache.stats.errors == 1
    # A claim is held by one taker at a time, this process's other tasks included.
    shard = unit._replace(name="shard.gz#decompress", size=100)
    fd = await cache.claim(shard)
    assert fd is not None and await cache.claim(shard) is None
    cache.release(shard, fd)
    again = await cache.claim(shard)
    assert again is not None
    cache.release(shard, again)
    assert not os.listdir(root / "locks")  # released, and unlinked
    # One that cannot be taken says so (not "held": worth no wait).
    with monkeypatch.context() as m:
        m.setattr(_files, "try_lock", full)
        with pytest.raises(Unclaimable, match="No space left"):
            await cache.claim(shard)
    with pytest.raises(Unclaimable, match="no version"):
        await cache.claim(shard._replace(generation=None))
