"""A dataset's listing of files as columns (``LocalStore.list_columns``, issue
49): the very records, skips and refusals of the generic path, which builds
an ``ObjectInfo`` a file through the parallel listers (``iter_pages``)."""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Protocol, runtime_checkable

import pytest

from aioflux import InvalidURL, NotFound
from aioflux._core.concurrency.portal import call
from aioflux._core.memory.columns import ListedColumns
from aioflux._core.records.types import ObjectInfo
from aioflux._engines import listing
from aioflux.local import LocalStore
from aioflux.torch import ObjectIterableDataset, ObjectMapDataset
from aioflux.torch.data import _source

SKIP = "aioflux-composed/"


@runtime_checkable
class _NoStoreListsColumns(Protocol):
    """In place of ``ListsColumns`` for the generic path. Deleting
    ``LocalStore.list_columns`` would not do: a runtime protocol's
    ``isinstance`` caches a class's answer (the ABC cache), so after any
    dataset over files in the same process the store still passed."""

    def no_store_has_this(self) -> None:
        """Met by nothing."""


def _put(path: Path, body: bytes) -> None:
    # Through the store: its crc32c is recorded (an extended attribute).
    call(LocalStore().write(path.parts[1], "/".join(path.parts[2:]), body))


def _folder(root: Path) -> Path:
    """Nested folders, an empty file, files with and without a recorded
    crc32c, times before and at the epoch, a temporary file of a write,
    and the names under the skipped prefix with their near misses."""
    data = root / "data"
    for name, body in [("z.bin", b"zz"), ("a/x.bin", b"x"), ("a/b/c/deep.bin", b"deep"),
                       ("a/empty", b""), ("aioflux-composedX", b"kept"),
                       ("aioflux-composed.txt", b"kept too"), (f"{SKIP}1-abc", b"part"),
                       (f"{SKIP}sub/2-def", b"part"), ("é/ünï.bin", b"u")]:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes(body)
    _put(data / "a/b/recorded.bin", b"with a crc32c")
    _put(data / "a/b/recorded-then-touched.bin", b"its crc32c is stale")
    os.utime(data / "a/b/recorded-then-touched.bin", ns=(1, 1_000_000_000))
    os.utime(data / "a/empty", ns=(0, 0))  # at the epoch: generation 2**63 - 1
    os.utime(data / "z.bin", ns=(0, -2_500_000_001))  # before it
    (data / "a/.x.bin.aioflux-tmp-1").write_bytes(b"a write in progress")
    return data


def _listed(monkeypatch: pytest.MonkeyPatch, url: str, skip: str, *, columns: bool,
            cls: type[ObjectMapDataset[bytes]] = ObjectMapDataset) -> tuple[list[ObjectInfo], int]:
    """The dataset's records and index bytes, listed as columns or not; names
    under ``skip`` left out (in place of the bucket's ``aioflux-composed/``)."""
    taken: list[int] = []
    with monkeypatch.context() as m:
        m.setattr(_source, "COMPOSED_PREFIX", skip)
        m.setattr(_source, "iter_pages", functools.partial(listing.iter_pages,
                                                           skip_prefix=skip))
        if columns:
            list_columns = LocalStore.list_columns

            def counted(self: LocalStore, bucket: str,
                        prefix: str) -> AsyncGenerator[ListedColumns, None]:
                taken.append(1)
                return list_columns(self, bucket, prefix)

            m.setattr(LocalStore, "list_columns", counted)
        else:
            m.setattr(_source, "ListsColumns", _NoStoreListsColumns)  # the generic path
        ds = cls.from_prefix(url)
    assert taken == ([1] if columns else [])
    return list(ds.objects), ds.objects.nbytes()


def test_columns_hold_what_the_generic_listing_holds(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    data = _folder(tmp_path)
    url = f"file://{data}"
    skip = f"{str(data)[1:].partition('/')[2]}/{SKIP}"  # the skipped names, in the bucket
    generic, generic_bytes = _listed(monkeypatch, url, skip, columns=False)
    columns, columns_bytes = _listed(monkeypatch, url, skip, columns=True)
    assert columns == generic
    for got, want in zip(columns, generic, strict=True):
        assert [type(v) for v in got] == [type(v) for v in want]
    assert columns_bytes == generic_bytes  # the same columns, none bigger
    names = [o.name.rpartition("/data/")[2] for o in columns]
    assert names == ["a/b/c/deep.bin", "a/b/recorded-then-touched.bin", "a/b/recorded.bin",
                     "a/empty", "a/x.bin", "aioflux-composed.txt", "aioflux-composedX",
                     "z.bin", "é/ünï.bin"]
    by_name = dict(zip(names, columns, strict=True))
    assert by_name["a/b/recorded.bin"].crc32c is not None
    assert by_name["a/b/recorded-then-touched.bin"].crc32c is None  # rewritten since
    assert by_name["a/empty"].size == 0
    assert by_name["a/empty"].generation == 2**63 - 1
    assert by_name["a/empty"].updated == "1970-01-01T00:00:00.000000Z"
    assert by_name["z.bin"].updated == "1969-12-31T23:59:57.499999Z"
    # Without the skip the composed parts are objects too, on both paths.
    unskipped = _listed(monkeypatch, url, "", columns=True)[0]
    assert unskipped == _listed(monkeypatch, url, "", columns=False)[0]
    assert len(unskipped) == len(columns) + 2


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
def test_a_name_that_is_not_utf8_is_refused_as_by_the_generic_listing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        cls: type[ObjectMapDataset[bytes]]) -> None:
    data = _folder(tmp_path)
    with open(os.fsencode(data) + b"/a/b/bad-\xff.bin", "wb") as f:
        f.write(b"y")
    refused = []
    for columns in (False, True):
        with pytest.raises(InvalidURL, match="not valid UTF-8") as caught:
            _listed(monkeypatch, f"file://{data}", SKIP, columns=columns, cls=cls)
        refused.append(str(caught.value))
    assert refused[0] == refused[1]
    assert "/data/a/b/bad-" in refused[1]


def test_an_empty_folder_is_no_dataset_on_either_path(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "sub" / ".f.aioflux-tmp-2").write_bytes(b"")  # no object
    for columns in (False, True):
        with pytest.raises(NotFound, match=r"^list file://.*/empty/: no objects in that folder"):
            _listed(monkeypatch, f"file://{tmp_path}/empty", SKIP, columns=columns)


def test_pages_skip_a_prefix_in_or_out_of_order() -> None:
    page = ListedColumns("b", "file", ["a", "p/1", "p/2", "q"], [1, 2, 3, 4], [5, 6, 7, 8],
                         [None, 1, 2, None], None)
    assert page.without("p/") == ListedColumns("b", "file", ["a", "q"], [1, 4], [5, 8],
                                               [None, None], None)
    assert page.without("x/") is page and page.without("") is page
    assert page.without("").names == page.names
    mixed = ListedColumns("b", "file", ["q", "p/1", "a", "p/2"], [1, 2, 3, 4], [5, 6, 7, 8],
                          [9, 10, 11, 12], ["t1", "t2", "t3", "t4"])
    assert mixed.without("p/") == ListedColumns("b", "file", ["q", "a"], [1, 3], [5, 7],
                                                [9, 11], ["t1", "t3"])
    assert mixed.without("") is mixed
    every = ListedColumns("b", "file", ["p/1", "p/2"], [1, 2], [3, 4], [None, None], None)
    assert every.without("p/").names == []
