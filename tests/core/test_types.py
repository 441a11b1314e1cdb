"""ObjectInfo built by the listing hot path: same records, shared empty metadata."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from aioflux._core.records.types import NO_METADATA, ObjectInfo, objects_from_json

ITEMS = [
    {"name": "a/1", "size": "3", "generation": "7", "crc32c": "AAAAAQ=="},
    {"name": "a/2", "size": "4", "generation": "8", "crc32c": "AAAAAg==",
     "metadata": {"k": "v"}, "md5Hash": "x"},
]


def test_fast_path_builds_the_same_records_as_from_json() -> None:
    fast = objects_from_json("b", ITEMS)
    assert fast == [ObjectInfo.from_json("b", item) for item in ITEMS]
    assert fast[0] == ObjectInfo("b", "a/1", 3, generation=7, crc32c=1)
    assert fast[1].metadata == {"k": "v"} and fast[1].md5 == "x"


def test_objects_without_metadata_share_one_read_only_empty_dict() -> None:
    first, second = objects_from_json("b", ITEMS[:1] * 2)
    assert first.metadata is second.metadata is NO_METADATA
    assert ObjectInfo("b", "n", 1).metadata is NO_METADATA
    with pytest.raises(TypeError, match="read-only"):
        first.metadata["k"] = "v"
    with pytest.raises(TypeError):
        first.metadata.update(k="v")
    assert NO_METADATA == {}  # nothing leaked in


def test_shared_metadata_survives_pickle_copy_and_json() -> None:
    obj = objects_from_json("b", ITEMS[:1])[0]
    assert pickle.loads(pickle.dumps(obj)).metadata is NO_METADATA
    assert copy.deepcopy(obj).metadata is NO_METADATA
    assert json.loads(json.dumps(obj._asdict()))["metadata"] == {}
    assert dict(obj.metadata) == {}


def test_records_are_immutable_and_replace_makes_a_changed_copy() -> None:
    obj = objects_from_json("b", ITEMS[:1])[0]
    with pytest.raises(AttributeError):
        obj.size = 5  # type: ignore[misc]
    bigger = obj.replace(size=5)
    assert (bigger.size, obj.size) == (5, 3)
    assert bigger.name == obj.name and bigger.metadata is NO_METADATA
    with pytest.raises(ValueError, match="sizes"):
        obj.replace(sizes=5)
