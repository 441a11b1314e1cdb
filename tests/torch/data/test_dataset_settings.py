"""``DatasetSettings``: one settings object for the four datasets; the old
keywords and the old class names still work, each use warning."""

from __future__ import annotations

import os
import pickle
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

import aioflux.torch
from aioflux import ClientConfig, DownloadOptions, InvalidArgument, RetryPolicy
from aioflux._engines.cache import info
from aioflux.testing import Emulator
from aioflux.torch import (
    DatasetSettings,
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
    ShardDataset,
    ShardMapDataset,
)
from tests.torch._forkserver import forkserver


def to_bytes(data: bytes | bytearray) -> bytes:
    return bytes(data)


def seed(emulator: Emulator, bucket: str, count: int) -> dict[str, bytes]:
    data = {f"d/{i:03d}": os.urandom(500) for i in range(count)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    return data


def seen(ds: Any) -> tuple[object, ...]:
    """What a dataset's settings became: its store's, planner's and cache's."""
    source = ds._source
    cache = source.cache
    return (source.config, source.endpoint, source.credentials, source.list_retry,
            source.download_retry, source.download_options,
            None if cache is None else (cache.directory, cache.limit))


def test_new_names_are_exported_and_the_old_ones_warn_and_are_the_same_class() -> None:
    assert {"DatasetSettings", "ObjectMapDataset", "ObjectIterableDataset"} <= set(
        aioflux.torch.__all__)
    assert not {"MapDataset", "IterableDataset"} & set(aioflux.torch.__all__)
    for old, new in (("MapDataset", ObjectMapDataset),
                     ("IterableDataset", ObjectIterableDataset)):
        with pytest.warns(DeprecationWarning,
                          match=rf"aioflux\.torch\.{old} is deprecated and goes in aioflux "
                                rf"0\.3\.0: use aioflux\.torch\.{new.__name__}"):
            assert getattr(aioflux.torch, old) is new
    with pytest.raises(AttributeError):
        aioflux.torch.NoSuchDataset  # noqa: B018


def test_settings_reach_spawned_workers_by_pickle(emulator: Emulator, bucket: str,
                                                  tmp_path: Path) -> None:
    # A forkserver's worker gets the dataset by pickle in a process that
    # never saw it, as a spawned one does (without importing torch anew):
    # the endpoint and the cache it reads by are the settings', nothing else.
    data = seed(emulator, bucket, 12)
    settings = DatasetSettings(endpoint=emulator.endpoint,
                               config=ClientConfig(max_concurrency=3),
                               download_options=DownloadOptions(disable_compose=True),
                               cache_dir=tmp_path / "cache", cache_limit=1 << 20)
    assert pickle.loads(pickle.dumps(settings)) == settings
    ds = ObjectMapDataset.from_prefix(f"gs://{bucket}/d/", transform=to_bytes, settings=settings)
    assert seen(pickle.loads(pickle.dumps(ds))) == seen(ds)
    assert ds._source.config.max_concurrency == 3
    before = Counter(emulator.stats)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=list,
                                         multiprocessing_context=forkserver())
    got = [sample for batch in loader for sample in batch]
    assert sorted(got) == sorted(data.values())
    fetched = Counter(emulator.stats) - before
    assert fetched["get_media"] == 12 and fetched["compose"] == 0  # disable_compose held
    assert info(str(tmp_path / "cache")).entries == 12  # the workers cached by the settings


