"""Under DDP with ``listing="rank0", publish_indexes=True`` the ranks share the
indexing of shards none could count: each streams its share and publishes
its sidecars, the counts are gathered, rank 0 writes the manifest. Neither
one rank nor every rank streams every shard (a real 2-process gloo group)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aioflux._core.concurrency.portal import call
from aioflux._engines.shards._manifest import MANIFEST_NAME, decode_manifest
from aioflux.local import LocalStore
from tests.torch._two_ranks import Ranks, run_job

COUNTS = [5, 3, 7, 4, 6, 3]  # 28: the two ranks split them without padding
NAMES = [f"p{n}.jsonl" for n in range(len(COUNTS))]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ranks, Path]:
    base = tmp_path_factory.mktemp("index-share")
    root = base / "root"
    for name, count in zip(NAMES, COUNTS, strict=True):
        body = b"".join(b'{"i": %d}\n' % i for i in range(count))
        path = root / name
        call(LocalStore().write(path.parts[1], "/".join(path.parts[2:]), body))
    return run_job("tests.torch._index_share_worker", base, root), root


def test_each_rank_indexes_its_share_and_both_hold_every_count(
        ranks: tuple[Ranks, Path]) -> None:
    (zero, one), root = ranks
    streamed = [zero["first"]["streamed"], one["first"]["streamed"]]
    assert all(streamed), streamed  # both ranks worked...
    assert sorted(streamed[0] + streamed[1]) == NAMES  # ...each shard once, across them
    assert zero["first"]["counts"] == one["first"]["counts"] == COUNTS
    # The shards the other rank indexed are read from its published sidecars.
    assert zero["first"]["streamed_reading"] == one["first"]["streamed_reading"] == []
    read = sorted(zero["first"]["read"] + one["first"]["read"])
    assert read == sorted(i for c in COUNTS for i in range(c))
    entries = decode_manifest((root / MANIFEST_NAME).read_bytes(), "m")
    assert {name: e.samples for name, e in entries.items()} == dict(zip(NAMES, COUNTS,
                                                                       strict=True))
    assert all((root / f"{name}.idx").exists() for name in NAMES)


def test_a_second_dataset_counts_from_the_manifest_and_streams_nothing(
        ranks: tuple[Ranks, Path]) -> None:
    (zero, one), _ = ranks
    for seen in (zero["again"], one["again"]):
        assert seen["streamed"] == [] and seen["streamed_reading"] == []
        assert seen["counts"] == COUNTS
