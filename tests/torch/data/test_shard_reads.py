"""``ShardReads``: the shard datasets' reads and indexes in one checked,
picklable object; the old keywords still work, each use warning, read the
same samples, and are refused beside the new object. And
``ObjectMapDataset.batch_sampler``'s ``order=``, its old form deprecated."""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from aioflux import InvalidArgument
from aioflux.testing import Emulator
from aioflux.torch import (
    DatasetSettings,
    ObjectMapDataset,
    Order,
    ShardDataset,
    ShardMapDataset,
    ShardReads,
)

# The old keywords, each with a value other than the default (index_dir: a
# folder of the test's, filled in by old_keyword).
OLD: dict[str, Any] = {
    "samples_per_read": 2,
    "prefetch_bytes": 1 << 16,
    "reads_in_flight": 2,
    "index_dir": None,
    "cache_indexes": False,
    "sidecars": False,
    "listing": "check",
    "publish_indexes": True,
}
NEW = "reads=ShardReads"


def settings(emulator: Emulator) -> DatasetSettings:
    return DatasetSettings(endpoint=emulator.endpoint)


def seed_lines(emulator: Emulator, bucket: str) -> str:
    for k in range(3):
        body = b"".join(b'{"i": %d}\n' % (k * 100 + i) for i in range(9 + k))
        emulator.store.put(bucket, f"s/{k:03d}.jsonl", body)
    return f"gs://{bucket}/s/"


def old_keyword(name: str, tmp_path: Path) -> dict[str, Any]:
    return {name: str(tmp_path / "idx") if name == "index_dir" else OLD[name]}


def warns_old(op: str, name: str, new: str = NEW) -> Any:
    return pytest.warns(
        DeprecationWarning,
        match=re.escape(
            f"{op}({name}=...) is deprecated and goes in aioflux 0.3.0: use {new}({name}=...)"
        ),
    )


def test_shard_reads_is_frozen_and_pickles_for_spawn_workers(tmp_path: Path) -> None:
    reads = ShardReads(
        samples_per_read=4,
        prefetch_bytes=1 << 20,
        reads_in_flight=3,
        index_dir=tmp_path,
        cache_indexes=False,
        sidecars=False,
        listing="rank0",
        publish_indexes=True,
    )
    assert pickle.loads(pickle.dumps(reads)) == reads
    with pytest.raises(dataclasses.FrozenInstanceError):
        reads.listing = "each"  # type: ignore[misc]
    assert {f.name for f in dataclasses.fields(ShardReads)} == set(OLD)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("samples_per_read", 0),
        ("samples_per_read", 1.5),
        ("prefetch_bytes", 0),
        ("reads_in_flight", 0),
        ("reads_in_flight", "2"),
        ("index_dir", 3),
        ("cache_indexes", "no"),
        ("sidecars", 1),
        ("listing", "all"),
        ("publish_indexes", None),
    ],
)
def test_a_wrong_field_is_refused_naming_it_before_any_request(field: str, value: object) -> None:
    # No such shard: the check comes first, or the error would be NotFound.
    missing = "gs://no-such-bucket/s/000.jsonl"
    reads = ShardReads(**{field: value})
    with pytest.raises(InvalidArgument, match=rf"^ShardDataset: (reads\.)?{field}"):
        ShardDataset(missing, reads=reads)
    with pytest.raises(InvalidArgument, match=rf"^ShardMapDataset\.from_prefix: (reads\.)?{field}"):
        ShardMapDataset.from_prefix("gs://no-such-bucket/s/", reads=reads)
    with pytest.raises(InvalidArgument, match="reads must be a ShardReads"):
        ShardDataset(missing, reads={field: value})  # type: ignore[arg-type]


def test_the_map_dataset_refuses_a_read_ahead_it_does_not_do(
    emulator: Emulator, bucket: str
) -> None:
    url = seed_lines(emulator, bucket)
    with pytest.raises(InvalidArgument, match=r"reads\.prefetch_bytes is ShardDataset's"):
        ShardMapDataset.from_prefix(
            url, reads=ShardReads(prefetch_bytes=1 << 16), settings=settings(emulator)
        )
    # It never took the keyword: Python's own refusal, as before.
    with pytest.raises(TypeError, match="unexpected keyword argument 'prefetch_bytes'"):
        ShardMapDataset.from_prefix(url, prefetch_bytes=1 << 16, settings=settings(emulator))


