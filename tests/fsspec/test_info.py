"""What ``info`` says of an object on every backend (size, crc32c, version,
time), and the keys fsspec's callers derive from it: ``ukey`` and
``checksum`` change with the content, ``modified`` is the object's time."""

from __future__ import annotations

import datetime
import os
import uuid

import google_crc32c
import pytest

import aioflux
from aioflux import InvalidURL, NotFound
from aioflux._core.integrity.crc import encode_crc32c
from aioflux.fsspec import AiofluxFileSystem


def test_info_names_the_size_crc32c_version_and_time(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    body = os.urandom(5000)
    fs.pipe_file(f"{root}/o", body)
    info = fs.info(f"{root}/o")
    assert info["type"] == "file" and info["size"] == len(body)
    assert info["crc32c"] == encode_crc32c(google_crc32c.value(body))
    assert info["version"]
    listed = fs.ls(root)[0]  # a listing's entry names the same object
    assert (listed["size"], listed["version"]) == (info["size"], info["version"])
    when = fs.modified(f"{root}/o")
    assert isinstance(when, datetime.datetime) and when.utcoffset() == datetime.timedelta(0)
    # gcsfs's "mtime", which pyarrow's handler reads (its FileInfo had none).
    assert info["mtime"] == when
    # A GCS listing asks for four fields, no time (LIST_FIELDS: the listing's
    # speed), so its entries' time is None (fake-gcs-server ignores fields
    # and sends it); info's is the object's. The other stores list it.
    assert listed["mtime"] in ((None, when) if fs.scheme == "gs" else (when,))
    found = fs.find(root, detail=True)[f"{root}/o"]
    assert found["mtime"] == listed["mtime"] and found["updated"] == listed["updated"]
    import pyarrow.fs

    handler = pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(fs))
    assert handler.get_file_info(f"{root}/o").mtime is not None


def test_ukey_and_checksum_change_with_the_content_only(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    fs.pipe_file(f"{root}/o", b"first")
    key, checksum, when = fs.ukey(f"{root}/o"), fs.checksum(f"{root}/o"), fs.modified(f"{root}/o")
    fs.invalidate_cache()
    assert (fs.ukey(f"{root}/o"), fs.checksum(f"{root}/o")) == (key, checksum)
    fs.pipe_file(f"{root}/o", b"second, longer")
    assert fs.ukey(f"{root}/o") != key and fs.checksum(f"{root}/o") != checksum
    assert 0 <= fs.checksum(f"{root}/o") < 1 << 63
    assert fs.modified(f"{root}/o") >= when  # S3's time is to the second


def test_modified_of_a_folder_or_a_missing_object_raises(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    fs.pipe_file(f"{root}/d/o", b"o")
    with pytest.raises(IsADirectoryError):
        fs.modified(f"{root}/d")
    with pytest.raises((FileNotFoundError, NotFound)):
        fs.modified(f"{root}/missing")


def test_modified_after_a_listing_without_times(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    # A GCS listing names no time, and info answers from it: modified said
    # "the store reported no time" of every object listed lately.
    fs, root = backend
    fs.dircache.use_listings_cache = True  # remembered on files too
    fs.dircache.listings_expiry_time = None
    fs.pipe_file(f"{root}/o", b"o")
    fs.ls(root)
    when = fs.modified(f"{root}/o")
    assert isinstance(when, datetime.datetime) and when.utcoffset() == datetime.timedelta(0)
    assert fs.info(f"{root}/o")["mtime"] == when  # the stat that gave it answers now


def test_a_path_without_a_bucket_says_buckets_are_not_listed(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, _ = backend
    if fs.scheme == "file":
        pytest.skip("a file system's root is a folder like any other")
    for call in (fs.ls, fs.info, fs.find):
        with pytest.raises(InvalidURL, match=rf"{fs.scheme}:// names no bucket"):
            call(f"{fs.scheme}://")
        with pytest.raises(InvalidURL, match="does not list buckets"):
            call("")


def test_a_file_directly_under_the_root_is_refused_not_missing() -> None:
    # A local path's first directory is its bucket: a file there is no
    # object. exists() said False of it, and info() "no such directory".
    path = f"/aioflux-root-{uuid.uuid4().hex[:8]}"
    try:
        with open(path, "wb") as f:
            f.write(b"x")
    except OSError as exc:
        pytest.skip(f"cannot write a file at / ({exc.strerror})")
    fs = AiofluxFileSystem("file", skip_instance_cache=True)
    try:
        for call in (fs.exists, fs.info, fs.cat_file):
            with pytest.raises(InvalidURL, match="a file directly under / is no object"):
                call(path)
        with pytest.raises(InvalidURL, match="a file directly under / is no object"):
            aioflux.open(path)
        assert fs.isdir("/tmp") and not fs.exists(f"{path}-missing")
    finally:
        os.remove(path)
