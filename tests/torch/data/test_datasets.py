"""ObjectMapDataset / ObjectIterableDataset through DataLoaders, bytes checked.

The tests that do not count composes run on both backends (``where``: our
emulator and the local filesystem, see tests/torch/conftest.py).
"""

from __future__ import annotations

import os
import pickle
import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from aioflux import (
    AsyncClient,
    ClientConfig,
    DownloadOptions,
    InvalidArgument,
    InvalidURL,
    NotFound,
)
from aioflux._engines.clean import clean_bucket
from aioflux._engines.compose import COMPOSED_PREFIX
from aioflux.local import LocalStore
from aioflux.testing import Emulator
from aioflux.torch import (
    DatasetSettings,
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
    ResumableBatchSampler,
)
from tests.torch._forkserver import ENDPOINT_VARIABLES, forkserver, with_environment
from tests.torch.conftest import Where

COMPOSE = DownloadOptions(compose_threshold=64 * 1024)
# Tests that count direct GETs and prefetches: tiny objects would be composed by default.
DIRECT = DownloadOptions(disable_compose=True)


def seed(emulator: Emulator, bucket: str, count: int, size: int) -> dict[str, bytes]:
    data = {f"d/{i:04d}": os.urandom(size) for i in range(count)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    emulator.store.put(bucket, "d/sub/", b"")  # a folder placeholder: skipped
    return data


def to_bytes(data: bytes | bytearray) -> bytes:
    return bytes(data)


def map_dataset(emulator: Emulator, bucket: str, **settings: Any) -> ObjectMapDataset:
    """The ObjectMapDataset over what ``seed`` wrote, samples as bytes."""
    return ObjectMapDataset.from_prefix(
        f"gs://{bucket}/d/", transform=to_bytes,
        settings=DatasetSettings(endpoint=emulator.endpoint, **settings))


def seed_at(where: Where, count: int, size: int) -> dict[str, bytes]:
    """``seed`` on either backend: names relative to ``where``."""
    data = {f"d/{i:04d}": os.urandom(size) for i in range(count)}
    for i, (name, body) in enumerate(data.items()):
        # On files every third one as another tool writes it: no recorded crc32c.
        where.put(name, body, foreign=i % 3 == 2)
    where.put("d/sub/", b"")  # a folder placeholder (a directory on files): skipped
    return data


def dataset_at(where: Where, **settings: Any) -> ObjectMapDataset:
    """The ObjectMapDataset over what ``seed_at`` wrote, samples as bytes."""
    return ObjectMapDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                        settings=where.settings(**settings))


async def composites(client: AsyncClient, bucket: str) -> list[str]:
    return [o.name async for o in client.list_objects(bucket, COMPOSED_PREFIX)]


@pytest.mark.parametrize("workers", [0, 2])
def test_map_dataset_batches_through_dataloader(where: Where, workers: int) -> None:
    data = seed_at(where, 90, 1500)
    ds = dataset_at(where, download_options=COMPOSE)
    assert len(ds) == 90 and where.rel(ds.objects[0].name) == "d/0000"
    assert {o.scheme for o in ds.objects} == {where.scheme}
    assert ds.objects[0].crc32c is not None  # so the planner would compose it on GCS
    assert ds[5] == data["d/0005"]
    loader = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=workers,
                                         collate_fn=list,
                                         multiprocessing_context="fork" if workers else None)
    got = [sample for batch in loader for sample in batch]
    assert got == [data[where.rel(o.name)] for o in ds.objects]
    if workers == 0 and where.scheme == "gs":
        assert ds.download_stats.composed_batches >= 6  # 6 batches of 16 composed
    elif workers == 0:
        # Files have no compose: every object is read directly, none tried first.
        assert isinstance(ds._source.downloader.client, LocalStore)
        assert ds.download_stats.direct == 91 and ds.download_stats.compose_fallbacks == 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_spawned_workers_rebuild_the_store_of_the_scheme(where: Where, kind: str) -> None:
    # A spawn worker unpickles the dataset and builds its own store from the
    # URL scheme: a GCS client for gs://, a LocalStore for files.
    # A forkserver's worker proves the same (the dataset reaches it by
    # pickle, in a process that never saw it) without importing torch anew
    # (~3 s of CPU each); one case keeps a real spawn. The server runs
    # without the stores' environment (it starts without it): a store found
    # through the environment (az) gets it in the worker as a spawned
    # worker would inherit it, before the worker first uses the dataset.
    spawn = (where.scheme, kind) == ("file", "map")
    context: Any = "spawn" if spawn else forkserver()
    init = None if spawn else with_environment(ENDPOINT_VARIABLES)
    data = seed_at(where, 24, 300)
    ds: ObjectMapDataset | ObjectIterableDataset
    if kind == "map":
        ds = dataset_at(where)
    else:
        ds = ObjectIterableDataset.from_prefix(where.url("d"), transform=to_bytes,
                                               settings=where.settings())
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2, collate_fn=list,
                                         multiprocessing_context=context, worker_init_fn=init)
    got = [sample for batch in loader for sample in batch]
    assert sorted(got) == sorted(data.values())


