"""``Order`` and ``Parquet``: the epoch order and the Parquet options, each one
checked, picklable object; the old keywords still work, each use warning,
give the same order, and are refused beside the new object."""

from __future__ import annotations

import contextlib
import io
import pickle
import re
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioflux import InvalidArgument
from aioflux.testing import Emulator
from aioflux.torch import (
    DatasetSettings,
    ObjectIterableDataset,
    Order,
    Parquet,
    ResumableBatchSampler,
    ResumableSampler,
    ShardDataset,
    ShardMapDataset,
    ShardReads,
)

# The old keywords of each class, with a value other than the default.
OLD = {"shuffle": False, "seed": 7, "batch_size": 3, "drop_last": True, "rank": 1,
       "world_size": 2}


def settings(emulator: Emulator) -> DatasetSettings:
    return DatasetSettings(endpoint=emulator.endpoint)


def seed_objects(emulator: Emulator, bucket: str, count: int = 23) -> str:
    for i in range(count):
        emulator.store.put(bucket, f"o/{i:03d}", b"x" * (i + 1))
    return f"gs://{bucket}/o/"


def seed_lines(emulator: Emulator, bucket: str) -> str:
    for k in range(3):
        body = b"".join(b'{"i": %d}\n' % (k * 100 + i) for i in range(9 + k))
        emulator.store.put(bucket, f"s/{k:03d}.jsonl", body)
    return f"gs://{bucket}/s/"


def seed_parquet(emulator: Emulator, bucket: str) -> str:
    for k in range(2):
        out = io.BytesIO()
        t = pa.table({"id": list(range(k * 100, k * 100 + 20)), "text": ["t"] * 20})
        pq.write_table(t, out, row_group_size=8, write_page_checksum=True)
        emulator.store.put(bucket, f"p/{k:03d}.parquet", out.getvalue())
    return f"gs://{bucket}/p/"


def old_warning(cls: str, name: str, new: str) -> Any:
    """A warning for the old keyword ``name`` (``rank`` comes with ``world_size``)."""
    names = [name, "world_size"] if name == "rank" else [name]
    stack = contextlib.ExitStack()
    for each in names:
        stack.enter_context(pytest.warns(
            DeprecationWarning, match=re.escape(f"{cls}({each}=...) is deprecated and goes in "
                                                f"aioflux 0.3.0: use {new}({each}=...)")))
    return stack


def test_order_and_parquet_are_frozen_and_pickle_for_spawn_workers() -> None:
    order = Order(shuffle=False, seed=3, batch_size=4, drop_last=True, rank=1, world_size=2,
                  shuffle_window=64)
    parquet = Parquet(columns=["id"], filters=[("id", ">", 3)], output="columns",
                      tensors=True)
    assert pickle.loads(pickle.dumps(order)) == order
    assert pickle.loads(pickle.dumps(parquet)) == parquet
    with pytest.raises(AttributeError):
        order.seed = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):
        parquet.output = "rows"  # type: ignore[misc]


@pytest.mark.parametrize(("field", "value"), [
    ("shuffle", 1), ("seed", "7"), ("batch_size", 0), ("drop_last", "no"), ("rank", -1),
    ("world_size", 0), ("shuffle_window", 0),
])
def test_a_wrong_order_field_is_refused_naming_it(field: str, value: object) -> None:
    with pytest.raises(InvalidArgument, match=rf"ResumableSampler: order\.{field}"):
        ResumableSampler(range(10), order=Order(**{field: value}))


def test_order_refusals_name_the_class_and_the_rank(emulator: Emulator, bucket: str) -> None:
    with pytest.raises(InvalidArgument, match="ResumableBatchSampler: rank 2 outside world "
                                              "size 2"):
        ResumableBatchSampler(range(10), order=Order(rank=2, world_size=2))
    with pytest.raises(InvalidArgument, match="order must be"):
        ResumableSampler(range(10), order={"seed": 1})  # type: ignore[arg-type]
    # shuffle_window is ShardDataset's: the others refuse another value.
    for make in (lambda o: ResumableSampler(range(10), order=o),
                 lambda o: ResumableBatchSampler(range(10), order=o),
                 lambda o: ObjectIterableDataset([], order=o, settings=settings(emulator))):
        with pytest.raises(InvalidArgument, match=r"order\.shuffle_window is ShardDataset's"):
            make(Order(shuffle_window=16))