OLD_VALUES: dict[str, Any] = {
    "config": ClientConfig(max_concurrency=5),
    "credentials": "anonymous",
    "list_retry": RetryPolicy(max_attempts=2),
    "download_retry": RetryPolicy(max_attempts=3),
    "download_options": DownloadOptions(compose_threshold=7),
    "hedge_after": 0.5,
    "cache_limit": 1 << 20,
}
PLANNER = {"disable_compose": True, "max_composite_object_size": 1 << 16,
           "compose_threshold": 9}


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
@pytest.mark.parametrize("name", [*OLD_VALUES, "endpoint", "cache_dir", *PLANNER])
def test_each_old_keyword_warns_naming_its_setting_and_still_works(
        emulator: Emulator, bucket: str, tmp_path: Path, cls: Any, name: str) -> None:
    seed(emulator, bucket, 3)
    value = {**OLD_VALUES, **PLANNER, "endpoint": emulator.endpoint,
             "cache_dir": tmp_path / "cache"}[name]
    base = {"endpoint": emulator.endpoint}
    if name == "cache_limit":
        base["cache_dir"] = tmp_path / "cache"
    if name in PLANNER:
        new = DatasetSettings(**base, download_options=DownloadOptions(**{name: value}))
        where = rf"settings=DatasetSettings\(download_options=DownloadOptions\({name}=\.\.\.\)\)"
    else:
        new = DatasetSettings(**{**base, name: value})
        where = rf"settings=DatasetSettings\({name}=\.\.\.\)"
    base_settings = DatasetSettings(**{k: v for k, v in base.items() if k != name})
    url = f"gs://{bucket}/d/"
    with pytest.warns(DeprecationWarning,
                      match=rf"^{cls.__name__}\.from_prefix\({name}=\.\.\.\) is deprecated and "
                            rf"goes in aioflux 0\.3\.0: use {where}$") as caught:
        old = cls.from_prefix(url, settings=base_settings, **{name: value})
    assert [w.filename for w in caught] == [__file__]  # the caller's line
    with pytest.warns(DeprecationWarning, match=rf"^{cls.__name__}\({name}="):
        old_init = cls([], settings=base_settings, **{name: value})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        current = cls.from_prefix(url, settings=new)
    assert seen(old) == seen(old_init) == seen(current)
    assert len(old.objects) == 3


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
def test_data_format_fn_warns_and_is_the_transform(emulator: Emulator, bucket: str,
                                                   cls: Any) -> None:
    data = seed(emulator, bucket, 2)
    settings = DatasetSettings(endpoint=emulator.endpoint)
    with pytest.warns(DeprecationWarning,
                      match=r"data_format_fn=\.\.\.\) is deprecated .* use transform=\.\.\.$"):
        ds = cls.from_prefix(f"gs://{bucket}/d/", settings=settings, data_format_fn=len,
                             order=Order(shuffle=False)) if cls is ObjectIterableDataset else \
            cls.from_prefix(f"gs://{bucket}/d/", settings=settings, data_format_fn=len)
    assert sorted(iter(ds) if cls is ObjectIterableDataset else [ds[0], ds[1]]) == [
        len(body) for body in data.values()]
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidArgument, match="not both"):
        cls([], transform=len, data_format_fn=len)


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
def test_an_old_planner_keyword_of_the_wrong_type_is_refused(cls: Any) -> None:
    with pytest.warns(DeprecationWarning, match=r"disable_compose=\.\.\.\) is deprecated"), \
            pytest.raises(InvalidArgument, match="disable_compose"):
        cls([], disable_compose="yes")


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset, ShardDataset,
                                 ShardMapDataset])
def test_an_unknown_keyword_or_settings_of_another_type_are_refused(cls: Any) -> None:
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'endpont'"):
        cls([], endpont="http://localhost:1")
    with pytest.raises(InvalidArgument, match=r"settings must be"):
        cls([], settings={"endpoint": "http://localhost:1"})
    with pytest.raises(InvalidArgument, match="config"):
        cls([], settings=DatasetSettings(config="fast"))  # type: ignore[arg-type]


def lines(tmp_path: Path) -> Path:
    root = tmp_path / "shards"
    root.mkdir()
    for n in range(2):
        (root / f"part-{n}.jsonl").write_text("".join(f'{{"i": {n * 10 + i}}}\n'
                                                      for i in range(3)))
    return root


@pytest.mark.parametrize("cls", [ShardDataset, ShardMapDataset])
def test_shard_datasets_take_settings_and_their_old_keywords_warn(tmp_path: Path,
                                                                  cls: Any) -> None:
    root = lines(tmp_path)
    cache = tmp_path / "cache"
    settings = DatasetSettings(config=ClientConfig(max_concurrency=2), cache_dir=cache,
                               hedge_after=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = cls.from_prefix(str(root), decode="json", settings=settings)
    got = list(ds) if cls is ShardDataset else [ds[i] for i in range(len(ds))]
    assert sorted(row["i"] for row in got) == [0, 1, 2, 10, 11, 12]
    assert ds._shards.source.config.max_concurrency == 2
    assert ds._shards.hedge_after == 0.5 and ds._shards.disk_cache.directory == str(cache)
    for name, value in (("config", ClientConfig(max_concurrency=2)), ("cache_dir", cache),
                        ("hedge_after", 0.5)):
        with pytest.warns(DeprecationWarning,
                          match=rf"^{cls.__name__}\.from_prefix\({name}=\.\.\.\) is deprecated"
                                rf".*use settings=DatasetSettings\({name}=\.\.\.\)$"):
            old = cls.from_prefix(str(root), decode="json", **{name: value})
        assert old._shards.source.config.max_concurrency == (
            2 if name == "config" else ClientConfig().max_concurrency)
    # Shards are read by ranged GETs under config.retry: the per-object
    # planner's settings would be silently unused.
    for name, value in (("list_retry", RetryPolicy()), ("download_options", DownloadOptions())):
        with pytest.raises(InvalidArgument, match=rf"settings\.{name} is for the per-object"):
            cls.from_prefix(str(root), settings=DatasetSettings(**{name: value}))
    with pytest.raises(TypeError, match="unexpected keyword argument 'list_retry'"):
        cls(str(root), list_retry=RetryPolicy())