@pytest.mark.timeout(240)
def test_an_error_in_a_spawned_worker_reaches_the_parent_by_its_public_name(
        tmp_path: Path) -> None:
    # DataLoader pickles the worker's exception class and re-raises it in the
    # parent with the worker's traceback as the message: both name the class
    # as users import it (once aioflux._core.errors.NotFound).
    for i in range(3):
        (tmp_path / f"{i}.bin").write_bytes(b"x")
    ds = ObjectMapDataset.from_prefix(str(tmp_path), transform=to_bytes)
    (tmp_path / "1.bin").unlink()  # listed, then gone
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=1, collate_fn=list,
                                         multiprocessing_context="spawn")
    with pytest.raises(NotFound) as caught:
        list(loader)
    assert type(caught.value) is NotFound
    assert f"aioflux.NotFound: read file://{tmp_path}/1.bin failed" in str(caught.value)
    assert "aioflux._core.errors" not in str(caught.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_map_dataset_batch_sampler_prefetches_next_batch(where: Where, workers: int) -> None:
    data = seed_at(where, 50, 700)
    ds = dataset_at(where, download_options=DIRECT)
    sampler = ds.batch_sampler(order=Order(batch_size=8),
                               generator=torch.Generator().manual_seed(3))
    assert len(sampler) == 7
    loader = torch.utils.data.DataLoader(ds, batch_sampler=sampler, num_workers=workers,
                                         collate_fn=list,
                                         multiprocessing_context="fork" if workers else None)
    for _ in range(2):  # two epochs: a fresh shuffle, every object exactly once
        got = [sample for batch in loader for sample in batch]
        assert sorted(got) == sorted(data.values())
    if workers == 0:
        # every object downloaded once: each batch but the first came from a prefetch
        assert ds.download_stats.direct == 100
        assert ds._prefetched == []  # the last batch announces nothing
    # A wrong hint is dropped, not returned.
    ds._announced = [[0, 1]]
    assert ds.__getitems__([2]) == [data["d/0002"]]
    assert ds.__getitems__([3, 4]) == [data["d/0003"], data["d/0004"]]
    ds._announced = [[5]]
    ds.__getitems__([1])
    assert pickle.loads(pickle.dumps(ds))._prefetched == []


@pytest.mark.parametrize("ahead", [1, 3])
def test_batch_sampler_keeps_ahead_batches_downloading(emulator: Emulator, bucket: str,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       ahead: int) -> None:
    import aioflux.torch.data._map_dataset as datasets_mod

    # Counts of the batches announced alone: reading on behind a late batch
    # (test_map_dataset_reads_on_behind_a_late_batch) depends on this
    # machine's speed.
    monkeypatch.setattr(datasets_mod, "REORDER", 1)
    data = seed(emulator, bucket, 40, 100)
    ds = map_dataset(emulator, bucket, download_options=DIRECT)
    sampler = ds.batch_sampler(order=Order(batch_size=4, shuffle=False), ahead=ahead)
    in_flight = []
    got = []
    for batch in sampler:
        got.extend(ds.__getitems__(batch))
        in_flight.append([p.indices for p in ds._prefetched])
    assert got == [data[o.name] for o in ds.objects]
    # after batch k, batches k+1..k+ahead are downloading (fewer at the end)
    assert in_flight[0] == [[4 * b + i for i in range(4)] for b in range(1, 1 + ahead)]
    assert [len(f) for f in in_flight] == [min(ahead, 9 - k) for k in range(10)]
    assert ds.download_stats.direct == 40
    with pytest.raises(ValueError, match="ahead"):
        ds.batch_sampler(order=Order(batch_size=4), ahead=0)
    # The default keeps the client's permits busy: 128 / 64 per batch, plus one.
    assert ds.batch_sampler(order=Order(batch_size=64)).ahead == 3


def test_readahead_follows_a_strided_scan(emulator: Emulator, bucket: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import aioflux.torch.data._map_dataset as datasets_mod

    # Reading on behind a late batch (test_map_dataset_reads_on_behind_a_late_batch)
    # is off here: whether a batch is late depends on this machine's speed,
    # and these counts are the predictions alone.
    monkeypatch.setattr(datasets_mod, "REORDER", 1)
    data = seed(emulator, bucket, 60, 100)
    ds = map_dataset(emulator, bucket, config=ClientConfig(max_concurrency=8),
                     download_options=DIRECT)
    expect = [data[o.name] for o in ds.objects]

    def run(start: int, length: int = 4) -> list[list[int]]:
        assert ds.__getitems__(list(range(start, start + length))) == \
            expect[start:start + length]
        return [p.indices for p in ds._prefetched]

    assert run(0) == []  # one batch is no pattern yet
    # contiguous: 8 permits / 4 per batch + 1 = 3 batches ahead
    assert run(4) == [[8, 9, 10, 11], [12, 13, 14, 15], [16, 17, 18, 19]]
    assert run(8) == [[12, 13, 14, 15], [16, 17, 18, 19], [20, 21, 22, 23]]
    for pending in ds._prefetched:
        pending.future.result()
    assert ds.download_stats.direct == 24  # nothing fetched twice
    # a jump cancels the guesses; a worker's stride (every 2nd run) is followed
    assert run(40) == []
    assert run(48) == [[56, 57, 58, 59]]  # clipped at the end of the dataset
    assert run(56) == []
    # a shuffled order predicts nothing
    ds.__getitems__([3, 1, 2, 0])
    assert run(5, 3) == []
    # no readahead past the memory budget
    monkeypatch.setattr(datasets_mod, "PREFETCH_BYTES", 700)
    run(20)
    assert run(24) == [[28, 29, 30, 31]]  # 700 bytes: one batch of 4 x 100


def test_batches_read_from_two_threads_at_once_each_get_their_own(
        emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A thread-pool loader. Thread A wants a batch read ahead; before it
    # takes it, the main thread reads a batch elsewhere, which cancels the
    # guesses read ahead, A's among them. A then waited on the cancelled
    # download (CancelledError); now it downloads its batch afresh.
    import asyncio
    import threading

    import aioflux.torch.data._map_dataset as datasets_mod

    data = seed(emulator, bucket, 60, 100)
    ds = map_dataset(emulator, bucket, config=ClientConfig(max_concurrency=8),
                     download_options=DIRECT)
    expect = [data[o.name] for o in ds.objects]
    # Object 8's first GET waits until the guesses are cancelled: a download
    # that has ended cannot be cancelled.
    client = ds._source.downloader.client
    real_read, cancelled, held = client.read, threading.Event(), [ds.objects[8].name]

    async def read_object(bucket_: str, name: str, **kwargs: Any) -> bytes:
        if name in held:
            held.clear()
            await asyncio.to_thread(cancelled.wait, 60)
        return await real_read(bucket_, name, **kwargs)

    monkeypatch.setattr(client, "read", read_object)
    ds.__getitems__([0, 1, 2, 3])
    ds.__getitems__([4, 5, 6, 7])
    assert ds._prefetched[0].indices == [8, 9, 10, 11]
    main, paused, resume = threading.current_thread(), threading.Event(), threading.Event()
    real = datasets_mod.get_portal

    def pausing() -> Any:  # thread A, on its way to the batches read ahead
        if threading.current_thread() is not main:
            paused.set()
            assert resume.wait(60)
        return real()

    monkeypatch.setattr(datasets_mod, "get_portal", pausing)
    got: list[Any] = []

    def read() -> None:
        try:
            got.append(ds.__getitems__([8, 9, 10, 11]))
        except BaseException as exc:  # reported below
            got.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert paused.wait(60)
    assert ds.__getitems__([40, 41, 42, 43]) == expect[40:44]  # the guesses cancelled
    cancelled.set()
    resume.set()
    reader.join(60)
    assert got == [expect[8:12]]


def test_batches_read_from_many_threads_are_each_counted(
        emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The histogram's increments are not atomic: two threads recording at
    # once could lose a count. A record that yields halfway through finds
    # another thread inside unless records are serialized.
    import threading

    from aioflux._core.metrics import BatchStats

    data = seed(emulator, bucket, 64, 10)
    ds = map_dataset(emulator, bucket, download_options=DIRECT)
    expect = [data[o.name] for o in ds.objects]
    real, inside, overlaps = BatchStats.record, [0], []

    def record(self: BatchStats, seconds: float, samples: int) -> None:
        inside[0] += 1
        overlaps.append(inside[0])
        time.sleep(0.001)  # a thread switch here
        real(self, seconds, samples)
        inside[0] -= 1

    monkeypatch.setattr(BatchStats, "record", record)
    got: dict[int, list[Any]] = {}

    def read(first: int) -> None:
        got[first] = [ds.__getitems__([i, i + 1]) for i in range(first, first + 16, 2)]

    threads = [threading.Thread(target=read, args=(first,)) for first in range(0, 64, 16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {first: [b for batch in batches for b in batch] for first, batches in got.items()} == \
        {first: expect[first:first + 16] for first in range(0, 64, 16)}
    assert set(overlaps) == {1}
    assert ds.stats.summary()["batches"] == 32
    assert ds.stats.summary()["samples"] == 64


def test_plain_dataloader_without_shuffle_reads_ahead(emulator: Emulator, bucket: str) -> None:
    data = seed(emulator, bucket, 50, 300)
    ds = map_dataset(emulator, bucket, download_options=DIRECT)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=list)
    for _ in range(2):
        assert [s for batch in loader for s in batch] == [data[o.name] for o in ds.objects]
        assert ds._prefetched == []
    assert ds.download_stats.direct == 100


def test_map_dataset_from_objects_and_pickle(where: Where) -> None:
    data = seed_at(where, 5, 10)
    data["d/0001"] = b"longer sample"
    where.put("d/0001", data["d/0001"])
    urls = [where.url("d/0003"), where.url("d/0001")]
    ds = ObjectMapDataset.from_objects(urls, transform=bytes, settings=where.settings())
    assert [o.size for o in ds.objects] == [10, 13]
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.__getitems__([0, 1]) == [data["d/0003"], data["d/0001"]]
    # ObjectInfo from a listing work too; objects on two stores do not.
    again = ObjectMapDataset.from_objects([*ds.objects], transform=bytes, settings=where.settings())
    assert again[1] == data["d/0001"]
    with pytest.raises(InvalidArgument, match=r"one store, got file://, gs://"):
        ObjectMapDataset.from_objects(["gs://some-bucket/x", "file:///tmp/x"])
    with pytest.raises(NotFound, match=re.escape(where.url("d/0099"))):
        ObjectMapDataset.from_objects([where.url("d/0099")], settings=where.settings())


def test_a_map_dataset_index_that_is_no_integer_is_named(where: Where) -> None:
    data = seed_at(where, 3, 10)
    ds = dataset_at(where)
    # Was TypeError: '<' not supported between instances of 'str' and 'int'.
    for wrong in ("a", 1.0, None, slice(0, 2), True):
        with pytest.raises(InvalidArgument, match=r"ObjectMapDataset\[\]: index must be an int"):
            ds[wrong]  # type: ignore[index]
        with pytest.raises(InvalidArgument, match=r"ObjectMapDataset\[\]: index must be an int"):
            ds.__getitems__([0, wrong])  # type: ignore[list-item]
    # What stands for an integer is one; a list's bounds still hold.
    np = pytest.importorskip("numpy")
    assert ds[np.int64(1)] == ds[torch.tensor(1)] == ds[-2] == data["d/0001"]
    assert ds.__getitems__([torch.tensor(2), np.int32(0)]) == [data["d/0002"], data["d/0000"]]
    with pytest.raises(IndexError):
        ds[3]
    with pytest.raises(IndexError):
        ds.__getitems__([0, -4])


def test_iterable_dataset_shuffles_per_epoch_and_shards(where: Where) -> None:
    seed_at(where, 40, 10)
    parts = [ObjectIterableDataset.from_prefix(where.url("d/"),
                                               order=Order(rank=r, world_size=2, seed=1),
                                               settings=where.settings()) for r in range(2)]
    e0 = [o.name for p in parts for w in range(3) for o in p.shard(0, w, 3)]
    e1 = [o.name for p in parts for w in range(3) for o in p.shard(1, w, 3)]
    assert sorted(e0) == sorted(e1) == sorted(o.name for o in parts[0].objects)
    assert len(set(e0)) == 40 and e0 != e1
    assert e0 == [o.name for p in parts for w in range(3) for o in p.shard(0, w, 3)]


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_through_dataloader(where: Where, workers: int) -> None:
    data = seed_at(where, 60, 900)
    ds = ObjectIterableDataset.from_prefix(where.url("d"), transform=to_bytes, order=Order(seed=5),
                                           settings=where.settings(download_options=COMPOSE))
    loader = torch.utils.data.DataLoader(ds, batch_size=7, num_workers=workers,
                                         collate_fn=list,
                                         multiprocessing_context="fork" if workers else None)
    for epoch in range(2):  # every object exactly once per epoch
        ds.set_epoch(epoch)
        got = [sample for batch in loader for sample in batch]
        assert sorted(got) == sorted(data.values())
    ds.close()


async def test_iterable_early_break_and_transform_error_leave_nothing(
        emulator: Emulator, bucket: str, client: AsyncClient) -> None:
    seed(emulator, bucket, 200, 500)
    ds = ObjectIterableDataset.from_prefix(
        f"gs://{bucket}/d/", prefetch=96,
        settings=DatasetSettings(endpoint=emulator.endpoint, download_options=COMPOSE))
    for _ in ds:
        break  # the generator is closed here: in-flight composites are deleted
    calls = 0

    def broken(data: bytes | bytearray) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise ValueError("bad sample")
        return bytes(data)

    ds._transform = broken
    with pytest.raises(ValueError, match="bad sample"):
        list(ds)
    assert await composites(client, bucket) == []


async def test_worker_shutdown_mid_epoch_leaves_nothing_after_clean(
        emulator: Emulator, bucket: str, client: AsyncClient) -> None:
    seed(emulator, bucket, 300, 500)
    ds = ObjectIterableDataset.from_prefix(
        f"gs://{bucket}/d/", prefetch=96,
        settings=DatasetSettings(endpoint=emulator.endpoint, download_options=COMPOSE))
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2,
                                         multiprocessing_context="fork")
    it = iter(loader)
    next(it)
    del it  # workers stop with downloads in flight and exit (their finalizers clean up)
    report = await clean_bucket(client, bucket, older_than=0)
    assert await composites(client, bucket) == []
    assert len(report.composites) <= 2  # at most a compose racing the exit per worker


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
@pytest.mark.parametrize("suffix", ["", "/"])
def test_from_prefix_means_the_folder_not_a_name_prefix(where: Where, cls: Any,
                                                        suffix: str) -> None:
    # ``gs://b/data`` is the folder ``data/`` (and an object named exactly
    # ``data``), as for the CLI; ``data2/`` and ``data.txt`` are not in it.
    blobs = {"data/a": b"A", "data/b/c": b"BC", "data2/x": b"X", "data.txt": b"T"}
    for name, body in blobs.items():
        where.put(name, body)
    ds = cls.from_prefix(where.url(f"data{suffix}"), transform=to_bytes,
                         settings=where.settings(download_options=DIRECT))
    assert [where.rel(o.name) for o in ds.objects] == ["data/a", "data/b/c"]
    if where.scheme == "gs":
        top = ""
        where.put("data", b"exact")
        expected = ["data/a", "data/b/c"] if suffix else ["data", "data/a", "data/b/c"]
    else:
        # A path is a file or a directory, not both: ``top/data`` is a file.
        top = "top/"
        for name in ("data", "data2/x", "data.txt", "data0"):
            where.put(top + name, blobs.get(name, b"exact"))
        expected = [] if suffix else ["top/data"]
        if suffix:
            with pytest.raises(NotFound, match="top/data/: no objects"):
                cls.from_prefix(where.url(f"{top}data{suffix}"), settings=where.settings())
    if expected:
        ds = cls.from_prefix(where.url(f"{top}data{suffix}"),
                             settings=where.settings(download_options=DIRECT))
        assert [where.rel(o.name) for o in ds.objects] == expected
    whole = cls.from_prefix(where.url(top), settings=where.settings())
    assert len(whole.objects) == (5 if where.scheme == "gs" else 4)
    if cls is ObjectMapDataset:
        assert [bytes(ds[i]) for i in range(len(ds))] == [
            blobs.get(where.rel(o.name).removeprefix(top), b"exact") for o in ds.objects]
    ds.close()
    whole.close()


def test_samples_are_typed_by_the_transform(emulator: Emulator, bucket: str) -> None:
    emulator.store.put(bucket, "t/1", b"12345")

    def length(data: bytes) -> int:
        return len(data)

    settings = DatasetSettings(endpoint=emulator.endpoint)
    sized: ObjectMapDataset[int] = ObjectMapDataset.from_prefix(f"gs://{bucket}/t",
                                                                transform=length,
                                                                settings=settings)
    raw: ObjectMapDataset[bytes] = ObjectMapDataset.from_prefix(f"gs://{bucket}/t",
                                                                settings=settings)
    assert sized[0] == 5 and raw[0] == b"12345"
    sized.close()
    raw.close()


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_from_prefix_of_an_empty_folder_says_so(where: Where, kind: str) -> None:
    # A dataflux-style raw name prefix (train/shard-) names the folder
    # train/shard-/: an empty dataset would train on nothing without a word.
    where.put("train/shard-000", b"x")
    where.put("empty/", b"")
    cls = ObjectMapDataset if kind == "map" else ObjectIterableDataset
    for folder in ("train/shard-", "empty", "missing/"):
        want = folder.rstrip("/") + "/"
        with pytest.raises(NotFound, match=re.escape(where.url(want)) +
                           ": no objects in that folder") as caught:
            cls.from_prefix(where.url(folder), settings=where.settings())
        assert caught.value.bucket == where.bucket
        assert caught.value.name == where.base + want
    assert list(cls.from_prefix(where.url("train"), settings=where.settings())) == [b"x"]


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
def test_a_file_name_that_is_not_utf8_is_named_at_the_listing(tmp_path: Path,
                                                               cls: type[Any]) -> None:
    # No read can name it (object names are UTF-8): an epoch would fail at
    # that sample (ObjectIterableDataset failed at once with a raw UnicodeEncodeError).
    (tmp_path / "ok.bin").write_bytes(b"x")
    with open(os.fsencode(tmp_path) + b"/bad-\xff.bin", "wb") as f:
        f.write(b"y")
    with pytest.raises(InvalidURL, match="not valid UTF-8") as caught:
        cls.from_prefix(str(tmp_path))
    assert "bad-" in str(caught.value)



@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
def test_objects_set_on_a_dataset_are_read_from_their_store(emulator: Emulator, bucket: str,
                                                             tmp_path: Path,
                                                             cls: type[Any]) -> None:
    # The setter ignored the objects' scheme: files set on a dataset of
    # gs:// objects were read as gs://<dir>/<file> from the emulator.
    data = seed(emulator, bucket, 3, 40)
    ds = cls.from_prefix(f"gs://{bucket}/d/", transform=to_bytes,
                         settings=DatasetSettings(endpoint=emulator.endpoint))
    remote = list(ds.objects)

    def samples() -> list[bytes]:
        return sorted([ds[i] for i in range(3)] if cls is ObjectMapDataset else ds)

    assert samples() == sorted(data.values())  # this process's gs store is built
    (tmp_path / "f").mkdir()
    files = [os.urandom(20) for _ in range(3)]
    for i, body in enumerate(files):
        (tmp_path / "f" / f"{i}.bin").write_bytes(body)
    local = ObjectMapDataset.from_prefix(str(tmp_path / "f")).objects
    ds.objects = local
    assert samples() == sorted(files)
    assert isinstance(ds._source.downloader.client, LocalStore)
    # Checked as the constructor checks them.
    with pytest.raises(InvalidArgument, match=r"one store, got file://, gs://"):
        ds.objects = [local[0], *remote]
    with pytest.raises(InvalidArgument, match="must hold ObjectInfo"):
        ds.objects = ["gs://b/x"]
    ds.close()


@pytest.mark.parametrize("kind", ["resumable", "batch_sampler", "readahead"])
def test_map_dataset_reads_ahead_within_its_bytes(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  kind: str) -> None:
    import aioflux.torch.data._map_dataset as datasets_mod

    # The default ahead was sized on one batch (the samplers' first, the
    # readahead's second): a 1-byte file there made it 128 permits + 1
    # batches of 1, and every 16 KiB file after it was read at once: 39 x
    # 16 KiB against a budget of 64 KiB (as 1 byte, then 4 MiB files did
    # against PREFETCH_BYTES).
    budget, size = 64 * 1024, 16 * 1024
    monkeypatch.setattr(datasets_mod, "PREFETCH_BYTES", budget)
    (tmp_path / "d").mkdir()
    bodies = [b"x", b"y"] + [os.urandom(size) for _ in range(39)]
    for i, body in enumerate(bodies):
        (tmp_path / "d" / f"{i:03d}").write_bytes(body)
    started = 0  # bytes the store was asked for
    real = LocalStore.read

    async def read(store: LocalStore, bucket: str, name: str, **kw: Any) -> Any:
        nonlocal started
        started += len(bodies[int(name.rsplit("/", 1)[1])])
        return await real(store, bucket, name, **kw)

    monkeypatch.setattr(LocalStore, "read", read)
    # As on NFS, where batches are read ahead (see local/_inline.py).
    monkeypatch.setattr(LocalStore, "_reads_here", lambda *args: False)
    ds = ObjectMapDataset.from_prefix(str(tmp_path / "d"), transform=to_bytes)
    loader: torch.utils.data.DataLoader[list[bytes]]
    if kind == "resumable":
        sampler = ResumableBatchSampler(ds, order=Order(batch_size=1, shuffle=False))
        loader = torch.utils.data.DataLoader(ds, batch_sampler=sampler, collate_fn=list)
    elif kind == "batch_sampler":
        loader = torch.utils.data.DataLoader(
            ds, batch_sampler=ds.batch_sampler(order=Order(shuffle=False)), collate_fn=list)
    else:  # a plain DataLoader without shuffle: the strided-scan readahead
        loader = torch.utils.data.DataLoader(ds, batch_size=1, collate_fn=list)
    got: list[bytes] = []
    most = ahead = 0
    for batch in loader:
        got += batch
        for pending in ds._prefetched:
            pending.future.result()  # everything announced has been read
        most = max(most, started - sum(map(len, got)))
        ahead = max(ahead, len(ds._prefetched))
    assert got == bodies
    assert most <= budget  # it was 39 x 16 KiB
    assert ahead == budget // size  # as many as fit: the permits do not bind here


@pytest.mark.parametrize("cached", [False, True])
def test_an_iterable_pass_holds_bytes_per_sample_not_records(tmp_path: Path,
                                                            cached: bool) -> None:
    # The worker's share was a list of lists and a dict entry a batch, and the
    # downloader planned (and with a cache, made records of) the whole share
    # up front: ~225 bytes a sample, ~430 with a cache.
    import gc
    import tracemalloc

    from aioflux._core.memory.object_index import ObjectIndex

    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "x").write_bytes(b"x" * 100)
    one = ObjectMapDataset.from_prefix(f"file://{tmp_path}/one/").objects[0]
    count = 200_000
    settings = DatasetSettings(cache_dir=tmp_path / "cache" if cached else None)
    ds = ObjectIterableDataset(ObjectIndex([one] * count), order=Order(batch_size=1), prefetch=8,
                               settings=settings)
    gc.collect()
    tracemalloc.start()
    try:
        it = iter(ds)
        assert next(it) == b"x" * 100
        peak = tracemalloc.get_traced_memory()[1]
        it.close()  # type: ignore[attr-defined]
    finally:
        tracemalloc.stop()
    # The order and this worker's share of it (8 bytes a sample each), with
    # their arrays' growth: ~27 bytes a sample.
    assert peak < 40 * count + (4 << 20), peak / count


def test_an_iterable_pass_holds_its_prefetch_bytes_whatever_the_sizes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A hand-off was sized on the pass's mean listed size: after 3,000 files
    # of 100 bytes, 40 of 1 MiB went 34 a hop (an eighth of the budget by
    # the mean), and 34 MiB were read ahead of the consumer against a
    # prefetch_bytes of 2 MiB.
    from aioflux import DownloadOptions

    mib = 1 << 20
    (tmp_path / "d").mkdir()
    sizes = [100] * 3000 + [mib] * 40
    for i, size in enumerate(sizes):
        (tmp_path / "d" / f"{i:05d}").write_bytes(b"x" * size)
    started = 0  # bytes the store was asked for
    real = LocalStore.read

    async def read(store: LocalStore, bucket: str, name: str, **kw: Any) -> Any:
        nonlocal started
        started += sizes[int(name.rsplit("/", 1)[1])]
        return await real(store, bucket, name, **kw)

    monkeypatch.setattr(LocalStore, "read", read)
    options = DownloadOptions(prefetch_bytes=2 * mib)
    ds = ObjectIterableDataset.from_prefix(str(tmp_path / "d"), order=Order(shuffle=False),
                                           settings=DatasetSettings(download_options=options))
    taken = most = 0
    for sample in ds:
        most = max(most, started - taken)
        taken += len(sample)
        if len(sample) == mib:
            time.sleep(0.005)  # a training step on a large sample
    assert taken == sum(sizes)
    # The downloader's budget, plus a quarter of it in hand-offs, plus the
    # one object that always passes (here 1 MiB).
    assert most <= 2 * mib + 2 * mib // 4 + mib, most / mib


@pytest.mark.parametrize("order", ["strided", "sampler"])
def test_map_dataset_reads_on_behind_a_late_batch(emulator: Emulator, bucket: str,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  order: str) -> None:
    # One object's GET is held until every other object has been read: the
    # batches past the ones read ahead start as those end (3 downloading at
    # a time behind the late one). Before, nothing started past the 3 read
    # ahead until the late batch came back (a hang here).
    import asyncio
    import threading

    data = seed(emulator, bucket, 60, 100)
    ds = map_dataset(emulator, bucket, config=ClientConfig(max_concurrency=8),
                     download_options=DIRECT)
    if order == "sampler":
        shuffled = Order(batch_size=4, shuffle=True, seed=5)
        batches = list(ds.batch_sampler(order=shuffled, ahead=3))
        loader = torch.utils.data.DataLoader(
            ds, batch_sampler=ds.batch_sampler(order=shuffled, ahead=3), collate_fn=list)
    else:
        batches = [list(range(i, i + 4)) for i in range(0, 60, 4)]
        loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=list)
    late = ds.objects[batches[2][0]].name  # read ahead of its turn, then held
    others, read, waited = threading.Event(), [0], []
    client = ds._source.downloader.client
    real = client.read

    async def held(bucket_: str, name: str, **kwargs: Any) -> bytes:
        if name == late:
            waited.append(await asyncio.to_thread(others.wait, 30))
        got = await real(bucket_, name, **kwargs)
        if name != late:
            read[0] += 1
            if read[0] == 59:
                others.set()
        return got

    monkeypatch.setattr(client, "read", held)
    got = [sample for batch in loader for sample in batch]
    assert waited == [True]  # the other 59 were read while it was held
    assert got == [data[ds.objects[i].name] for batch in batches for i in batch]
    assert ds.download_stats.direct == 60  # each read once


def test_map_dataset_counts_a_batch_overtaken_by_a_later_one_as_done(
        emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # One object of batches 3, 4, 6 and 7 each is held until every other
    # object has been read. Batch 3 is being read; 4, 6 and 7 are among
    # those read ahead (3 at a time). Counted as downloading, the held 4, 6
    # and 7 left no room and nothing more started (a hang here); each was
    # overtaken by a later batch that ended, so it holds one permit, not a
    # place of the 3.
    import asyncio
    import threading

    data = seed(emulator, bucket, 60, 100)
    ds = map_dataset(emulator, bucket, config=ClientConfig(max_concurrency=8),
                     download_options=DIRECT)
    late = {ds.objects[4 * b].name for b in (3, 4, 6, 7)}
    others, read, waited = threading.Event(), [0], []
    client = ds._source.downloader.client
    real = client.read

    async def held(bucket_: str, name: str, **kwargs: Any) -> bytes:
        if name in late:
            waited.append(await asyncio.to_thread(others.wait, 30))
        got = await real(bucket_, name, **kwargs)
        if name not in late:
            read[0] += 1
            if read[0] == 60 - len(late):
                others.set()
        return got

    monkeypatch.setattr(client, "read", held)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=list)
    got = [sample for batch in loader for sample in batch]
    assert waited == [True] * len(late)  # the others were read while they were held
    assert got == [data[o.name] for o in ds.objects]
    assert ds.download_stats.direct == 60
