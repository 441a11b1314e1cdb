"""The datasets over http(s) URLs served by nginx: ShardDataset over a
brace pattern of tar shards (every sample once, byte-exact; a mid-epoch
resume at another worker count), ObjectMapDataset over a list of URLs, and the
CLI's cat / stat / cp from http (issue 51)."""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from aioflux import ClientConfig, RetryPolicy
from aioflux.cli import main
from aioflux.torch import DatasetSettings, ObjectMapDataset, Order, ShardDataset, ShardReads
from tests.servers.nginx import Nginx, running_nginx
from tests.torch._shards_util import make_samples, tar_shard

FAST = RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0)
COUNTS = (5, 7, 4)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Nginx, dict[str, dict[str, bytes]]]]:
    root = tmp_path_factory.mktemp("http-shards")
    (root / "shards").mkdir()
    expected: dict[str, dict[str, bytes]] = {}
    for n, count in enumerate(COUNTS):
        samples = make_samples(f"s{n}/", count)
        (root / "shards" / f"train-{n:03d}.tar").write_bytes(tar_shard(samples))
        expected.update(samples)
    (root / "files").mkdir()
    for n in range(6):
        (root / "files" / f"f{n}.bin").write_bytes(os.urandom(1000 + n))
    with running_nginx(root) as server:
        yield server, expected


def _dataset(server: Nginx, tmp_path: Path, *, reads: ShardReads | None = None,
             **kw: Any) -> ShardDataset:
    return ShardDataset(f"{server.endpoint}/shards/train-{{000..002}}.tar",
                        settings=DatasetSettings(config=ClientConfig(retry=FAST)),
                        reads=dataclasses.replace(reads or ShardReads(),
                                                  index_dir=tmp_path / "idx"), **kw)


def _keys(batches: list[list[dict[str, Any]]]) -> list[str]:
    return [s["__key__"] for batch in batches for s in batch]


def test_shard_dataset_over_a_brace_pattern(served: tuple[Nginx, dict[str, dict[str, bytes]]],
                                            tmp_path: Path) -> None:
    server, expected = served
    ds = _dataset(server, tmp_path, order=Order(batch_size=2))
    assert ds.counts == list(COUNTS)
    got = list(ds)
    assert sorted(s["__key__"] for s in got) == sorted(expected)
    for sample in got:
        assert sample["jpg"] == expected[sample["__key__"]]["jpg"]


@pytest.mark.parametrize("workers", [0, 2])
def test_shard_dataset_resumes_mid_epoch_over_http(
        served: tuple[Nginx, dict[str, dict[str, bytes]]], tmp_path: Path,
        workers: int) -> None:
    server, expected = served
    opts: dict[str, Any] = {"order": Order(batch_size=2, seed=3),
                            "reads": ShardReads(samples_per_read=3)}
    ds = _dataset(server, tmp_path, **opts)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=0, collate_fn=list)
    before: list[list[dict[str, Any]]] = []
    state: dict[str, Any] = {}
    for step, batch in enumerate(ds.track(loader), 1):
        before.append(batch)
        if step == 3:
            state = ds.state_dict()
            break
    again = _dataset(server, tmp_path, **opts)
    again.load_state_dict(state)
    loader = torch.utils.data.DataLoader(again, batch_size=2, num_workers=workers,
                                         collate_fn=list,
                                         multiprocessing_context="fork" if workers else None)
    after = list(again.track(loader))
    seen = collections.Counter(_keys(before) + _keys(after))
    assert set(seen) == set(expected) and max(seen.values()) == 1


def test_map_dataset_over_a_list_of_urls(served: tuple[Nginx, dict[str, dict[str, bytes]]],
                                         ) -> None:
    server = served[0]
    urls = [f"{server.endpoint}/files/f{n}.bin" for n in range(6)]
    ds = ObjectMapDataset.from_objects(urls,
                                       settings=DatasetSettings(config=ClientConfig(retry=FAST)))
    assert len(ds) == 6
    for n in range(6):
        sample = ds[n]
        data = sample if isinstance(sample, bytes) else sample[1]
        assert data == (server.root / "files" / f"f{n}.bin").read_bytes()


def test_cli_cat_stat_cp_from_http(served: tuple[Nginx, dict[str, dict[str, bytes]]],
                                   tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
                                   ) -> None:
    server = served[0]
    url = f"{server.endpoint}/files/f3.bin"
    want = (server.root / "files" / "f3.bin").read_bytes()
    assert main(["cat", url]) == 0
    assert capsysbinary.readouterr().out == want
    assert main(["stat", url]) == 0
    assert str(len(want)).encode() in capsysbinary.readouterr().out
    assert main(["cp", url, os.fspath(tmp_path / "copy.bin")]) == 0
    assert (tmp_path / "copy.bin").read_bytes() == want
    assert main(["ls", f"{server.endpoint}/files/"]) != 0
    assert b"brace pattern" in capsysbinary.readouterr().err


def test_map_dataset_with_a_disk_cache_and_hedged_reads(
        served: tuple[Nginx, dict[str, dict[str, bytes]]], tmp_path: Path) -> None:
    """The second pass comes from the disk cache (the files are gone from
    the server by then); every read hedged after a microsecond, the losers cancelled."""
    server = served[0]
    folder = server.root / "cached"
    folder.mkdir()
    want = [os.urandom(5000 + n) for n in range(4)]
    for n, data in enumerate(want):
        (folder / f"c{n}.bin").write_bytes(data)
    urls = [f"{server.endpoint}/cached/c{n}.bin" for n in range(4)]
    ds = ObjectMapDataset.from_objects(urls,
                                       settings=DatasetSettings(config=ClientConfig(retry=FAST),
                                                                cache_dir=tmp_path / "cache",
                                                                hedge_after=1e-6))
    first = [ds[n] for n in range(4)]
    for path in folder.iterdir():
        path.unlink()
    second = [ds[n] for n in range(4)]
    for got in (first, second):
        assert [s if isinstance(s, bytes) else s[1] for s in got] == want
