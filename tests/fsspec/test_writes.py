"""Files opened for writing: fsspec's transactions (``fs.transaction``,
``autocommit=False``) publish on commit only, and ``"xb"`` streams in parts
and publishes only a new object; on every backend (our emulator,
fake-gcs-server, moto, the local filesystem)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest

from aioflux._core.concurrency.portal import call
from aioflux.fsspec import AiofluxFileSystem
from aioflux.fsspec._paths import split
from tests.fsspec.conftest import Site

MiB = 1024 * 1024
# Past one part (8 MiB), so a part is uploaded before the file is closed.
BIG = 9 * MiB + 123


def _open_uploads(fs: AiofluxFileSystem, root: str) -> list[object]:
    """Uploads (multipart, or a file's temporary copy) left open under ``root``."""
    bucket, name = split(fs.scheme, root, folder=True)
    if fs.scheme == "gs" and not fs.store.features.multipart:
        return []  # fake-gcs-server lists none
    try:
        return list(call(fs.store.list_multipart_uploads(bucket, name)))
    except ValueError:  # fake-gcs-server: no XML multipart uploads to list
        return []


def _leftovers(fs: AiofluxFileSystem, root: str) -> list[str]:
    """What lies under ``root``: objects, and on files every file (temporary ones too)."""
    if fs.scheme == "file":
        return sorted(str(Path(d, f).relative_to(root)) for d, _, files in os.walk(root)
                      for f in files) if os.path.isdir(root) else []
    return [p[len(root) + 1:] for p in fs.find(root)]


# -- transactions -------------------------------------------------------------------------


def test_a_transaction_publishes_its_files_on_commit(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    big, text = os.urandom(BIG), "a line\n" * 1000
    fs.pipe_file(f"{root}/old", b"the old bytes")
    with fs.transaction:
        with fs.open(f"{root}/big", "wb") as f:
            for i in range(0, BIG, MiB):
                f.write(big[i:i + MiB])
        assert f.closed
        with pytest.raises(ValueError):
            f.write(b"more")
        with fs.open(f"{root}/text", "w") as t:
            t.write(text)
        with fs.open(f"{root}/old", "wb") as f:
            f.write(b"the new bytes")
        # Nothing is published before the commit.
        assert not fs.exists(f"{root}/big") and not fs.exists(f"{root}/text")
        assert fs.cat_file(f"{root}/old") == b"the old bytes"
    assert fs.cat_file(f"{root}/big") == big
    assert fs.cat_file(f"{root}/text").decode() == text
    assert fs.cat_file(f"{root}/old") == b"the new bytes"
    assert _leftovers(fs, root) == ["big", "old", "text"]
    assert _open_uploads(fs, root) == []
    assert not fs._intrans  # the next file is published on close again
    with fs.open(f"{root}/after", "wb") as f:
        f.write(b"x")
    assert fs.cat_file(f"{root}/after") == b"x"


def test_a_discarded_transaction_publishes_nothing(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    fs.pipe_file(f"{root}/old", b"the old bytes")
    with pytest.raises(KeyError):
        with fs.transaction:
            with fs.open(f"{root}/big", "wb") as f:
                f.write(os.urandom(BIG))
            with fs.open(f"{root}/old", "wb") as f:
                f.write(b"the new bytes")
            raise KeyError("a failure before the commit")
    assert _leftovers(fs, root) == ["old"]
    assert fs.cat_file(f"{root}/old") == b"the old bytes"
    assert _open_uploads(fs, root) == []
    # The non-context form, discarded explicitly.
    fs.start_transaction()
    with fs.open(f"{root}/small", "wb") as f:
        f.write(b"small")
    fs.transaction.complete(commit=False)
    assert _leftovers(fs, root) == ["old"] and not fs._intrans


def test_a_failed_file_inside_a_committed_transaction_publishes_nothing(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    with fs.transaction:
        with pytest.raises(KeyError):
            with fs.open(f"{root}/failed", "wb") as f:
                f.write(os.urandom(BIG))
                raise KeyError("a failure inside with")
        with fs.open(f"{root}/good", "wb") as f:
            f.write(b"good")
    assert _leftovers(fs, root) == ["good"]
    assert _open_uploads(fs, root) == []


def test_a_create_only_file_of_a_transaction_fails_its_commit(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    with pytest.raises(FileExistsError):
        with fs.transaction:
            with fs.open(f"{root}/x", "xb") as f:
                f.write(b"mine")
            with fs.open(f"{root}/y", "wb") as f:
                f.write(b"y")
            fs.pipe_file(f"{root}/x", b"another writer's")  # before the commit
    assert fs.cat_file(f"{root}/x") == b"another writer's"
    # The commit stopped at x: y, after it, was discarded.
    assert _leftovers(fs, root) == ["x"]
    assert _open_uploads(fs, root) == [] and not fs._intrans


# -- "xb" ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1000, BIG], ids=["one-request", "parts"])
def test_xb_streams_and_creates_only(backend: tuple[AiofluxFileSystem, str],
                                     request: pytest.FixtureRequest, size: int) -> None:
    fs, root = backend
    if size == BIG and "fakegcs" in request.node.callspec.id:
        pytest.skip("fake-gcs-server ignores preconditions on resumable uploads")
    path = f"{root}/x"
    mine, theirs = os.urandom(size), os.urandom(size)
    first, second = fs.open(path, "xb"), fs.open(path, "xb")  # neither exists yet
    for f, data in ((first, mine), (second, theirs)):
        for i in range(0, size, MiB):
            f.write(data[i:i + MiB])
        f.settle()
        # Parts leave as they fill: what is held is the tail, not the file.
        assert f.stats.parts == size // (8 * MiB)
    assert not fs.exists(path)
    first.close()
    with pytest.raises(FileExistsError):
        second.close()  # the publishing request refused it: first came first
    assert fs.cat_file(path) == mine
    assert _open_uploads(fs, root) == []
    with pytest.raises(FileExistsError):
        fs.open(path, "xb")  # said at once when it exists already
    with pytest.raises(FileExistsError):
        with fs.open(f"{root}/t", "x") as t:  # text, the same
            t.write("text")
            fs.pipe_file(f"{root}/t", b"another writer's")
    assert fs.cat_file(f"{root}/t") == b"another writer's"
    assert _leftovers(fs, root) == ["t", "x"]


def test_put_file_create_streams_and_creates_only(backend: tuple[AiofluxFileSystem, str],
                                                  request: pytest.FixtureRequest,
                                                  tmp_path: Path) -> None:
    fs, root = backend
    if "fakegcs" in request.node.callspec.id:
        pytest.skip("fake-gcs-server ignores preconditions on resumable uploads")
    local = tmp_path / "big"
    data = os.urandom(BIG)
    local.write_bytes(data)
    fs.put_file(str(local), f"{root}/p", mode="create")
    assert fs.cat_file(f"{root}/p") == data
    with pytest.raises(FileExistsError):
        fs.put_file(str(local), f"{root}/p", mode="create")
    assert _open_uploads(fs, root) == []


# -- fsspec.open --------------------------------------------------------------------------


def test_fsspec_open_in_a_transaction_publishes_nothing_on_an_exception(
        site: Site, fsspec_state: None) -> None:
    # fsspec.open's OpenFile closes its file on any way out of `with`, and
    # close() publishes (docs/guides/fsspec-notes.md); in a transaction of
    # the same (cached) filesystem, the exception discards instead.
    fs, _ = fsspec.core.url_to_fs(site.url(), **site.options)
    with pytest.raises(KeyError):
        with fs.transaction:
            with fsspec.open(site.url("o"), "wb", **site.options) as f:
                f.write(os.urandom(BIG))
            with fsspec.open(site.url("t"), "w", **site.options) as t:
                t.write("text")
            raise KeyError("a failure before the commit")
    assert site.names() == []
    with fs.transaction:
        with fsspec.open(site.url("o"), "wb", **site.options) as f:
            f.write(b"published")
    assert site.names() == ["o"] and site.fs.cat_file(site.path("o")) == b"published"


# -- compression --------------------------------------------------------------------------


@pytest.mark.parametrize(("compression", "suffix", "unpack"),
                         [("gzip", "gz", gzip.decompress), ("bz2", "bz2", bz2.decompress),
                          ("xz", "xz", lzma.decompress)])
def test_compressed_writes_publish_on_close_and_nothing_on_an_exception(
        backend: tuple[AiofluxFileSystem, str], compression: str, suffix: str,
        unpack: Callable[[bytes], bytes]) -> None:
    # fsspec's own open() handed back the compressor alone, whose close()
    # left the file under it open: nothing was ever published.
    fs, root = backend
    data, text = os.urandom(1000) * 50, "a line\n" * 100
    with fs.open(f"{root}/b", "wb", compression=compression) as f:
        f.write(data)
    assert unpack(fs.cat_file(f"{root}/b")) == data
    with fs.open(f"{root}/b", "rb", compression=compression) as f:
        assert f.read() == data
    with fs.open(f"{root}/t.{suffix}", "w", compression="infer") as t:  # told by the suffix
        t.write(text)
    assert unpack(fs.cat_file(f"{root}/t.{suffix}")).decode() == text
    with pytest.raises(KeyError):
        with fs.open(f"{root}/e", "wb", compression=compression) as f:
            f.write(data)
            raise KeyError("a failure inside with")
    with pytest.raises(KeyError):
        with fs.open(f"{root}/e.{suffix}", "w", compression="infer") as t:
            t.write(text)
            raise KeyError("a failure inside with")
    with fs.transaction:
        with fs.open(f"{root}/tx", "wb", compression=compression) as f:
            f.write(data)
        assert not fs.exists(f"{root}/tx")  # on the commit, not before
    assert unpack(fs.cat_file(f"{root}/tx")) == data
    with pytest.raises(FileExistsError):
        with fs.open(f"{root}/b", "xb", compression=compression) as f:
            f.write(b"another")
    assert unpack(fs.cat_file(f"{root}/b")) == data
    assert _leftovers(fs, root) == sorted(["b", f"t.{suffix}", "tx"])
    assert _open_uploads(fs, root) == []


# -- progress -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1000, BIG])
def test_get_and_put_report_progress_to_fsspec_callbacks(
        backend: tuple[AiofluxFileSystem, str], tmp_path: Path, size: int) -> None:
    # What progress bars (Hugging Face's, fsspec's TqdmCallback) hear.
    from fsspec.callbacks import Callback

    fs, root = backend
    local = tmp_path / "up"
    local.write_bytes(os.urandom(size))
    sent = Callback()
    fs.put_file(str(local), f"{root}/o", callback=sent)
    assert (sent.size, sent.value) == (size, size)
    got = Callback()
    fs.get_file(f"{root}/o", str(tmp_path / "down"), callback=got)
    assert (got.size, got.value) == (size, size)
    assert (tmp_path / "down").read_bytes() == local.read_bytes()


def test_a_write_file_names_its_filesystem_and_path(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    # fsspec's files carry .fs and .path (its writers, DCP's and pyarrow's
    # handlers read them), the write ones as the read ones.
    fs, root = backend
    path = f"{root}/named"
    with fs.open(path, "wb") as f:
        assert f.fs is fs and f.path == fs._strip_protocol(path) and f.mode == "wb"
        f.write(b"x")
    with fs.open(fs.unstrip_protocol(path), "rb") as f:
        assert f.fs is fs and f.path == fs._strip_protocol(path)
    with fs.open(path + ".gz", "wb", compression="gzip") as f:
        assert f.fs is fs and f.path == fs._strip_protocol(path + ".gz")
