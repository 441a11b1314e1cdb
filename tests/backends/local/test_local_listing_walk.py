"""A local listing walks the tree as pages are taken, in name order.

It used to walk the whole tree and sort every name before its first page:
a folder of millions of files in many directories held them all, and
nothing was listed until the walk ended. Now it holds the sorted entries of
the directories on its way down, and must still list exactly what the
whole-tree scan lists, in the same order.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioflux import ClientConfig, LocalStore
from aioflux._core.checks.pages import ListingCheck
from aioflux._core.memory.columns import rfc3339
from aioflux._core.records.types import NO_METADATA, ObjectInfo
from aioflux._core.records.urls import parse_url
from aioflux.local import _files, _listing, _store

# Characters around "/" in code-point order ("-" "." "/" "0"), so that a
# directory's names and its siblings' interleave in every way they can.
PART = st.text(alphabet="-.0a\u00e9", min_size=1, max_size=3).filter(lambda p: p not in (".", ".."))
TREE = st.lists(st.lists(PART, min_size=1, max_size=3), min_size=1, max_size=25)


def _make(root: Path, paths: list[list[str]]) -> None:
    for parts in paths:
        target = root.joinpath(*parts)
        if any(p.is_file() for p in list(target.parents)[:len(parts) - 1]) or target.is_dir():
            continue  # a file already stands where this path needs a directory
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"x")


def _bucket_of(root: Path) -> tuple[str, str]:
    bucket, prefix = parse_url(str(root) + "/")
    return bucket, prefix


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREE, start=st.one_of(st.none(), PART), end=st.one_of(st.none(), PART),
       sub=st.sampled_from(["", "a", "a/", "-", "0"]))
def test_the_walk_lists_what_the_scan_lists_in_order(tmp_path_factory: pytest.TempPathFactory,
                                                     tree: list[list[str]], start: str | None,
                                                     end: str | None, sub: str) -> None:
    root = tmp_path_factory.mktemp("walk") / "objects"
    root.mkdir()
    _make(root, tree)
    bucket, prefix = _bucket_of(root)
    prefix += sub
    start_offset = None if start is None else prefix + start
    end_offset = None if end is None else prefix + end
    scanned, _ = _listing.scan(bucket, prefix, None, start_offset, end_offset)
    walked = list(_listing.walk(bucket, prefix, start_offset, end_offset))
    assert walked == scanned
    assert [n for n, _ in walked] == sorted(n for n, _ in walked)


async def test_the_first_page_comes_before_the_walk_ends(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "objects"
    for d in range(40):
        (root / f"d{d:02d}").mkdir(parents=True)
        for f in range(10):
            (root / f"d{d:02d}" / f"f{f}").write_bytes(b"x")
    read: list[str] = []
    scandir = os.scandir

    def counted(path: str) -> object:
        read.append(path)
        return scandir(path)

    monkeypatch.setattr(_listing.os, "scandir", counted)
    bucket, prefix = _bucket_of(root)
    store = LocalStore(ClientConfig())
    pages = store.list(bucket, prefix, page_size=10)
    first = await pages.__anext__()
    assert [o.name.rsplit("/", 2)[-2:] for o in first.objects] == [
        ["d00", f"f{f}"] for f in range(10)]
    # The bucket's folder, d00, and d01 (the look-ahead for more): not the
    # 40 directories the whole-tree walk read before any page.
    assert len(read) <= 3, read
    names = [o.name for o in first.objects]
    async for page in pages:
        names += [o.name for o in page.objects]
    assert len(names) == 400 and names == sorted(names)
    assert len(read) == 41


async def test_the_walks_pages_keep_the_listing_promise(tmp_path: Path) -> None:
    # Every page but the last carried the token "next": a token given twice
    # in one listing is what _core/checks/pages.py refuses as a listing that does
    # not move forward.
    root = tmp_path / "objects"
    for d in range(3):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(3):
            (root / f"d{d}" / f"f{f}").write_bytes(b"x")
    bucket, prefix = _bucket_of(root)
    check = ListingCheck("file", bucket, prefix, None, None)
    pages = [check.page(p) async for p in LocalStore(ClientConfig()).list(
        bucket, prefix, page_size=2)]
    assert [len(p.objects) for p in pages] == [2, 2, 2, 2, 1]
    tokens = [p.next_page_token for p in pages]
    assert tokens[-1] is None and len(set(tokens[:-1])) == 4


def test_a_file_as_an_object_is_the_record_its_fields_name(tmp_path: Path) -> None:
    # object_info fills the named tuple positionally (one tuple.__new__):
    # every field must still land where its name says, a recorded crc32c
    # and a time at or before the epoch (generation 2**63 - 1 + mtime) too.
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    for mtime_ns, crc in ((1_700_000_000_123_456_789, None), (0, 7), (-5_000, None)):
        os.utime(path, ns=(mtime_ns, mtime_ns))
        st = os.stat(path)
        got = _files.object_info("tmp", "x/f", st, crc)
        assert got == ObjectInfo("tmp", "x/f", 3, _files.generation_of(st), crc,
                                 updated=rfc3339(mtime_ns), scheme="file")
        assert (got.size, got.crc32c, got.scheme, got.md5) == (3, crc, "file", None)
        assert got.metadata == {} and got.metadata is NO_METADATA
        assert got.generation == (mtime_ns if mtime_ns > 0 else 2**63 - 1 + mtime_ns)


@pytest.mark.parametrize(("waiting", "want"), [(None, [500, 500]), (float("inf"), [500, 500]),
                                               (0.0, [500, 125, 125, 125, 125])])
async def test_a_page_is_split_across_threads_only_where_stats_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waiting: float | None,
        want: list[int]) -> None:
    # Each hand-over of a piece of a page to a thread costs a round through
    # the GIL for every stat and xattr call of it: a page of 1000 local files
    # went out in 8 pieces (listing 1e6 files ~36 s). A page is split only
    # once the page before showed stats that wait (a network filesystem).
    root = tmp_path / "objects"
    root.mkdir()
    for f in range(1000):
        (root / f"f{f:04d}").write_bytes(b"x")
    if waiting is not None:
        monkeypatch.setattr(_store, "_WAITING_STAT", waiting)
    pieces: list[int] = []
    stat_files = _listing.stat_files

    def counted(files: list[tuple[str, str]]) -> _listing.Stated:
        pieces.append(len(files))
        return stat_files(files)

    monkeypatch.setattr(_listing, "stat_files", counted)
    bucket, prefix = _bucket_of(root)
    pages = [p async for p in LocalStore(ClientConfig()).list(bucket, prefix, page_size=500)]
    assert [len(p.objects) for p in pages] == [500, 500]
    assert [o.name for p in pages for o in p.objects] == [
        f"{prefix}f{f:04d}" for f in range(1000)]
    assert pieces == want
