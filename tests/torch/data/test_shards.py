"""ShardDataset: WebDataset tar and JSONL shards read as they are, on every
store: every sample once, grouped and byte-exact; equal batches on every rank
and worker; resume at another world size; typed errors for damaged shards."""

from __future__ import annotations

import collections
import dataclasses
import os
import pickle
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from aioflux import (
    ChecksumMismatch,
    Client,
    ClientConfig,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    ShardFormatError,
)
from aioflux._engines.shards import _build
from aioflux.testing import FaultProxy
from aioflux.torch import DatasetSettings, Order, ShardDataset, ShardReads
from aioflux.torch.data._order import pass_samples
from tests.conftest import FAST_RETRY, unique_bucket
from tests.torch._forkserver import forkserver
from tests.torch._shards_util import expected_of, gz, jsonl, make_samples, tar_shard, zst
from tests.torch.conftest import Where

# Uneven shards: an empty one and one of a single sample among them.
SIZES = {"train-000.tar": 9, "train-001.tar": 0, "train-002.tar": 1, "train-003.tar": 14}


def seed_tars(where: Where) -> dict[str, dict[str, bytes]]:
    shards = {name: make_samples(f"s{n}/", count) for n, (name, count) in enumerate(SIZES.items())}
    for n, (name, samples) in enumerate(shards.items()):
        # PAX long names in one shard, GNU ones in another, junk members everywhere.
        fmt = tarfile.GNU_FORMAT if n == 2 else tarfile.PAX_FORMAT
        if n == 3:
            samples[:] = [("deep/" * 30 + key, fields) for key, fields in samples]
        where.put(name, tar_shard(samples, fmt=fmt, extras=True))
    return expected_of(shards)


def keys_of(samples: list[dict[str, Any]]) -> list[str]:
    return [s["__key__"] for s in samples]


def dataset(where: Where, tmp_path: Path, *, settings: DatasetSettings | None = None,
            reads: ShardReads | None = None, **kw: Any) -> ShardDataset:
    reads = dataclasses.replace(reads or ShardReads(), index_dir=tmp_path / "idx")
    return ShardDataset.from_prefix(where.root, reads=reads,
                                    settings=settings or where.settings(), **kw)


def test_tar_shards_every_sample_once_grouped_and_byte_exact(where: Where,
                                                             tmp_path: Path) -> None:
    expected = seed_tars(where)
    ds = dataset(where, tmp_path, order=Order(batch_size=4))
    assert ds.counts == list(SIZES.values())
    assert len(ds) == ds.total_samples == len(expected) == 24
    for epoch in range(2):
        got = list(ds)
        assert sorted(keys_of(got)) == sorted(expected), epoch
        for sample in got:
            fields = {k: v for k, v in sample.items() if not k.startswith("__")}
            assert fields == expected[sample["__key__"]]
            assert sample["__url__"].startswith(where.root + "/train-")
    # Shuffled per epoch, and a pure function of (seed, epoch).
    assert ds.epoch_order(0) != ds.epoch_order(1)
    again = dataset(where, tmp_path, order=Order(batch_size=4))
    assert again.epoch_order(1) == ds.epoch_order(1)
    assert keys_of(list(dataset(where, tmp_path, order=Order(shuffle=False)))) == list(expected)


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_jsonl_shards_plain_gzip_and_zstd(where: Where, tmp_path: Path) -> None:
    records = {f"r{i}": {"id": i, "text": "x" * (i % 50)} for i in range(300)}
    rows = list(records.values())
    where.put("a.jsonl", jsonl(rows[:100], crlf=True))
    where.put("b.jsonl.gz", gz(jsonl(rows[100:220], blank=True)))
    where.put("c.jsonl.zst", zst(jsonl(rows[220:])))
    ds = ShardDataset.from_prefix(where.root, format="lines", decode="json",
                                  reads=ShardReads(index_dir=tmp_path / "idx",
                                                   samples_per_read=16),
                                  order=Order(shuffle_window=64),
                                  settings=where.settings())
    assert ds.counts == [100, 120, 80]
    got = list(ds)
    assert sorted(r["id"] for r in got) == list(range(300))
    assert all(r == rows[r["id"]] for r in got)
    raw = ShardDataset.from_prefix(where.root, format="lines", order=Order(shuffle=False),
                                   reads=ShardReads(index_dir=tmp_path / "idx"),
                                   settings=where.settings())
    lines = list(raw)
    assert lines[0] == b'{"id": 0, "text": ""}'


