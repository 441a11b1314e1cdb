"""``ObjectMapDataset.from_objects(listing=...)``: every DDP rank holds the same given
objects at the same versions (rank 0's stats, or checked), with a real
2-process gloo group; without a process group the option just stats.

The 2-rank job (tests/torch/_objects_listing_worker.py) runs once for the
module; each test asserts on what the ranks recorded. Rank 0 replaces an
object right after its own stats, and rank 1 starts only once that is on
disk, so the run with the default listing proves the scenarios have teeth:
there rank 1 holds another size and version of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aioflux import Conflict, InvalidArgument, NotFound, ObjectInfo
from aioflux._core.concurrency.portal import call
from aioflux.local import LocalStore
from aioflux.torch import ObjectMapDataset
from aioflux.torch.data._rank_listing import Listing, _mismatch, objects_summary, objects_target
from tests.torch._objects_listing_worker import NAMES
from tests.torch._two_ranks import Ranks, run_job


def _put(path: Path, body: bytes) -> None:
    call(LocalStore().write(path.parts[1], "/".join(path.parts[2:]), body))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Ranks:
    """What rank 0 and rank 1 recorded, per scenario."""
    base = tmp_path_factory.mktemp("objects-listing")
    for name in NAMES:
        _put(base / "root" / "o" / name, name.encode())
    return run_job("tests.torch._objects_listing_worker", base, base / "root")


def test_default_lets_a_replaced_object_split_the_ranks(ranks: Ranks) -> None:
    # The defect the option fixes: every rank stats every URL (rank 1 too),
    # and an object replaced in between is another size and version there.
    zero, one = (r["objects_each"] for r in ranks)
    assert zero["sizes"] == [3] * 6
    assert one["sizes"] == [3, 3, 3, 30, 3, 3]
    assert one["versions"][3] != zero["versions"][3]
    assert one["requests"] == {"stat": 6}


def test_rank0_stats_once_and_every_rank_gets_what_it_found(ranks: Ranks) -> None:
    zero, one = (r["objects_rank0"] for r in ranks)
    assert "error" not in one, one.get("error")  # its store refuses every request
    assert one["requests"] == {}  # rank 1 made no request at all
    assert zero["requests"]["stat"] == 6
    assert one["names"] == zero["names"]
    # Rank 0's version of 004, not the 40 bytes it wrote after its stats
    # (003 is the 30 bytes the first scenario left).
    assert one["sizes"] == zero["sizes"] == [3, 3, 3, 30, 3, 3]
    assert one["versions"] == zero["versions"]
    assert len(one["read"]) == 6  # rank 1 reads the objects it was handed


def test_check_raises_conflict_on_every_rank_naming_the_difference(ranks: Ranks) -> None:
    for seen in (r["objects_check"] for r in ranks):
        error = seen.get("error", {})
        assert error.get("type") == Conflict.__name__, seen
        message = error["message"]
        assert "found different versions or sizes of the objects" in message
        assert "rank 0: 6 objects" in message and "rank 1: 6 objects" in message
        assert "listing='rank0'" in message
        assert message.startswith("stat file://")
        assert error["operation"] == "stat"
        assert error["name"].endswith("/o/")  # the folder the given objects are in
    zero, one = (r["objects_check_unchanged"] for r in ranks)
    assert "error" not in zero and "error" not in one
    assert one["versions"] == zero["versions"] and one["sizes"] == zero["sizes"]


def test_a_missing_object_on_rank_0_raises_not_found_on_every_rank(ranks: Ranks) -> None:
    zero, one = (r["objects_rank0_missing"] for r in ranks)
    assert zero["error"]["type"] == one["error"]["type"] == NotFound.__name__
    assert one["error"]["message"] == zero["error"]["message"]
    assert one["error"]["name"].endswith("o/missing")
    assert any("raised on rank 0" in note for note in one["error"]["notes"])
    assert one["requests"] == {}  # rank 1 did not stat to find out


def test_checked_a_failure_on_rank_1_raises_on_rank_0_too(ranks: Ranks) -> None:
    zero, one = (r["objects_check_rank1_denied"] for r in ranks)
    assert "error" in zero, zero
    assert zero["error"]["type"] == one["error"]["type"] == "PermissionDenied"
    assert any("raised on rank 1" in note for note in zero["error"]["notes"])
    assert zero["error"]["name"] == "o/001"


# -- without a process group -------------------------------------------------

@pytest.fixture
def no_world(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)


@pytest.mark.usefixtures("no_world")
@pytest.mark.parametrize("listing", ["each", "rank0", "check"])
def test_without_a_process_group_the_option_stats_as_the_default(
        tmp_path: Path, listing: Listing) -> None:
    for i in range(4):
        (tmp_path / f"{i}").write_bytes(bytes([i]) * (i + 1))
    given = ObjectInfo("given", "x", 7, 1, scheme="file")
    urls: list[str | ObjectInfo] = [str(tmp_path / f"{i}") for i in range(4)]
    ds = ObjectMapDataset.from_objects([*urls[:2], given, *urls[2:]], listing=listing)
    assert [o.size for o in ds.objects] == [1, 2, 7, 3, 4]
    assert ds.objects[2] == given  # kept as given, never stat-ed
    assert [ds[i] for i in (0, 1, 3, 4)] == [bytes([i]) * (i + 1) for i in range(4)]
    with pytest.raises(NotFound):
        ObjectMapDataset.from_objects([str(tmp_path / "missing")], listing=listing)


@pytest.mark.usefixtures("no_world")
@pytest.mark.parametrize("bad", ["rank1", "", True, None])
def test_another_listing_is_refused_before_any_request(tmp_path: Path, bad: object) -> None:
    missing = str(tmp_path / "nothing")  # a request would be NotFound
    with pytest.raises(InvalidArgument, match="listing must be 'each', 'rank0' or 'check'"):
        ObjectMapDataset.from_objects([missing], listing=bad)  # type: ignore[arg-type]


def test_a_stat_mismatch_names_the_operation_and_the_objects_folder() -> None:
    objects = [ObjectInfo("my-bucket", f"train/{i}", i, 100 + i) for i in range(3)]
    same = objects_summary(objects)
    rewritten = objects_summary([*objects[:2], objects[2]._replace(size=9)])
    target = objects_target("gs", [(o.bucket, o.name) for o in objects])
    assert target == "gs://my-bucket/train/"
    error = _mismatch("ObjectMapDataset.from_objects", target, [same, rewritten], "objects",
                      operation="stat")
    assert (error.operation, error.bucket, error.name) == ("stat", "my-bucket", "train/")
    assert str(error).startswith("stat gs://my-bucket/train/: ObjectMapDataset.from_objects: the "
                                 "ranks found different versions or sizes")


def test_a_target_names_one_object_a_shared_folder_or_none() -> None:
    assert objects_target("gs", [("my-bucket", "a/b")]) == "gs://my-bucket/a/b"
    assert objects_target("gs", [("my-bucket", "a/bc/1"), ("my-bucket", "a/bd/2")]) == \
        "gs://my-bucket/a/"  # a folder, never part of a name
    assert objects_target("gs", [("my-bucket", "a/b"), ("my-bucket", "a/b/c")]) == \
        "gs://my-bucket/a/"
    assert objects_target("gs", [("my-bucket", "x"), ("other-b", "x")]) == \
        "gs:// (2 objects in 2 buckets)"
