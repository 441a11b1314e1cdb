"""What ``load_state_dict`` refuses: a position is a count of samples of one
epoch order, so a state inside an epoch of another order (``ShardDataset``'s
shards, reads and samples against a sampler's permutation, or another
``shuffle``) is refused naming it, never resumed at the wrong samples; a
state whose numbers are not ints is refused naming the key, never with a
bare ``ValueError`` or ``TypeError``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aioflux import InvalidArgument
from aioflux.torch import (
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
    ResumableBatchSampler,
    ShardDataset,
    ShardMapDataset,
    ShardReads,
)

SHARDS, PER_SHARD, BATCH = 3, 10, 4
TOTAL = SHARDS * PER_SHARD
OBJECTS = 20


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    root = tmp_path / "shards"
    root.mkdir()
    for s in range(SHARDS):
        lines = (json.dumps({"id": s * PER_SHARD + i}) for i in range(PER_SHARD))
        (root / f"part-{s:03d}.jsonl").write_text("".join(f"{line}\n" for line in lines))
    return root


@pytest.fixture
def objects(tmp_path: Path) -> Path:
    root = tmp_path / "objects"
    root.mkdir()
    for i in range(OBJECTS):
        (root / f"{i:03d}.bin").write_bytes(bytes([i]))
    return root


def _reads(root: Path) -> ShardReads:
    return ShardReads(index_dir=root.parent / "idx")


def _stream(root: Path, shuffle: bool = True) -> ShardDataset:
    return ShardDataset.from_prefix(str(root), decode="json", reads=_reads(root),
                                    order=Order(batch_size=BATCH, seed=0, shuffle=shuffle))


def _table(root: Path) -> ShardMapDataset:
    return ShardMapDataset.from_prefix(str(root), decode="json", reads=_reads(root))


def _sampler(table: Any, shuffle: bool = True) -> ResumableBatchSampler:
    return ResumableBatchSampler(table, order=Order(batch_size=BATCH, seed=0, shuffle=shuffle))


def _stream_part(ds: ShardDataset, samples: int) -> tuple[list[int], dict[str, Any]]:
    """The first ``samples`` ids of ``ds``'s epoch and its state there."""
    it: Any = iter(ds)
    seen = [next(it)["id"] for _ in range(samples)]
    state = ds.state_dict()
    it.close()
    return seen, state


def _sampler_part(sampler: ResumableBatchSampler,
                  batches: int) -> tuple[list[int], dict[str, Any]]:
    it = iter(sampler)
    seen = [i for _ in range(batches) for i in next(it)]
    return seen, sampler.state_dict()


def _without_kind(state: dict[str, Any]) -> dict[str, Any]:
    """The state as the release before kinds saved it."""
    if state["order"].keys() <= {"kind", "shuffle"}:  # a sampler's: it saved no "order"
        return {k: v for k, v in state.items() if k != "order"}
    return {**state, "order": {k: v for k, v in state["order"].items() if k != "kind"}}