def _upper(sample: bytes) -> bytes:
    return sample.upper()


def test_decoders_pickle_for_spawned_workers(tmp_path: Path) -> None:
    # spawn and forkserver (macOS's default, Linux's from Python 3.14) hand
    # the dataset to each worker by pickle: a closure decoder failed with
    # "Can't pickle local object '_decoder.<locals>.text'".
    where = Where("file", f"file://{tmp_path}/root", None)
    rows = [{"id": i} for i in range(40)]
    where.put("a.jsonl.gz", gz(jsonl(rows[:25])))
    where.put("b.jsonl", jsonl(rows[25:]))
    ds = ShardDataset.from_prefix(where.root, format="lines", decode="json",
                                  order=Order(batch_size=4),
                                  reads=ShardReads(index_dir=tmp_path / "idx"),
                                  settings=DatasetSettings(cache_dir=tmp_path / "cache"))
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                         multiprocessing_context="spawn", collate_fn=list)
    assert sorted(r["id"] for batch in loader for r in batch) == list(range(40))
    for decode, first in (("utf-8", '{"id": 0}'), (_upper, b'{"ID": 0}')):
        other = ShardDataset.from_prefix(where.root, format="lines", decode=decode,
                                         order=Order(shuffle=False),
                                         reads=ShardReads(index_dir=tmp_path / "idx"))
        assert next(iter(pickle.loads(pickle.dumps(other)))) == first
    tars = Where("file", f"file://{tmp_path}/tars", None)
    tars.put("t.tar", tar_shard(make_samples("k", 3)))
    fields = ShardDataset.from_prefix(tars.root, decode={"cls": int}, order=Order(shuffle=False),
                                      reads=ShardReads(index_dir=tmp_path / "idx"))
    assert [s["cls"] for s in pickle.loads(pickle.dumps(fields))] == [0, 1, 2]


def test_lines_decode_errors_name_the_shard_and_byte(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.jsonl").write_bytes(b'{"a": 1}\nnot json\n')
    ds = ShardDataset.from_prefix(str(tmp_path / "d"), format="lines", decode="json",
                                  order=Order(shuffle=False),
                                  reads=ShardReads(index_dir=tmp_path / "idx"))
    with pytest.raises(ShardFormatError, match=r"x\.jsonl: the line at byte 9 is not JSON"):
        list(ds)


@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_dataloader_workers_yield_every_sample_once(tmp_path: Path, context: str) -> None:
    # forkserver: the dataset reaches each worker by pickle, as under spawn
    # (test_decoders_pickle_for_spawned_workers runs a real one).
    where = Where("file", f"file://{tmp_path}/root", None)
    expected = seed_tars(where)
    ds = dataset(where, tmp_path, order=Order(batch_size=3), transform=lambda s: s["__key__"]
                 ) if context == "fork" else dataset(where, tmp_path, order=Order(batch_size=3))
    for workers in (0, 2):
        loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=workers,
                                             multiprocessing_context=(
                                                 None if not workers else forkserver()
                                                 if context == "forkserver" else context),
                                             collate_fn=list)
        batches = list(loader)
        keys = [k if isinstance(k, str) else k["__key__"] for b in batches for k in b]
        assert sorted(keys) == sorted(expected), workers
        assert len(batches) == len(loader) == 8


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_and_workers_get_equal_batches_over_uneven_shards(tmp_path: Path,
                                                                drop_last: bool) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    expected = seed_tars(where)
    for world in (2, 3):
        for workers in (0, 2):
            steps, seen = [], collections.Counter[str]()
            for rank in range(world):
                ds = dataset(where, tmp_path,
                             order=Order(batch_size=2, rank=rank, world_size=world,
                                         drop_last=drop_last), reads=ShardReads(samples_per_read=3))
                loader = torch.utils.data.DataLoader(
                    ds, batch_size=2, num_workers=workers, collate_fn=list,
                    multiprocessing_context="fork" if workers else None)
                batches = list(loader)
                assert all(len(b) == 2 for b in batches)
                steps.append((len(loader), len(batches)))
                seen.update(keys_of([s for b in batches for s in b]))
            case = (world, workers, drop_last)
            assert len(set(steps)) == 1 and steps[0][0] == steps[0][1], case
            total = pass_samples(24, 0, 2 * world, world, drop_last)
            assert sum(seen.values()) == total, case
            if drop_last:
                assert max(seen.values()) == 1, case
            else:
                assert set(seen) == set(expected), case