@pytest.mark.parametrize("name", sorted(OLD))
def test_each_old_keyword_warns_and_reads_the_same_samples(
    emulator: Emulator, bucket: str, tmp_path: Path, name: str
) -> None:
    url = seed_lines(emulator, bucket)
    kw = old_keyword(name, tmp_path)
    reads = ShardReads(**kw)
    s = settings(emulator)
    order = Order(seed=3, batch_size=2)
    with warns_old("ShardDataset.from_prefix", name):
        old = ShardDataset.from_prefix(url, format="lines", order=order, settings=s, **kw)
    new = ShardDataset.from_prefix(url, format="lines", order=order, settings=s, reads=reads)
    with warns_old("ShardDataset", name):
        direct = ShardDataset(new.shards, format="lines", order=order, settings=s, **kw)
    assert old.reads == new.reads == direct.reads == reads
    for epoch in (0, 1):
        assert old.epoch_order(epoch) == new.epoch_order(epoch) == direct.epoch_order(epoch)
    assert list(old) == list(new) == list(direct)
    if name == "prefetch_bytes":
        return  # the map dataset never took it
    with warns_old("ShardMapDataset.from_prefix", name):
        old_map = ShardMapDataset.from_prefix(url, format="lines", settings=s, **kw)
    new_map = ShardMapDataset.from_prefix(url, format="lines", settings=s, reads=reads)
    with warns_old("ShardMapDataset", name):
        direct_map = ShardMapDataset(new.shards, format="lines", settings=s, **kw)
    assert old_map.reads == new_map.reads == direct_map.reads == reads
    every = list(range(len(new_map)))
    assert (
        old_map.__getitems__(every) == new_map.__getitems__(every) == direct_map.__getitems__(every)
    )


def test_the_settings_take_effect(emulator: Emulator, bucket: str, tmp_path: Path) -> None:
    url = seed_lines(emulator, bucket)
    reads = ShardReads(
        samples_per_read=3, prefetch_bytes=1 << 16, reads_in_flight=2, index_dir=tmp_path / "idx"
    )
    ds = ShardDataset.from_prefix(url, reads=reads, settings=settings(emulator))
    assert (ds.samples_per_read, ds.prefetch_bytes, ds.reads_in_flight) == (3, 1 << 16, 2)
    assert ds._shards.index_cache.directory == tmp_path / "idx"
    assert any((tmp_path / "idx").iterdir())  # the indexes streamed were kept there
    kept = pickle.loads(pickle.dumps(ds))
    assert kept.reads == reads and sorted(kept) == sorted(ds)
    table = ShardMapDataset.from_prefix(
        url, reads=ShardReads(samples_per_read=5, sidecars=False), settings=settings(emulator)
    )
    assert table._shards.samples_per_read == 5 and table._shards.sidecars is False


def test_old_and_new_mixed_are_refused(emulator: Emulator, bucket: str) -> None:
    url = seed_lines(emulator, bucket)
    s = settings(emulator)
    with (
        pytest.raises(
            InvalidArgument,
            match=r"reads=ShardReads\(\.\.\.\) or the old keywords "
            r"\(samples_per_read\), not both",
        ),
        pytest.warns(DeprecationWarning),
    ):
        ShardDataset.from_prefix(url, reads=ShardReads(), samples_per_read=2, settings=s)
    with (
        pytest.raises(InvalidArgument, match=r"\(listing, sidecars\), not both"),
        pytest.warns(DeprecationWarning),
    ):
        ShardMapDataset.from_prefix(
            url, reads=ShardReads(), listing="each", sidecars=False, settings=s
        )
    shards = f"{url}000.jsonl"
    with pytest.raises(InvalidArgument, match="not both"), pytest.warns(DeprecationWarning):
        ShardDataset(shards, reads=ShardReads(), index_dir="/tmp/x", settings=s)
    with pytest.raises(InvalidArgument, match="not both"), pytest.warns(DeprecationWarning):
        ShardMapDataset(shards, reads=ShardReads(), cache_indexes=False, settings=s)


