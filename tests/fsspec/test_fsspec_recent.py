"""The fsspec filesystem's memory of recent listings and stats: what it
answers, and that it stays bounded (entries, stats, expired listings)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from aioflux.fsspec import _recent
from aioflux.fsspec._recent import Listings, RecentMetadata


def _file(name: str, size: int = 1) -> dict[str, Any]:
    return {"name": name, "size": size, "type": "file"}


def _recent_metadata(**options: Any) -> RecentMetadata:
    return RecentMetadata(Listings(**{"listings_expiry_time": 10.0, **options}))


def test_a_tree_answers_for_its_files_and_folders() -> None:
    recent = _recent_metadata()
    recent.remember_tree("b/top", [_file("b/top/a"), _file("b/top/d/e/f"), _file("b/top/d/g")])
    assert recent.entry("b/top/a") == _file("b/top/a")
    assert recent.entry("b/top/d")["type"] == "directory"  # type: ignore[index]
    assert recent.entry("b/top/d/e/f") == _file("b/top/d/e/f")
    # The top's own listing does not say whether an object of its name is
    # there too (find remembers what its stat said).
    assert recent.entry("b/top") is None
    assert recent.entry("b/elsewhere") is None  # nobody listed b
    with pytest.raises(FileNotFoundError):
        recent.entry("b/top/d/missing")
    assert sorted(recent.listings) == ["b/top", "b/top/d", "b/top/d/e"]


def test_an_object_beside_a_folder_of_its_name_wins() -> None:
    recent = _recent_metadata()
    recent.remember_listing("b/top", [{"name": "b/top/a", "size": 0, "type": "directory"},
                                      _file("b/top/a", 5)])
    assert recent.entry("b/top/a") == _file("b/top/a", 5)


def test_forgetting_a_name_forgets_its_folders_and_with_tree_what_lies_under() -> None:
    recent = _recent_metadata()
    recent.remember_tree("b/top", [_file("b/top/a"), _file("b/top/d/g")])
    recent.remember_stat("b/top", {"name": "b/top", "size": 0, "type": "directory"})
    recent.remember_stat("b/top/d/g", _file("b/top/d/g"))
    recent.forget("b/top/a")
    assert recent.entry("b/top/a") is None and recent.entry("b/top") is None
    assert recent.entry("b/top/d/g") is not None  # the stat of g: nothing touched it
    recent.forget("b/top", tree=True)
    assert recent.entry("b/top/d/g") is None and not list(recent.listings)


def test_listed_entries_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_recent, "MAX_ENTRIES", 10)
    recent = _recent_metadata()
    recent.remember_tree("b/big", [_file(f"b/big/{i}") for i in range(11)])
    assert not list(recent.listings)  # more than fits: not remembered at all
    recent.remember_listing("b/one", [_file(f"b/one/{i}") for i in range(6)])
    recent.remember_listing("b/two", [_file(f"b/two/{i}") for i in range(3)])
    recent.remember_listing("b/three", [_file(f"b/three/{i}") for i in range(4)])
    assert sorted(recent.listings) == ["b/three", "b/two"]  # the oldest made room
    assert recent.entry("b/one/0") is None
    assert sorted(recent.listings._times) == ["b/three", "b/two"]


def test_a_listing_s_time_goes_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # fsspec's DirCache kept the time of every folder it ever held: a long
    # job listing ever new folders grew it without bound.
    monkeypatch.setattr(_recent, "MAX_ENTRIES", 10)
    recent = _recent_metadata()
    for i in range(100):  # each pushes the oldest out
        recent.remember_listing(f"b/{i}", [_file(f"b/{i}/{j}") for j in range(4)])
    assert sorted(recent.listings._times) == sorted(recent.listings._cache) == ["b/98", "b/99"]
    recent.forget("b/99/0")
    assert list(recent.listings._times) == ["b/98"]
    recent.clear()
    assert not recent.listings._times
    brief = _recent_metadata(listings_expiry_time=0.01)
    brief.remember_listing("b/old", [_file("b/old/a")])
    time.sleep(0.05)  # longer than the expiry
    assert brief.entry("b/old/a") is None
    assert not brief.listings._times


def test_expired_listings_are_dropped_as_new_ones_come(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_recent, "_SWEEP_S", 0.0)
    recent = _recent_metadata(listings_expiry_time=0.01)
    recent.remember_listing("b/old", [_file("b/old/a")])
    time.sleep(0.05)  # longer than the expiry
    recent.remember_listing("b/new", [_file("b/new/a")])
    assert list(recent.listings._cache) == ["b/new"]
    assert recent.entry("b/old/a") is None


def test_stats_stay_bounded_and_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_recent, "_MAX_STATS", 3)
    recent = _recent_metadata(listings_expiry_time=None)
    for i in range(5):
        recent.remember_stat(f"b/{i}", _file(f"b/{i}"))
    assert [recent.entry(f"b/{i}") is not None for i in range(5)] == [False, False] + [True] * 3
    brief = _recent_metadata(listings_expiry_time=0.05)
    brief.remember_stat("b/4", _file("b/4"))
    time.sleep(0.1)  # longer than the expiry
    assert brief.entry("b/4") is None


def test_a_disabled_memory_remembers_nothing() -> None:
    recent = _recent_metadata(use_listings_cache=False)
    recent.remember_tree("b/top", [_file("b/top/a")])
    recent.remember_listing("b/x", [_file("b/x/a")])
    recent.remember_stat("b/s", _file("b/s"))
    assert recent.entry("b/top/a") is None and recent.entry("b/s") is None
