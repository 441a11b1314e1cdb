"""Calls that code written for gcsfs and s3fs makes, where aioflux's answer
was silently another: ``find`` and ``ls`` with ``prefix=`` listed
everything, a recursive copy to a missing bucket copied nothing and said
nothing, a pinned version or custom metadata given to ``open`` was
dropped; and fsspec's file and ``rm`` conventions (a negative read length,
a folder given to ``rm``). On our emulator, moto and the local filesystem;
each test fails without its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from aioflux import InvalidArgument, NotFound
from aioflux._core.concurrency.portal import call
from tests.fsspec.conftest import Site

_TREE = {"a.txt": b"hello\nworld\n", "d/b.bin": b"0123456789", "d/e/c.csv": b"x,y\n",
         "d2/f": b"f", "da": b"da"}


def _planted(site: Site) -> str:
    site.fs.pipe({site.path(k): v for k, v in _TREE.items()})
    site.fs.invalidate_cache()
    return site.root


def test_find_with_a_prefix_lists_only_the_names_that_start_with_it(site: Site) -> None:
    fs, root = site.fs, _planted(site)
    # gcsfs's and s3fs's prefix= was dropped: every object under root came back.
    assert fs.find(root, prefix="d") == [f"{root}/d/b.bin", f"{root}/d/e/c.csv",
                                         f"{root}/d2/f", f"{root}/da"]
    assert fs.find(root + "/", prefix="a") == [f"{root}/a.txt"]
    assert fs.find(root, prefix="da") == [f"{root}/da"]  # the exact name too
    assert fs.find(root, prefix="zz") == []
    assert fs.find(root, prefix="d", withdirs=True) == [
        root, f"{root}/d", f"{root}/d/b.bin", f"{root}/d/e", f"{root}/d/e/c.csv",
        f"{root}/d2", f"{root}/d2/f", f"{root}/da"]
    assert fs.find(root, prefix="d", maxdepth=1) == [f"{root}/da"]
    assert fs.find(root, prefix="d", maxdepth=2, withdirs=True) == [
        root, f"{root}/d", f"{root}/d/b.bin", f"{root}/d/e", f"{root}/d2", f"{root}/d2/f",
        f"{root}/da"]
    detail = fs.find(root, prefix="d2", detail=True)
    assert list(detail) == [f"{root}/d2/f"] and detail[f"{root}/d2/f"]["size"] == 1
    # A part of the tree is not remembered as the whole: the folder still lists all.
    assert fs.ls(root, detail=False) == [f"{root}/a.txt", f"{root}/d", f"{root}/d2",
                                         f"{root}/da"]
    assert fs.find(root) == sorted(f"{root}/{k}" for k in _TREE)


def test_ls_with_a_prefix_lists_only_the_names_that_start_with_it(site: Site) -> None:
    fs, root = site.fs, _planted(site)
    # gcsfs's ls(prefix=) was dropped: the whole folder came back.
    assert fs.ls(root, detail=False, prefix="d") == [f"{root}/d", f"{root}/d2", f"{root}/da"]
    assert fs.ls(f"{root}/d", detail=False, prefix="b") == [f"{root}/d/b.bin"]
    assert fs.ls(root, detail=False, prefix="zz") == []
    assert fs.ls(root, detail=False) == [f"{root}/a.txt", f"{root}/d", f"{root}/d2",
                                         f"{root}/da"]  # the part was not remembered
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{root}/missing", prefix="x")


def test_a_recursive_copy_to_a_missing_bucket_says_so(site: Site) -> None:
    if site.scheme == "file":
        pytest.skip("a missing folder is made, not missing")
    fs, root = site.fs, _planted(site)
    # fsspec drops a recursive copy's FileNotFoundErrors (for the folders in
    # its expansion): the missing bucket's NotFound went with them, and the
    # copy returned as if done.
    with pytest.raises(NotFound, match="no bucket 'no-such-bucket-mig'") as caught:
        fs.copy(f"{root}/d", "no-such-bucket-mig/dst", recursive=True)
    assert caught.value.bucket == "no-such-bucket-mig"  # the store's error named the source
    with pytest.raises(NotFound):
        fs.copy(f"{root}/d/", "no-such-bucket-mig/dst/", recursive=True)
    # A copy of a tree (folders in its expansion) still copies it.
    fs.copy(f"{root}/d", f"{root}/copied", recursive=True)
    assert fs.find(f"{root}/copied") == [f"{root}/copied/b.bin", f"{root}/copied/e/c.csv"]
    # Asked to drop what is not found, it does.
    fs.copy(f"{root}/d", "no-such-bucket-mig/dst", recursive=True, on_error="ignore")


def test_open_and_cat_refuse_a_version_they_would_not_read(site: Site) -> None:
    fs, root = site.fs, _planted(site)
    path = f"{root}/a.txt"
    # gcsfs's generation= and s3fs's version_id= were dropped: the current
    # version was read as if it were the one asked for.
    for pin in ({"generation": 1}, {"version_id": "v1"}):
        with pytest.raises(InvalidArgument, match=f"{path}: {next(iter(pin))}= is not"):
            fs.open(path, "rb", **pin)
        with pytest.raises(InvalidArgument, match=next(iter(pin))):
            fs.cat_file(path, **pin)
        with pytest.raises(InvalidArgument, match=next(iter(pin))):
            call(fs.open_async(path, "rb", **pin))
    assert fs.open(path, "rb", generation=None).read() == _TREE["a.txt"]


def test_custom_metadata_given_to_a_write_is_stored(site: Site, tmp_path: Path) -> None:
    fs, root = site.fs, site.root
    meta = {"origin": "test", "k": "v"}
    local = tmp_path / "up"
    local.write_bytes(b"put")

    def written() -> None:
        with fs.open(f"{root}/opened", "wb", metadata=meta) as f:
            f.write(b"opened")
        with fs.open(f"{root}/text", "w", metadata=meta) as t:
            t.write("text")
        with fs.open(f"{root}/z.gz", "wb", compression="gzip", metadata=meta) as f:
            f.write(b"zipped")
        fs.pipe_file(f"{root}/piped", b"piped", metadata=meta)
        fs.put_file(str(local), f"{root}/put", metadata=meta)

        async def async_write() -> None:
            async with await fs.open_async(f"{root}/async", "wb", metadata=meta) as f:
                await f.write(b"async")

        call(async_write())  # on the filesystem's loop, as its store's other calls

    if site.scheme == "file":
        # Files have no metadata: said, as the store says it, not dropped.
        with pytest.raises(InvalidArgument, match="no custom metadata"):
            fs.pipe_file(f"{root}/piped", b"piped", metadata=meta)
        with pytest.raises(InvalidArgument, match="no custom metadata"), \
                fs.open(f"{root}/opened", "wb", metadata=meta) as f:
            f.write(b"opened")
        assert not fs.exists(f"{root}/piped") and not fs.exists(f"{root}/opened")
        return
    written()  # metadata= was dropped by each of them
    for name in ("opened", "text", "z.gz", "piped", "put", "async"):
        assert fs.info(f"{root}/{name}")["metadata"] == meta, name


def test_a_read_of_a_negative_length_reads_the_rest_as_fsspecs_files_do(site: Site) -> None:
    fs, root = site.fs, _planted(site)
    path = f"{root}/a.txt"
    with fs.open(path, "rb") as f:
        f.seek(6)
        assert f.read(-5) == b"world\n"  # io's "read length must be non-negative or -1"
    # read_block past the end asks for a negative length.
    assert fs.read_block(path, 100, 5) == b""
    assert fs.read_block(path, 6, 100) == b"world\n"


def test_rm_of_a_folder_without_recursive_says_it_is_a_folder(site: Site) -> None:
    fs, root = site.fs, _planted(site)
    # It said "no such object" of a folder that was there.
    with pytest.raises(IsADirectoryError, match="recursive=True"):
        fs.rm(f"{root}/d")
    assert fs.find(f"{root}/d") == [f"{root}/d/b.bin", f"{root}/d/e/c.csv"]
    with pytest.raises(FileNotFoundError, match="no such object"):
        fs.rm(f"{root}/missing")
    fs.rm(f"{root}/d", recursive=True)
    assert not fs.exists(f"{root}/d")