def test_the_warnings_name_the_callers_line(emulator: Emulator, bucket: str) -> None:
    url = seed_lines(emulator, bucket)
    s = settings(emulator)
    objects = ObjectMapDataset.from_prefix(url, settings=s)
    made = [
        lambda: ShardDataset.from_prefix(url, samples_per_read=2, settings=s),
        lambda: ShardMapDataset.from_prefix(url, reads_in_flight=2, settings=s),
        lambda: ShardDataset(f"{url}000.jsonl", sidecars=False, settings=s),
        lambda: ShardMapDataset(f"{url}000.jsonl", listing="each", settings=s),
        lambda: objects.batch_sampler(2),
        lambda: objects.batch_sampler(order=None, shuffle=True),
    ]
    for make in made:
        with pytest.warns(DeprecationWarning) as caught:
            make()
        assert [w.filename for w in caught] == [__file__], [str(w.message) for w in caught]


def seed_objects(emulator: Emulator, bucket: str, count: int = 21) -> ObjectMapDataset:
    for i in range(count):
        emulator.store.put(bucket, f"o/{i:03d}", bytes([i]) * (i + 1))
    return ObjectMapDataset.from_prefix(f"gs://{bucket}/o/", settings=settings(emulator))


@pytest.mark.parametrize(
    "old",
    [
        {"batch_size": 4},
        {"batch_size": 4, "drop_last": True},
        {"batch_size": 4, "shuffle": False},
    ],
)
def test_the_old_batch_sampler_warns_and_gives_the_same_batches(
    emulator: Emulator, bucket: str, old: dict[str, Any]
) -> None:
    ds = seed_objects(emulator, bucket)
    with contextlib.ExitStack() as stack:
        for name in old:
            stack.enter_context(warns_old("ObjectMapDataset.batch_sampler", name, "order=Order"))
        sampler = ds.batch_sampler(**old)
    # The old form did not shuffle unless asked to.
    new = ds.batch_sampler(order=Order(**{"shuffle": False, **old}))
    assert list(sampler) == list(new)
    assert len(sampler) == len(new) == (5 if old.get("drop_last") else 6)
    assert [i for batch in new for i in batch] == list(range(20 if old.get("drop_last") else 21))


def test_the_old_shuffle_with_a_generator_is_the_new_one(emulator: Emulator, bucket: str) -> None:
    ds = seed_objects(emulator, bucket)
    with (
        warns_old("ObjectMapDataset.batch_sampler", "shuffle", "order=Order"),
        warns_old("ObjectMapDataset.batch_sampler", "batch_size", "order=Order"),
    ):
        old = ds.batch_sampler(4, shuffle=True, generator=torch.Generator().manual_seed(5))
    new = ds.batch_sampler(order=Order(batch_size=4), generator=torch.Generator().manual_seed(5))
    assert list(old) == list(new)


def test_the_order_s_seed_makes_the_shuffle(emulator: Emulator, bucket: str) -> None:
    ds = seed_objects(emulator, bucket)
    one = ds.batch_sampler(order=Order(batch_size=4, seed=1))
    again = ds.batch_sampler(order=Order(batch_size=4, seed=1))
    other = ds.batch_sampler(order=Order(batch_size=4, seed=2))
    first = list(one)
    assert first == list(again) != list(other)
    assert sorted(i for batch in first for i in batch) == list(range(21))
    assert list(one) != first  # each pass a new order, from the same generator
    # The batches download ahead as before: every object once, in the sampler's order.
    got = [
        sample
        for batch in ds.batch_sampler(order=Order(batch_size=4, seed=1))
        for sample in ds.__getitems__(batch)
    ]
    assert got == [ds[i] for batch in first for i in batch]


def test_the_batch_sampler_refuses_what_it_cannot_do(emulator: Emulator, bucket: str) -> None:
    ds = seed_objects(emulator, bucket)
    with pytest.raises(InvalidArgument, match="ResumableBatchSampler splits them"):
        ds.batch_sampler(order=Order(rank=0, world_size=2))
    with pytest.raises(InvalidArgument, match=r"order\.shuffle_window is ShardDataset's"):
        ds.batch_sampler(order=Order(shuffle_window=4))
    with pytest.raises(InvalidArgument, match=r"order\.batch_size"):
        ds.batch_sampler(order=Order(batch_size=0))
    with pytest.raises(InvalidArgument, match="ahead"):
        ds.batch_sampler(order=Order(batch_size=4), ahead=0)
    with pytest.raises(InvalidArgument, match="not both"), pytest.warns(DeprecationWarning):
        ds.batch_sampler(4, order=Order(batch_size=4))
    with pytest.raises(TypeError, match="unexpected keyword argument 'seed'"):
        ds.batch_sampler(order=Order(), seed=3)