@pytest.mark.parametrize(("parquet", "field"), [
    (Parquet(columns="id"), "columns"), (Parquet(columns=[]), "columns"),
    (Parquet(output="table"), "output"), (Parquet(tensors=1), "tensors"),  # type: ignore[arg-type]
    (Parquet(filters="id > 3"), "filters"),
])
def test_a_wrong_parquet_field_is_refused_naming_it(emulator: Emulator, bucket: str,
                                                    parquet: Parquet, field: str) -> None:
    url = seed_parquet(emulator, bucket)
    with pytest.raises(InvalidArgument, match=rf"ShardDataset.*{field}"):
        ShardDataset.from_prefix(url, format=parquet, settings=settings(emulator))


def test_the_map_dataset_takes_rows_only(emulator: Emulator, bucket: str) -> None:
    url = seed_parquet(emulator, bucket)
    with pytest.raises(InvalidArgument, match=r"ShardMapDataset\.from_prefix: output='columns' is "
                                              "ShardDataset's"):
        ShardMapDataset.from_prefix(url, format=Parquet(output="columns"),
                                    settings=settings(emulator))
    with pytest.raises(InvalidArgument, match="format must be a str, a Parquet or None"):
        ShardMapDataset.from_prefix(url, format=3, settings=settings(emulator))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(OLD))
def test_each_old_sampler_keyword_warns_and_gives_the_same_order(name: str) -> None:
    for cls in (ResumableSampler, ResumableBatchSampler):
        kw = {name: OLD[name]} if name != "rank" else {"rank": 1, "world_size": 2}
        with old_warning(cls.__name__, name, "order=Order"):
            old = cls(range(50), **kw)
        new = cls(range(50), order=Order(**kw))
        for sampler in (old, new):
            sampler.set_epoch(2)
        assert list(old) == list(new)
        assert old.state_dict() == new.state_dict()


def test_a_samplers_positional_batch_size_warns_and_is_the_orders() -> None:
    for cls in (ResumableSampler, ResumableBatchSampler):
        with old_warning(cls.__name__, "batch_size", "order=Order"), \
                old_warning(cls.__name__, "seed", "order=Order"):
            old = cls(range(40), 8, seed=3)
        new = cls(range(40), order=Order(batch_size=8, seed=3))
        assert old.batch_size == new.batch_size == 8
        assert list(old) == list(new)
        with pytest.raises(InvalidArgument, match="not both"), \
                pytest.warns(DeprecationWarning):
            cls(range(40), 8, order=Order(seed=3))
    with pytest.raises(TypeError, match="unexpected keyword argument 'prefetch'"):
        ResumableSampler(range(4), prefetch=2)


@pytest.mark.parametrize("name", sorted(OLD))
def test_each_old_iterable_keyword_warns_and_gives_the_same_order(
        emulator: Emulator, bucket: str, name: str) -> None:
    url = seed_objects(emulator, bucket)
    kw = {name: OLD[name]} if name != "rank" else {"rank": 1, "world_size": 2}
    op = "ObjectIterableDataset.from_prefix"
    with old_warning(op, name, "order=Order"):
        old = ObjectIterableDataset.from_prefix(url, settings=settings(emulator), **kw)
    new = ObjectIterableDataset.from_prefix(url, settings=settings(emulator), order=Order(**kw))
    objects = new.objects
    with old_warning("ObjectIterableDataset", name, "order=Order"):
        direct = ObjectIterableDataset(objects, settings=settings(emulator), **kw)
    for epoch in (0, 3):
        assert old.shard(epoch, 1, 2) == new.shard(epoch, 1, 2) == direct.shard(epoch, 1, 2)
    assert len(old) == len(new) and old.state_dict() == new.state_dict()
    assert pickle.loads(pickle.dumps(new)).order == new.order


@pytest.mark.parametrize("name", [*sorted(OLD), "shuffle_window"])
def test_each_old_shard_keyword_warns_and_gives_the_same_order(
        emulator: Emulator, bucket: str, name: str) -> None:
    url = seed_lines(emulator, bucket)
    values = dict(OLD, shuffle_window=2)
    kw = {name: values[name]} if name != "rank" else {"rank": 1, "world_size": 2}
    with old_warning("ShardDataset.from_prefix", name, "order=Order"):
        old = ShardDataset.from_prefix(url, reads=ShardReads(samples_per_read=2),
                                       settings=settings(emulator), **kw)
    new = ShardDataset.from_prefix(url, reads=ShardReads(samples_per_read=2),
                                   settings=settings(emulator), order=Order(**kw))
    with old_warning("ShardDataset", name, "order=Order"):
        direct = ShardDataset(old.shards, reads=ShardReads(samples_per_read=2),
                              settings=settings(emulator), **kw)
    for epoch in (0, 2):
        assert old.epoch_order(epoch) == new.epoch_order(epoch) == direct.epoch_order(epoch)
    assert len(old) == len(new) == len(direct)
    assert list(new) == list(old)
    assert pickle.loads(pickle.dumps(new)).order == new.order


