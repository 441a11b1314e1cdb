"""Byte ranges as fsspec defines them ("like usual python slices"), on every
backend: a range starting at or past the end is empty, as fsspec's local
filesystem returns it, never the server's 416."""

from __future__ import annotations

import os

import pytest

from aioflux import NotFound
from aioflux.fsspec import AiofluxFileSystem


@pytest.fixture
def sliced(backend: tuple[AiofluxFileSystem, str]) -> tuple[AiofluxFileSystem, str, bytes]:
    fs, root = backend
    data = os.urandom(1000)
    fs.pipe_file(f"{root}/o", data)
    return fs, f"{root}/o", data


@pytest.mark.parametrize(("start", "end"), [
    (1010, None), (1000, None), (1010, 1020), (1000, 1000), (2000, 1500), (995, 1020),
    (5, 5000), (-5, 5000), (-5000, 10), (None, 5000), (0, 1000), (990, -5), (-20, -10),
])
def test_cat_file_slices_like_python(sliced: tuple[AiofluxFileSystem, str, bytes],
                                     start: int | None, end: int | None) -> None:
    fs, path, data = sliced
    assert fs.cat_file(path, start=start, end=end) == data[start:end]


def test_cat_ranges_past_the_end_are_empty(sliced: tuple[AiofluxFileSystem, str, bytes]) -> None:
    fs, path, data = sliced
    starts, ends = [1010, 0, 1000, 998, 2000], [1020, 10, 1001, 1100, 3000]
    for gap in (0, None):  # alone, and coalesced with the ranges before them
        kwargs = {} if gap is None else {"max_gap": gap}
        assert fs.cat_ranges([path] * 5, starts, ends, **kwargs) == \
            [data[s:e] for s, e in zip(starts, ends, strict=True)]


def test_a_range_of_a_missing_object_is_still_not_found(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    with pytest.raises((FileNotFoundError, NotFound)):
        fs.cat_file(f"{root}/missing", start=1010)
    with pytest.raises((FileNotFoundError, NotFound)):
        fs.cat_file(f"{root}/missing", start=5, end=10)


def test_read_block_and_the_attributes_of_a_read_file(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    # fsspec's read_block (dask's read_bytes) asks the file for its size; a
    # plain io.BufferedReader had none (AttributeError).
    fs, root = backend
    lines = b"".join(b"line %d\n" % i for i in range(200))
    fs.pipe_file(f"{root}/t", lines)
    blocks = [fs.read_block(f"{root}/t", off, 100, delimiter=b"\n")
              for off in range(0, len(lines), 100)]
    assert b"".join(blocks) == lines and all(b.endswith(b"\n") for b in blocks)
    assert fs.read_block(f"{root}/t", 10, 5) == lines[10:15]
    with fs.open(f"{root}/t", "rb") as f:
        assert f.size == len(lines) and f.mode == "rb" and f.fs is fs
        assert f.path == fs._strip_protocol(f"{root}/t")
        assert f.info() == f.details and f.details["size"] == len(lines)
        assert f.details["version"] == fs.info(f"{root}/t")["version"]