def _consume(ds: ShardDataset, steps: int | None,
             workers: int = 0) -> tuple[list[str], dict[str, Any]]:
    """Train ``steps`` steps (all with None); the keys seen and the state then."""
    loader = torch.utils.data.DataLoader(ds, batch_size=ds.batch_size, num_workers=workers,
                                         collate_fn=list,
                                         multiprocessing_context="fork" if workers else None)
    out: list[str] = []
    for step, batch in enumerate(ds.track(loader), 1):
        out += keys_of(batch)
        if step == steps:
            return out, ds.state_dict()  # taken inside the loop, as a training loop would
    return out, ds.state_dict()


@pytest.mark.parametrize("stop", [1, 2, 3])
def test_resume_mid_shard_at_another_world_size_and_worker_count(tmp_path: Path,
                                                                 stop: int) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    seed_tars(where)
    before: list[str] = []
    states = []
    for rank in range(2):
        ds = dataset(where, tmp_path, order=Order(batch_size=2, seed=5, rank=rank, world_size=2),
                     reads=ShardReads(samples_per_read=4))
        ds.set_epoch(3)
        keys, state = _consume(ds, stop)
        before += keys
        states.append(state)
    assert states[0] == states[1]
    assert states[0]["samples"] == stop * 4 and states[0]["epoch"] == 3
    after: list[str] = []
    for rank in range(3):
        ds = dataset(where, tmp_path, order=Order(batch_size=2, seed=5, rank=rank, world_size=3),
                     reads=ShardReads(samples_per_read=4))
        ds.load_state_dict(states[0])
        ds.set_epoch(3)
        after += _consume(ds, None, workers=2)[0]
    seen = collections.Counter(before + after)
    assert len(seen) == 24  # every sample at least once
    assert max(collections.Counter(before).values()) == 1
    # Exactly once, plus the padding of the resumed pass (from the order's start).
    assert sum(seen.values()) - 24 == pass_samples(24, stop * 4, 6, 3) - (24 - stop * 4)


