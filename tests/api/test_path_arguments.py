"""``pathlib.Path`` works wherever a local path string does, and a writer
given a ``str`` raises the library's typed ``InvalidArgument``."""

from __future__ import annotations

import array
import re
from pathlib import Path

import pytest

import aioflux
from aioflux import InvalidArgument, InvalidURL, WriterOptions
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux.testing import MemoryStore


def test_open_takes_a_path(tmp_path: Path) -> None:
    target = tmp_path / "run1" / "a.bin"
    with aioflux.open(target, "wb") as f:
        f.write(b"abc")
    assert target.read_bytes() == b"abc"
    with aioflux.open(target) as f:
        assert f.read() == b"abc"


def test_list_files_takes_a_path_or_several(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"x")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "y").write_bytes(b"y")
    x, y = (f"file://{tmp_path}/d/x", f"file://{tmp_path}/e/y")
    assert list(aioflux.list_files(tmp_path / "d")) == [x]
    assert list(aioflux.list_files([tmp_path / "d", str(tmp_path / "e")])) == [x, y]


def test_a_path_that_is_a_mangled_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidURL, match=r"did you mean gs://my-bucket/x\?"):
        aioflux.open(Path("gs://my-bucket") / "x", "wb")
    with pytest.raises(InvalidURL, match=r"did you mean s3://my-bucket/x/\?"):
        aioflux.list_files("s3:/my-bucket/x/")


def test_writing_a_str_is_an_invalid_argument(tmp_path: Path) -> None:
    target = tmp_path / "w.bin"
    with aioflux.open(target, "wb") as f:
        with pytest.raises(InvalidArgument, match=r"got str \(encode a str first"):
            f.write("text")  # type: ignore[arg-type]
        url = re.escape(f"file://{target}")
        with pytest.raises(InvalidArgument, match=rf"write {url}: .* got int"):
            f.write(5)  # type: ignore[arg-type]
        # The refused calls took nothing; the writer goes on, and any buffer
        # (not only bytes) is still taken.
        f.write(b"ab")
        f.write(array.array("B", b"cd"))  # type: ignore[arg-type]
    assert target.read_bytes() == b"abcd"


async def test_the_async_writer_refuses_a_str_too() -> None:
    store = MemoryStore(buckets=["bkt"])
    async with AsyncObjectWriter(store, "bkt", "w", options=WriterOptions()) as writer:
        with pytest.raises(InvalidArgument, match=r"write memory://bkt/w: .* got str"):
            await writer.write("text")  # type: ignore[arg-type]
        await writer.write(b"ok")
    assert await store.read("bkt", "w") == b"ok"


def test_a_zstd_writer_refuses_a_str_as_the_plain_one_does(tmp_path: Path) -> None:
    pytest.importorskip("zstandard")
    target = tmp_path / "w.zst"
    with aioflux.open(target, "wb", compression="zstd") as f:
        url = re.escape(f"file://{target}")
        with pytest.raises(InvalidArgument, match=rf"write {url}: .* got str \(encode"):
            f.write("text")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match=r"got int"):
            f.write(5)  # type: ignore[arg-type]
        # Nothing was taken; any buffer still is, counted in bytes.
        assert f.write(b"ab") == 2
        assert f.write(array.array("H", [1, 2])) == 4  # type: ignore[arg-type]
    with aioflux.open(target, compression="zstd") as f:
        assert f.read() == b"ab" + array.array("H", [1, 2]).tobytes()