@pytest.mark.parametrize("older", [False, True])
def test_a_shard_dataset_s_place_is_refused_by_a_sampler_over_its_shards(
        shards: Path, older: bool) -> None:
    # ShardDataset walks shards, reads and samples; the sampler a permutation
    # of the samples: 12 samples of one are other samples of the other (the
    # resume repeated 7 samples and skipped 7 of 30, in silence).
    _, state = _stream_part(_stream(shards), 12)
    assert state["order"]["kind"] == "shards"
    sampler = _sampler(_table(shards))
    with pytest.raises(InvalidArgument, match=r"ResumableBatchSampler\.load_state_dict: the "
                       r"state is a place inside epoch 0 \(12 samples\) of ShardDataset's"):
        sampler.load_state_dict(_without_kind(state) if older else state)
    assert sampler.state_dict()["samples"] == 0 and len(sampler) == -(-TOTAL // BATCH)
    # An epoch's start names no place in any order.
    sampler.load_state_dict({**state, "samples": 0, "epoch": 1})
    assert sampler.epoch == 1


@pytest.mark.parametrize("older", [False, True])
def test_a_sampler_s_place_is_refused_by_a_shard_dataset(shards: Path, older: bool) -> None:
    _, state = _sampler_part(_sampler(_table(shards)), 3)
    assert state["order"] == {"kind": "permutation", "shuffle": True}
    stream = _stream(shards)
    with pytest.raises(InvalidArgument, match=r"ShardDataset\.load_state_dict: the state is "
                       r"a place inside epoch 0 \(12 samples\) of a permutation"):
        stream.load_state_dict(_without_kind(state) if older else state)
    assert sorted(s["id"] for s in stream) == list(range(TOTAL))  # nothing was taken


def test_unshuffled_places_move_between_a_shard_dataset_and_a_sampler(shards: Path) -> None:
    # Unshuffled, both orders are the list order.
    seen, state = _stream_part(_stream(shards, shuffle=False), 12)
    table = _table(shards)
    sampler = _sampler(table, shuffle=False)
    sampler.load_state_dict(state)
    assert seen + [table[i]["id"] for batch in sampler for i in batch] == list(range(TOTAL))
    seen, state = _sampler_part(_sampler(table, shuffle=False), 3)
    stream = _stream(shards, shuffle=False)
    stream.load_state_dict(state)
    assert seen + [s["id"] for s in stream] == list(range(TOTAL))


def test_a_shard_dataset_s_state_without_a_kind_still_resumes_it(shards: Path) -> None:
    seen, state = _stream_part(_stream(shards), 12)
    resumed = _stream(shards)
    resumed.load_state_dict(_without_kind(state))
    rest = [s["id"] for s in resumed]
    assert len(seen + rest) == TOTAL and sorted(seen + rest) == list(range(TOTAL))


def _first(data: bytes) -> Any:
    return data[0]


def _iterable(root: Path, shuffle: bool) -> ObjectIterableDataset:
    return ObjectIterableDataset.from_prefix(str(root), transform=_first,
                                             order=Order(batch_size=BATCH, seed=0,
                                                         shuffle=shuffle))


def _iterable_part(ds: ObjectIterableDataset, samples: int) -> tuple[list[Any], dict[str, Any]]:
    it: Any = iter(ds)
    seen = [next(it) for _ in range(samples)]
    state = ds.state_dict()
    it.close()
    return seen, state


def _part(kind: str, root: Path, shuffle: bool) -> tuple[list[Any], dict[str, Any]]:
    """Two batches of an iterable dataset or a sampler over ``root``'s objects."""
    if kind == "iterable":
        return _iterable_part(_iterable(root, shuffle), 2 * BATCH)
    return _sampler_part(_sampler(ObjectMapDataset.from_prefix(str(root)), shuffle), 2)


def _fresh(kind: str, root: Path, shuffle: bool) -> ObjectIterableDataset | ResumableBatchSampler:
    if kind == "iterable":
        return _iterable(root, shuffle)
    return _sampler(ObjectMapDataset.from_prefix(str(root)), shuffle)


@pytest.mark.parametrize("kind", ["iterable", "sampler"])
@pytest.mark.parametrize("saved", [True, False])
def test_a_place_under_another_shuffle_is_refused(objects: Path, kind: str,
                                                  saved: bool) -> None:
    # 8 of 20 consumed shuffled are other samples than 8 in list order: the
    # resume repeated 7 and skipped 7, in silence.
    _, state = _part(kind, objects, saved)
    assert state["order"]["shuffle"] is saved
    owner = _fresh(kind, objects, not saved)
    with pytest.raises(InvalidArgument, match=rf"{type(owner).__name__}\.load_state_dict: the "
                       rf"state was saved with shuffle={saved}, this .* has "
                       rf"shuffle={not saved}; .*shuffle must stay fixed across a resume"):
        owner.load_state_dict(state)
    # An epoch's start is the same place under either; a state that records
    # no shuffle (an older release's) is taken as it is.
    owner.load_state_dict({**state, "samples": 0})
    older = {k: v for k, v in state.items() if k != "order"}
    _fresh(kind, objects, not saved).load_state_dict(older)


@pytest.mark.parametrize("shuffle", [True, False])
def test_places_move_between_an_iterable_dataset_and_a_sampler(objects: Path,
                                                               shuffle: bool) -> None:
    # Both walk the same permutation of the same objects.
    seen, state = _part("iterable", objects, shuffle)
    table = ObjectMapDataset.from_prefix(str(objects), transform=_first)
    sampler = _sampler(table, shuffle)
    sampler.load_state_dict(state)
    rest = [table[i] for batch in sampler for i in batch]
    assert sorted(seen + rest) == list(range(OBJECTS)) and len(seen + rest) == OBJECTS


_BAD = [
    ("samples", None), ("samples", "2x"), ("samples", 2.0), ("samples", True),
    ("epoch", None), ("epoch", "one"), ("seed", "0"), ("global_batch_size", "4"),
    ("global_batch_size", 0), ("order", 3), ("order", {"kind": 1, "shuffle": True}),
    ("order", {"kind": "permutation", "shuffle": "yes"}), ("worker", 5),
    ("worker", {"id": 0, "num_workers": 1}),
    ("worker", {"id": 0, "num_workers": 1, "epoch": 0, "start": None, "next_batch": 0}),
]


def _owners(objects: Path, shards: Path) -> dict[str, Callable[[], Any]]:
    return {
        "ObjectIterableDataset": lambda: _iterable(objects, True),
        "ResumableBatchSampler": lambda: _fresh("sampler", objects, True),
        "ShardDataset": lambda: _stream(shards),
    }


@pytest.mark.parametrize("owner_name", ["ObjectIterableDataset", "ResumableBatchSampler",
                                        "ShardDataset"])
@pytest.mark.parametrize(("key", "value"), _BAD)
def test_a_state_whose_values_are_not_ints_is_refused_naming_the_key(
        objects: Path, shards: Path, owner_name: str, key: str, value: object) -> None:
    owner = _owners(objects, shards)[owner_name]()
    state = {**owner.state_dict(), key: value}
    named = "order" if key == "order" else key
    with pytest.raises(InvalidArgument, match=rf"{owner_name}\.load_state_dict: .*{named}"):
        owner.load_state_dict(state)
    assert owner.state_dict()["samples"] == 0 and owner.epoch == 0


@pytest.mark.parametrize(("name", "value"), [("samples_per_read", "x"),
                                             ("shuffle_window", None),
                                             ("samples_per_read", 0)])
def test_a_shard_state_s_order_settings_must_be_ints(shards: Path, name: str,
                                                     value: object) -> None:
    for shuffle in (True, False):
        stream = _stream(shards, shuffle)
        state = stream.state_dict()
        state["order"][name] = value
        with pytest.raises(InvalidArgument, match=rf"ShardDataset\.load_state_dict: the "
                           rf"state's order\[\"{name}\"\] must be"):
            stream.load_state_dict(state)