def test_a_state_over_other_shards_or_seed_is_refused(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    seed_tars(where)
    ds = dataset(where, tmp_path)
    state = ds.state_dict()
    fewer = ShardDataset(f"{where.root}/train-{{000..002}}.tar",
                         reads=ShardReads(index_dir=tmp_path / "idx"))
    with pytest.raises(InvalidArgument, match="another object list"):
        fewer.load_state_dict(state)
    with pytest.raises(InvalidArgument, match="seed"):
        dataset(where, tmp_path, order=Order(seed=9)).load_state_dict(state)


def test_a_sampler_state_over_other_shards_of_the_same_total_is_refused(
        tmp_path: Path) -> None:
    # The map-style sibling has no objects list: its sampler's position was
    # over its length alone, and other shards of the same total took it.
    from aioflux.torch import ResumableBatchSampler, ShardMapDataset

    for folder, sizes in (("a", (3, 5)), ("b", (5, 3))):
        (tmp_path / folder).mkdir()
        for k, size in enumerate(sizes):
            (tmp_path / folder / f"s{k}.jsonl").write_bytes(jsonl({"i": i} for i in range(size)))

    def sampler(folder: str) -> ResumableBatchSampler:
        ds = ShardMapDataset.from_prefix(f"file://{tmp_path}/{folder}/", format="lines",
                                         reads=ShardReads(index_dir=tmp_path / "idx"))
        return ResumableBatchSampler(ds, order=Order(batch_size=2, seed=1))

    first = sampler("a")
    next(iter(first))
    state = first.state_dict()
    sampler("a").load_state_dict(state)  # the same shards: taken
    with pytest.raises(InvalidArgument, match="another object list"):
        sampler("b").load_state_dict(state)


def test_a_transform_s_error_names_its_shard_and_sample(tmp_path: Path) -> None:
    # Its type kept, a note naming where: among a million samples the one
    # to look at was unknown. aioflux's own errors name it already.
    from aioflux import ShardFormatError
    from aioflux.torch import ShardMapDataset

    (tmp_path / "s.jsonl").write_bytes(jsonl({"i": i} for i in range(3)))
    (tmp_path / "t.jsonl").write_bytes(b"not json\n")

    def picky(record: dict[str, int]) -> dict[str, int]:
        if record["i"] == 1:
            raise KeyError("one")
        return record

    url = f"file://{tmp_path}/s.jsonl"
    reads = ShardReads(index_dir=tmp_path / "idx")
    ds = ShardMapDataset([url, f"file://{tmp_path}/t.jsonl"], format="lines", decode="json",
                         transform=picky, reads=reads)
    with pytest.raises(KeyError) as failed:
        ds[1]
    assert failed.value.__notes__ == [
        f"ShardMapDataset: the decode or transform raised this on the sample at byte 9 of {url}"]
    with pytest.raises(ShardFormatError) as own:
        ds[3]
    assert not getattr(own.value, "__notes__", None)
    with pytest.raises(KeyError) as iterated:
        list(ShardDataset([url], format="lines", decode="json", transform=picky, reads=reads))
    assert iterated.value.__notes__[0].startswith("ShardDataset: the decode or transform ")


def test_a_state_under_other_order_settings_is_refused(tmp_path: Path) -> None:
    # The read size, window and shuffle reshape the epoch order a position
    # counts samples of: a resume under another repeated and dropped samples
    # in silence.
    where = Where("file", f"file://{tmp_path}/root", None)
    seed_tars(where)
    order = Order(batch_size=2, seed=3)
    before, state = _consume(dataset(where, tmp_path, order=order,
                                     reads=ShardReads(samples_per_read=4)), 3)
    for name, value in (("samples_per_read", 8), ("shuffle_window", 16), ("shuffle", False)):
        other = dataset(where, tmp_path, reads=ShardReads(samples_per_read=value), order=order) \
            if name == "samples_per_read" else \
            dataset(where, tmp_path, reads=ShardReads(samples_per_read=4),
                    order=dataclasses.replace(order, **{name: value}))
        with pytest.raises(InvalidArgument, match=f"saved with {name}="):
            other.load_state_dict(state)
    same = dataset(where, tmp_path, order=order, reads=ShardReads(samples_per_read=4))
    same.load_state_dict(state)
    after = _consume(same, None)[0]
    assert sorted(before + after) == sorted(keys_of(list(dataset(where, tmp_path))))
    # Unshuffled, the order is the list order whatever the read size.
    unshuffled = dataclasses.replace(order, shuffle=False)
    plain, state = _consume(dataset(where, tmp_path,
                                    reads=ShardReads(samples_per_read=4), order=unshuffled), 3)
    other = dataset(where, tmp_path, reads=ShardReads(samples_per_read=8), order=unshuffled)
    other.load_state_dict(state)
    assert plain + _consume(other, None)[0] == keys_of(list(dataset(where, tmp_path,
                                                                    order=Order(shuffle=False))))
    # A state saved before the order's kind was recorded still loads (every
    # state of this order version records the settings themselves).
    old = {**state, "order": {k: v for k, v in state["order"].items() if k != "kind"}}
    dataset(where, tmp_path, order=unshuffled,
            reads=ShardReads(samples_per_read=8)).load_state_dict(old)


def test_brace_patterns_and_url_lists(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    seed_tars(where)
    by_pattern = ShardDataset(f"{where.root}/train-{{000..003}}.tar",
                              reads=ShardReads(index_dir=tmp_path / "i"))
    by_list = ShardDataset([where.url(n) for n in SIZES],
                           reads=ShardReads(index_dir=tmp_path / "i"))
    assert by_pattern.counts == by_list.counts == list(SIZES.values())
    with pytest.raises(NotFound):
        ShardDataset(f"{where.root}/train-{{000..004}}.tar",
                     reads=ShardReads(index_dir=tmp_path / "i"))


def test_an_index_is_built_once_then_cached_by_version(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    seed_tars(where)
    streamed: list[str] = []
    real = _build.stream_index

    def counting(store: Any, info: Any, fmt: Any, options: Any = None) -> Any:
        streamed.append(info.name)
        return real(store, info, fmt, options)

    monkeypatch.setattr(_build, "stream_index", counting)
    first = dataset(where, tmp_path)
    assert len(streamed) == 4
    second = dataset(where, tmp_path)
    assert len(streamed) == 4  # all four from the cache
    assert second.counts == first.counts
    where.put("train-002.tar", tar_shard(make_samples("n/", 3)))  # a new version
    third = dataset(where, tmp_path)
    assert [n.rsplit("/", 2)[-2:] for n in streamed[4:]] == [["root", "train-002.tar"]]
    assert third.counts[2] == 3
    dataset(where, tmp_path, reads=ShardReads(cache_indexes=False))
    assert len(streamed) == 9


def test_a_shard_opened_with_the_wrong_format_does_not_poison_the_cache(tmp_path: Path) -> None:
    # A tar read as lines indexes without error; its cached entry made every
    # later tar read of that version fail ("indexed as 'lines', read as 'tar'").
    where = Where("file", f"file://{tmp_path}/root", None)
    where.put("a.tar", tar_shard(make_samples("a", 5)))
    wrong = dataset(where, tmp_path, format="lines")
    assert wrong.counts != [5]
    right = dataset(where, tmp_path, format="tar", order=Order(shuffle=False))
    assert right.counts == [5]
    assert keys_of(list(right)) == [f"a{i:05d}" for i in range(5)]
    assert dataset(where, tmp_path, format="tar").counts == [5]  # now from the cache


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_a_damaged_shard_is_a_typed_error_naming_it(where: Where, tmp_path: Path) -> None:
    samples = make_samples("k", 6)
    good = tar_shard(samples)
    second = good.index(b"k00003.jpg") - 0  # the fourth sample's first header
    bad_header = bytearray(good)
    bad_header[second + 100] ^= 0xFF  # its mode field: the header checksum fails
    where.put("a.tar", bytes(bad_header))
    with pytest.raises(ShardFormatError, match=rf"a\.tar: corrupt tar header at byte {second}"):
        dataset(where, tmp_path)
    where.put("a.tar", good[:second + 700])  # cut inside a member's data
    with pytest.raises(ShardFormatError, match=r"a\.tar: (truncated|corrupt tar at byte)"):
        dataset(where, tmp_path)
    where.put("a.tar", b"this is not a tar archive" * 40)
    with pytest.raises(ShardFormatError, match=r"a\.tar"):
        dataset(where, tmp_path)


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_a_shard_changed_since_it_was_indexed_fails_on_read(where: Where,
                                                            tmp_path: Path) -> None:
    where.put("a.tar", tar_shard(make_samples("k", 5)))
    ds = dataset(where, tmp_path, order=Order(shuffle=False))
    where.put("a.tar", tar_shard(make_samples("j", 5)))
    with pytest.raises((PreconditionFailed, NotFound), match=r"a\.tar: the shard changed"):
        list(ds)


def test_a_flipped_byte_under_the_same_version_is_a_checksum_mismatch(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    data = tar_shard(make_samples("k", 5))
    where.put("a.tar", data)
    ds = dataset(where, tmp_path, order=Order(shuffle=False))
    path = tmp_path / "root" / "a.tar"
    stat = path.stat()
    flipped = bytearray(data)
    at = data.index(b"k00002") + 600  # inside the third sample's data
    flipped[at] ^= 1
    with open(path, "r+b") as f:  # same size, same modification time: same version
        f.write(flipped)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ChecksumMismatch, match=r"a\.tar: sample 2 at byte \d+ does not match"):
        list(ds)


def test_an_empty_folder_of_sidecars_and_bad_settings_are_refused(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    where.put("a.tar", tar_shard(make_samples("k", 2)))
    with pytest.raises(InvalidArgument, match="format must be one of lines, parquet, tar"):
        dataset(where, tmp_path, format="orc")
    with pytest.raises(ShardFormatError, match=r"a\.tar: not a Parquet file"):
        dataset(where, tmp_path, format="parquet")
    with pytest.raises(InvalidArgument, match="decode for format 'tar'"):
        dataset(where, tmp_path, decode="json")
    with pytest.raises(InvalidArgument, match="rank 2 outside world size 2"):
        dataset(where, tmp_path, order=Order(rank=2, world_size=2))


@pytest.mark.timeout(300)
def test_cuts_mid_shard_lose_nothing_on_fake_gcs_server(fake_gcs: Any, tmp_path: Path) -> None:
    bucket = unique_bucket("shards")
    config = ClientConfig(max_concurrency=16, retry=FAST_RETRY)
    shards = {f"d/s-{n}.tar": make_samples(f"{n}-", 40, size=20_000) for n in range(3)}
    with Client(config, endpoint=fake_gcs.endpoint) as client:
        client.create_bucket(bucket)
        for name, samples in shards.items():
            client.write(bucket, name, tar_shard(samples))
    expected = expected_of(shards)
    with FaultProxy(fake_gcs.endpoint, p_cut_response=0.05, seed=3) as proxy:
        ds = ShardDataset.from_prefix(f"gs://{bucket}/d/",
                                      settings=DatasetSettings(endpoint=proxy.endpoint,
                                                               config=config),
                                      reads=ShardReads(index_dir=tmp_path / "idx",
                                                       samples_per_read=5))
        for _ in range(2):
            got = list(ds)
            assert sorted(keys_of(got)) == sorted(expected)
            assert all({k: v for k, v in s.items() if not k.startswith("__")}
                       == expected[s["__key__"]] for s in got)
        assert proxy.stats.response_cuts > 0


@pytest.mark.parametrize("batch_size", [1, 64])
def test_an_iterator_holds_the_epoch_order_not_a_copy_per_sample(tmp_path: Path,
                                                                 batch_size: int) -> None:
    # The worker's samples as a list and a dict entry per batch, cut into
    # runs up front, held 90 to 190 bytes a sample before the first one came
    # out; the order is 8 (an array), and the runs are cut as they are read.
    import tracemalloc

    total = 400_000
    where = Where("file", f"file://{tmp_path}/root", None)
    where.put("a.txt", b"x\n" * total)
    ds = dataset(where, tmp_path, format="lines", order=Order(batch_size=batch_size),
                 reads=ShardReads(samples_per_read=64, prefetch_bytes=1 << 20))
    assert ds.total_samples == total
    tracemalloc.start()
    try:
        it = iter(ds)
        assert next(it) == b"x"
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del it
    # 8 bytes a sample of order, plus the reads and a chunk of runs (~3 MiB).
    assert held < 8 * total + (4 << 20), held / total


def test_memory_stays_within_the_prefetch_budget(tmp_path: Path) -> None:
    """8 shards of 64 MiB read with a 32 MiB prefetch budget: the process's
    peak RSS grows by less than 200 MiB over what the imports took."""
    import subprocess
    import sys

    root = tmp_path / "big"
    root.mkdir()
    block = os.urandom(1 << 20)
    for n in range(8):
        samples = [(f"{n}-{i:04d}", {"bin": block[i:] + block[:i]}) for i in range(63)]
        (root / f"s-{n}.tar").write_bytes(tar_shard(samples))
    script = f"""
import resource, sys
import torch
from aioflux.torch import ShardDataset, ShardReads
def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
base = peak()
ds = ShardDataset.from_prefix({str(root)!r}, reads=ShardReads(
    index_dir={str(tmp_path / 'idx')!r}, prefetch_bytes=32 << 20))
n = sum(1 for _ in ds)
print(n, peak() - base)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=240).stdout.split()
    assert int(out[0]) == 8 * 63
    assert int(out[1]) < 200, f"peak RSS grew by {out[1]} MiB"


# torchdata 0.11 touches torch.set_vital at import, which torch 2.13 deprecates.
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_mid_shard(tmp_path: Path, workers: int) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    where = Where("file", f"file://{tmp_path}/root", None)
    expected = seed_tars(where)

    def loader() -> StatefulDataLoader[Any]:
        ds = dataset(where, tmp_path, order=Order(batch_size=3, seed=2),
                     reads=ShardReads(samples_per_read=2))
        return StatefulDataLoader(ds, batch_size=3, num_workers=workers, collate_fn=keys_of,
                                  multiprocessing_context="fork" if workers else None)

    first = loader()
    it = iter(first)
    before = [next(it) for _ in range(3)]
    saved = first.state_dict()
    del it
    resumed = loader()
    resumed.load_state_dict(saved)
    after = list(resumed)
    keys = [k for batch in before + after for k in batch]
    assert sorted(keys) == sorted(expected)
    assert [k for b in before + after for k in b] == [k for b in list(loader()) for k in b]


def _gloo_rank(rank: int, world: int, init: str, root: str, idx: str, out: str) -> None:
    import datetime
    import json

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    try:
        report = []
        for drop_last in (False, True):
            ds = ShardDataset.from_prefix(root, reads=ShardReads(index_dir=idx),
                                          order=Order(batch_size=5, drop_last=drop_last),
                                          transform=lambda s: s["__key__"])
            loader = torch.utils.data.DataLoader(
                ds, batch_size=5, collate_fn=list, num_workers=2 if drop_last else 0,
                multiprocessing_context="fork" if drop_last else None)
            promised, done, keys = len(loader), 0, []
            for batch in loader:
                total = torch.tensor([float(len(batch))])
                dist.all_reduce(total)  # what DDP does at every step
                assert total.item() == world * len(batch)
                done += 1
                keys += batch
            report.append([promised, done, keys])
        Path(out, f"{rank}.json").write_text(json.dumps(report))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world", [2, 3])
def test_gloo_ranks_step_together_over_uneven_shards(tmp_path: Path, world: int) -> None:
    import json

    import torch.multiprocessing as mp

    where = Where("file", f"file://{tmp_path}/root", None)
    expected = seed_tars(where)
    forkserver()  # the ranks start from it: torch imported once, not once a rank
    mp.start_processes(_gloo_rank, args=(world, str(tmp_path / "init"), where.root,
                                         str(tmp_path / "idx"), str(tmp_path)),
                       nprocs=world, join=True, start_method="forkserver")
    reports = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(world)]
    for case in range(2):  # padded, then drop_last with two workers
        steps = {(r[case][0], r[case][1]) for r in reports}
        samples = pass_samples(24, 0, 5 * world, world, drop_last=bool(case))
        assert steps == {(-(-samples // (5 * world)),) * 2}, (world, case)
        keys = [k for r in reports for k in r[case][2]]
        if case == 0:
            assert set(keys) == set(expected)
        else:
            assert len(keys) == len(set(keys))


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_the_disk_cache_serves_later_epochs_and_other_workers(where: Where,
                                                             tmp_path: Path) -> None:
    expected = seed_tars(where)
    ds = dataset(where, tmp_path, reads=ShardReads(samples_per_read=3),
                 settings=where.settings(cache_dir=tmp_path / "cache", cache_limit=1 << 30))
    cache = ds._shards.disk_cache
    assert cache is not None
    first = list(ds)
    filled = cache.stats.misses
    assert filled == sum(-(-n // 3) for n in SIZES.values()) and cache.stats.hits >= 0
    for _ in range(2):  # other orders, the same read units: all from disk
        got = list(ds)
        assert sorted(keys_of(got)) == sorted(keys_of(first)) == sorted(expected)
        assert all({k: v for k, v in s.items() if not k.startswith("__")}
                   == expected[s["__key__"]] for s in got)
    assert cache.stats.misses == filled
    # A second dataset on the same cache (another worker or rank) reads no shard.
    other = dataset(where, tmp_path, reads=ShardReads(samples_per_read=3),
                    settings=where.settings(cache_dir=tmp_path / "cache"), order=Order(seed=4))
    assert sorted(keys_of(list(other))) == sorted(expected)
    assert other._shards.disk_cache is not None and other._shards.disk_cache.stats.misses == 0


def test_hedged_reads_answer_for_a_held_back_shard_read(emulator: Any, bucket: str,
                                                        tmp_path: Path) -> None:
    from aioflux.testing import EmulatorProfile

    samples = make_samples("h", 60, size=2000)
    emulator.store.put(bucket, "d/a.tar", tar_shard(samples))
    ds = ShardDataset.from_prefix(f"gs://{bucket}/d/",
                                  settings=DatasetSettings(endpoint=emulator.endpoint,
                                                           hedge_after=0.05),
                                  reads=ShardReads(index_dir=tmp_path / "idx", samples_per_read=1,
                                                   reads_in_flight=4))
    before = emulator.stats["get_media"]
    # The budget allows a duplicate per 20 reads: the later held-back reads get
    # one. A held read waits 8x hedge_after (the reads past the budget wait it
    # all: 1 s took the test 7 s, idle).
    emulator.profile = EmulatorProfile(tail_fraction=0.2, tail_delay=(0.4, 0.4), tail_seed=7)
    try:
        got = list(ds)
    finally:
        emulator.profile = EmulatorProfile()
    assert sorted(keys_of(got)) == [key for key, _ in samples]
    assert emulator.stats["tail_delays"] >= 1
    # 60 reads, and a duplicate for at least one held back.
    assert emulator.stats["get_media"] - before > 60


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_the_map_style_sibling_reads_any_sample_by_number(where: Where, tmp_path: Path) -> None:
    from aioflux.torch import ResumableBatchSampler, ShardMapDataset

    expected = seed_tars(where)
    keys = list(expected)  # shard-list order numbering
    ds = ShardMapDataset.from_prefix(where.root, reads=ShardReads(index_dir=tmp_path / "idx"),
                                     settings=where.settings())
    assert len(ds) == 24 and ds.counts == list(SIZES.values())
    assert ds[0]["__key__"] == keys[0] and ds[-1]["__key__"] == keys[-1]
    assert [s["__key__"] for s in ds.__getitems__([5, 6, 7, 23, 0])] == \
        [keys[i] for i in (5, 6, 7, 23, 0)]
    with pytest.raises(IndexError):
        ds[24]
    with pytest.raises(InvalidArgument, match="an index must be an int"):
        ds["a"]  # type: ignore[index]
    sampler = ResumableBatchSampler(ds, order=Order(batch_size=4, seed=3))
    loader = torch.utils.data.DataLoader(ds, batch_sampler=sampler, collate_fn=list,
                                         num_workers=2, multiprocessing_context="fork")
    got = [s for batch in loader for s in batch]
    assert sorted(keys_of(got)) == sorted(keys)
    assert all({k: v for k, v in s.items() if not k.startswith("__")}
               == expected[s["__key__"]] for s in got)


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_a_shard_that_packs_hundreds_to_one_is_read_in_bounded_memory(
        where: Where, tmp_path: Path) -> None:
    # 64 MiB of repeated lines: ~70 KB gzip, less zstd. Its index pass and
    # its cursor each had a block's 64 MiB at once (aioflux._engines.shards._formats.PIECE).
    import tracemalloc

    line = b"z" * 16383 + b"\n"
    where.put("big.jsonl.gz", gz(line * 4096))
    where.put("big.jsonl.zst", zst(line * 4096))
    tracemalloc.start()
    try:
        ds = ShardDataset.from_prefix(where.root, format="lines",
                                      reads=ShardReads(index_dir=tmp_path / "idx",
                                                       samples_per_read=256,
                                                       prefetch_bytes=4 << 20),
                                      settings=where.settings())
        seen = 0
        for sample in ds:
            assert sample == line[:-1]
            seen += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == 2 * 4096
    # The read-ahead, a piece and a block per cursor, the indexes: ~20 MiB
    # (with a block's data at once: ~200 MiB).
    assert peak < 40 * 1024 * 1024, peak


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_gzip_tar_shards_by_either_suffix(where: Where, tmp_path: Path) -> None:
    # .tgz was read as a plain tar ("truncated"), as webdataset reads it: a gzip tar.
    shards = {"a.tgz": make_samples("a/", 5), "b.tar.gz": make_samples("b/", 4)}
    for name, samples in shards.items():
        where.put(name, gz(tar_shard(samples)))
    got = list(dataset(where, tmp_path, format="tar",
                       settings=where.settings(cache_dir=tmp_path / "cache")))
    assert sorted(keys_of(got)) == sorted(expected_of(shards))