def test_old_and_new_order_mixed_are_refused(emulator: Emulator, bucket: str) -> None:
    url = seed_lines(emulator, bucket)
    with pytest.raises(InvalidArgument, match=r"order=Order\(\.\.\.\) or the old keywords "
                                              r"\(seed\), not both"), \
            pytest.warns(DeprecationWarning):
        ShardDataset.from_prefix(url, order=Order(), seed=1, settings=settings(emulator))
    with pytest.raises(InvalidArgument, match="not both"), pytest.warns(DeprecationWarning):
        ObjectIterableDataset([], order=Order(), shuffle=False, settings=settings(emulator))
    with pytest.raises(InvalidArgument, match="not both"), pytest.warns(DeprecationWarning):
        ResumableBatchSampler(range(3), order=Order(), drop_last=True)


@pytest.mark.parametrize("name", ["columns", "filters", "output", "tensors"])
def test_each_old_parquet_keyword_warns_and_reads_the_same(emulator: Emulator, bucket: str,
                                                           name: str) -> None:
    url = seed_parquet(emulator, bucket)
    value = {"columns": ["id"], "filters": [("id", ">=", 100)], "output": "columns",
             "tensors": True}[name]
    s = settings(emulator)
    order = Order(batch_size=4, seed=5)
    with old_warning("ShardDataset.from_prefix", name, "format=Parquet"):
        old = ShardDataset.from_prefix(url, settings=s, order=order, **{name: value})
    new = ShardDataset.from_prefix(url, settings=s, order=order,
                                   format=Parquet(**{name: value}))
    assert new._shards.parquet is not None and new._shards.parquet.output == \
        (value if name == "output" else "rows")
    assert old.counts == new.counts and old.epoch_order(1) == new.epoch_order(1)
    assert repr(list(old)) == repr(list(new))
    if name == "output":
        return
    with old_warning("ShardMapDataset.from_prefix", name, "format=Parquet"):
        old_map = ShardMapDataset.from_prefix(url, settings=s, **{name: value})
    new_map = ShardMapDataset.from_prefix(url, settings=s, format=Parquet(**{name: value}))
    assert len(old_map) == len(new_map)
    assert repr(old_map.__getitems__(list(range(len(new_map))))) == \
        repr(new_map.__getitems__(list(range(len(new_map)))))
    assert pickle.loads(pickle.dumps(new_map))[0].keys() == new_map[0].keys()


def test_format_parquet_is_parquet_with_defaults_and_mixing_is_refused(
        emulator: Emulator, bucket: str) -> None:
    url = seed_parquet(emulator, bucket)
    s = settings(emulator)
    plain = ShardMapDataset.from_prefix(url, format="parquet", settings=s)
    given = ShardMapDataset.from_prefix(url, format=Parquet(), settings=s)
    assert plain[5] == given[5] and len(plain) == len(given) == 40
    with pytest.raises(InvalidArgument, match=r"format=Parquet\(\.\.\.\) or the old keywords "
                                              r"\(columns\), not both"), \
            pytest.warns(DeprecationWarning):
        ShardDataset(plain._shards.infos, format=Parquet(), columns=["id"], settings=s)
    # The map dataset never took output=: Python's own refusal.
    with pytest.raises(TypeError, match="unexpected keyword argument 'output'"):
        ShardMapDataset(plain._shards.infos, output="rows", settings=s)


def test_the_warnings_name_the_callers_line(emulator: Emulator, bucket: str) -> None:
    # A warning shown by Python's default filters only when it names the
    # user's code (``__main__``), not aioflux's.
    shards, objects = seed_lines(emulator, bucket), seed_objects(emulator, bucket)
    s = settings(emulator)
    made = [
        lambda: ResumableSampler(range(4), 2),
        lambda: ResumableBatchSampler(range(4), seed=1),
        lambda: ObjectIterableDataset([], seed=1, settings=s),
        lambda: ObjectIterableDataset.from_prefix(objects, seed=1, settings=s),
        lambda: ShardDataset.from_prefix(shards, seed=1, settings=s),
        lambda: ShardDataset.from_prefix(shards, tensors=False, settings=s),
        lambda: ShardMapDataset.from_prefix(shards, tensors=False, settings=s),
        lambda: ShardDataset(f"{shards}000.jsonl", seed=1, settings=s),
        lambda: ShardMapDataset(f"{shards}000.jsonl", tensors=False, settings=s),
    ]
    for make in made:
        with pytest.warns(DeprecationWarning) as caught:
            make()
        assert [w.filename for w in caught] == [__file__], [str(w.message) for w in caught]
