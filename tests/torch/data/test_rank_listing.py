"""``listing=``: every DDP rank holds one listing (rank 0's, or checked), with a
real 2-process gloo group; and without a process group the option just lists.

The 2-rank job (tests/torch/_rank_listing_worker.py) runs once for the
module; each test asserts on what the ranks recorded. Rank 0 changes the
folder inside its own listing, and rank 1 starts only once the change is
on disk, so the runs with the default listing prove the scenarios have
teeth: there rank 1 sees another listing, and another batch count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aioflux import Conflict, InvalidArgument, NotFound, ObjectInfo
from aioflux._core.concurrency.portal import call
from aioflux.local import LocalStore
from aioflux.torch import (
    ObjectIterableDataset,
    ObjectMapDataset,
    ShardDataset,
    ShardMapDataset,
    ShardReads,
)
from aioflux.torch.data._rank_listing import Listing, _mismatch, objects_summary
from tests.torch._two_ranks import Ranks, run_job
from tests.torch.conftest import Where

INITIAL = [f"{i:03d}" for i in range(10)]



def _put(path: Path, body: bytes) -> None:
    call(LocalStore().write(path.parts[1], "/".join(path.parts[2:]), body))


def _seed(root: Path) -> None:
    for name in INITIAL:
        _put(root / "d" / name, name.encode())
    for n in range(3):
        _put(root / "s" / f"part-{n}.jsonl", b'{"x": 0}\n' * 5)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Ranks:
    """What rank 0 and rank 1 recorded, per scenario."""
    base = tmp_path_factory.mktemp("rank-listing")
    _seed(base / "root")
    return run_job("tests.torch._rank_listing_worker", base, base / "root")


def _names(seen: dict[str, Any]) -> list[str]:
    return [n.rsplit("/d/", 1)[1] for n in seen["names"]]


def test_default_listing_lets_a_changed_folder_split_the_ranks(ranks: Ranks) -> None:
    # The defect the option fixes: each rank lists, the folder changed in
    # between, and the ranks hold different lists and batch counts.
    zero, one = (r["iterable_each"] for r in ranks)
    assert _names(zero) == INITIAL
    assert _names(one) == [*INITIAL, "iterable_each"]
    assert (zero["len"], one["len"]) == (5, 6)  # DDP would wait forever at step 6
    assert one["requests"].get("list", 0) > 0
    zero, one = (r["shards_each"] for r in ranks)
    assert (zero["counts"], one["counts"]) == ([5, 5, 5], [5, 5, 5, 5])
    zero, one = (r["shardmap_each"] for r in ranks)
    assert (zero["counts"], one["counts"]) == ([5, 5, 5], [5, 7, 5])


@pytest.mark.parametrize("scenario", ["iterable_rank0", "map_rank0"])
def test_rank0_lists_once_and_every_rank_gets_its_listing(ranks: Ranks, scenario: str) -> None:
    zero, one = (r[scenario] for r in ranks)
    assert "error" not in one, one.get("error")  # its store refuses every request
    assert one["names"] == zero["names"]
    assert scenario not in _names(one)  # the object rank 0 added after its listing
    assert one["len"] == zero["len"]
    assert zero["requests"].get("list", 0) > 0
    assert one["requests"] == {}  # rank 1 made no request at all
    if scenario == "map_rank0":
        assert one["read"] == _names(zero)  # rank 1 reads the objects it was handed


def test_rank0_resolves_and_indexes_the_shards_for_every_rank(ranks: Ranks) -> None:
    # From a folder: rank 0 lists and indexes; a shard added after its listing
    # is in neither rank's list.
    zero, one = (r["shards_rank0"] for r in ranks)
    assert "error" not in one, one.get("error")
    assert one["counts"] == zero["counts"] == [5, 5, 5, 5]
    assert zero["requests"].get("list", 0) > 0 and zero["requests"].get("read", 0) > 0
    assert one["requests"] == {}
    # From a brace pattern: rank 0 stats and indexes; a shard rewritten after
    # its indexing keeps rank 0's count on rank 1 too.
    zero, one = (r["shardmap_rank0"] for r in ranks)
    assert "error" not in one, one.get("error")
    assert one["counts"] == zero["counts"] == [5, 7, 5]
    assert zero["requests"].get("stat", 0) > 0
    assert one["requests"] == {}


def test_check_raises_conflict_on_every_rank_naming_the_difference(ranks: Ranks) -> None:
    for scenario, noun, counts in (("map_check", "objects", (13, 14)),
                                   ("shardmap_check", "shards", (3, 3))):
        for seen in (r[scenario] for r in ranks):
            assert seen.get("error", {}).get("type") == Conflict.__name__, seen
            message = seen["error"]["message"]
            assert f"rank 0: {counts[0]} {noun}" in message
            assert f"rank 1: {counts[1]} {noun}" in message
            # The option as the dataset takes it.
            option = "reads=ShardReads(listing='rank0')" if noun == "shards" \
                else "with listing='rank0'"
            assert option in message
    zero, one = (r["map_check_unchanged"] for r in ranks)
    assert "error" not in zero and one["names"] == zero["names"]


@pytest.mark.parametrize(("scenario", "error"), [
    ("map_rank0_denied", "PermissionDenied"),
    ("iterable_rank0_empty", "NotFound"),
    ("shards_rank0_bad_format", "ShardFormatError"),
])
def test_a_failure_on_rank_0_raises_its_type_on_every_rank(ranks: Ranks, scenario: str,
                                                           error: str) -> None:
    zero, one = (r[scenario] for r in ranks)
    assert zero["error"]["type"] == one["error"]["type"] == error
    assert one["error"]["message"] == zero["error"]["message"]
    assert any("raised on rank 0" in note for note in one["error"]["notes"])
    assert one["requests"] == {}  # rank 1 did not list, stat or index to find out


def test_a_failure_that_does_not_pickle_arrives_as_a_storage_error(ranks: Ranks) -> None:
    zero, one = (r["map_rank0_unpicklable"] for r in ranks)
    assert zero["error"]["type"] == "Unpicklable"
    assert one["error"]["type"] == "StorageError"
    assert "failed on rank 0" in one["error"]["message"]
    assert "Unpicklable: odd failure" in one["error"]["message"]


def test_checked_a_failure_on_rank_1_raises_on_rank_0_too(ranks: Ranks) -> None:
    zero, one = (r["map_check_rank1_denied"] for r in ranks)
    assert "error" in zero, zero
    assert zero["error"]["type"] == one["error"]["type"] == "PermissionDenied"
    assert any("raised on rank 1" in note for note in zero["error"]["notes"])


# -- without a process group -------------------------------------------------

@pytest.fixture
def no_world(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)


@pytest.mark.usefixtures("no_world")
@pytest.mark.parametrize("listing", ["rank0", "check"])
def test_without_a_process_group_the_option_lists_as_the_default(
        where: Where, listing: Listing) -> None:
    for i in range(6):
        where.put(f"d/{i}", bytes([i]) * (i + 1))
    for n in range(2):
        where.put(f"s/p-{n}.jsonl", b'"a"\n' * (n + 2))
    folder, settings = where.url("d/"), where.settings()
    default = ObjectMapDataset.from_prefix(folder, settings=settings)
    chosen = ObjectMapDataset.from_prefix(folder, listing=listing, settings=settings)
    assert list(chosen.objects) == list(default.objects)
    assert [chosen[i] for i in range(6)] == [bytes([i]) * (i + 1) for i in range(6)]
    stream = ObjectIterableDataset.from_prefix(folder, listing=listing, settings=settings)
    assert list(stream.objects) == list(default.objects)
    assert sorted(stream) == sorted(chosen[i] for i in range(6))
    shards = ShardDataset.from_prefix(where.url("s/"), format="lines", decode="json",
                                      reads=ShardReads(cache_indexes=False, listing=listing),
                                      settings=settings)
    assert shards.counts == [2, 3] and sorted(shards) == ["a"] * 5
    table = ShardMapDataset(where.url("s/p-{0..1}.jsonl"), format="lines", decode="json",
                            reads=ShardReads(cache_indexes=False, listing=listing),
                            settings=settings)
    assert table.counts == [2, 3] and table[4] == "a"


@pytest.mark.usefixtures("no_world")
def test_without_a_process_group_a_listing_error_is_raised_as_it_is(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no objects in that folder"):
        ObjectMapDataset.from_prefix(str(tmp_path / "nothing"), listing="rank0")


def test_a_world_in_the_environment_without_a_process_group_warns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torchrun set WORLD_SIZE, but the dataset is made before init_process_group:
    # the option cannot work, and it says so (this rank still lists).
    monkeypatch.setenv("WORLD_SIZE", "2")
    (tmp_path / "a").write_bytes(b"x")
    with pytest.warns(RuntimeWarning, match="needs torch.distributed initialized"):
        ds = ObjectMapDataset.from_prefix(str(tmp_path), listing="rank0")
    assert len(ds) == 1


@pytest.mark.usefixtures("no_world")
@pytest.mark.parametrize("bad", ["rank1", "", True, None])
def test_another_listing_is_refused_before_any_request(tmp_path: Path, bad: object) -> None:
    missing = str(tmp_path / "nothing")  # a request would be NotFound
    makers = [
        lambda: ObjectMapDataset.from_prefix(missing, listing=bad),  # type: ignore[arg-type]
        lambda: ObjectIterableDataset.from_prefix(missing, listing=bad),  # type: ignore[arg-type]
        lambda: ShardDataset.from_prefix(missing,
                                         reads=ShardReads(listing=bad)),  # type: ignore[arg-type]
        lambda: ShardMapDataset.from_prefix(missing,
                                            reads=ShardReads(listing=bad)),
                                                              # type: ignore[arg-type]
        lambda: ShardDataset(missing + "/x.tar",
                             reads=ShardReads(listing=bad)),  # type: ignore[arg-type]
        lambda: ShardMapDataset(missing + "/x.tar",
                                reads=ShardReads(listing=bad)),  # type: ignore[arg-type]
    ]
    for make in makers:
        with pytest.raises(InvalidArgument, match="listing must be 'each', 'rank0' or 'check'"):
            make()


def test_a_mismatch_groups_the_ranks_and_names_the_folder() -> None:
    objects = [ObjectInfo("my-bucket", f"train/{i}", i, 100 + i) for i in range(3)]
    same, other = objects_summary(objects), objects_summary(objects[:2])
    rewritten = objects_summary([*objects[:2], objects[2]._replace(generation=7)])
    assert rewritten[0] == same[0] and rewritten != same  # a new version counts too
    error = _mismatch("ObjectMapDataset.from_prefix", "gs://my-bucket/train/",
                      [same, same, other, same, same, rewritten], "objects")
    assert isinstance(error, Conflict)
    assert (error.operation, error.bucket, error.name) == ("list", "my-bucket", "train/")
    message = str(error)
    assert f"ranks 0-1, 3-4: 3 objects (crc32c {same[1]:08x})" in message
    assert "rank 2: 2 objects" in message and "rank 5: 3 objects" in message
