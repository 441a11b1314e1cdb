"""A shard's index counts only for the shard it was built from: its crc32c
where the store keeps one, else its version, on local files and on the
emulator's S3 face (whose listings carry no crc32c). A shard rewritten with
the same size is indexed again (its stale sidecar, or the index cached from
one, cut every sample wrong); a copy that keeps the crc32c keeps its sidecar,
one that keeps neither crc32c nor version is indexed again once."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from aioflux import Client
from aioflux._core.concurrency.portal import call
from aioflux._engines.shards import (
    INDEX_SUFFIX,
    ShardIndex,
    _build,
    _tar,
    decode_index,
    encode_index,
)
from aioflux._engines.shards._index import new_columns
from aioflux.local import LocalStore
from aioflux.testing import Emulator
from aioflux.torch import Order, ShardDataset, ShardMapDataset, ShardReads, ShardWriter
from tests.torch._shards_util import repack_samples, rewrite_file, tar_shard
from tests.torch.conftest import Where

IN_ORDER = ["r0", "r1", "r2", "r3"]
REVERSED = ["r3", "r2", "r1", "r0"]


@pytest.fixture(params=["file", "s3"])
def face(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    """An empty folder in local files, or in a bucket of the emulator's S3 face."""
    if request.param == "file":
        return Where("file", f"file://{tmp_path}/root", None)
    emulator: Emulator = request.getfixturevalue("emulator")
    bucket: str = request.getfixturevalue("bucket")
    return Where("s3", f"s3://{bucket}/root", None, {"endpoint": emulator.s3_endpoint},
                 emulator)


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The shards datasets index by streaming them (not from a sidecar or the cache)."""
    names: list[str] = []
    real = _build.stream_index

    def counting(store: Any, info: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(info.name.rsplit("/", 1)[-1])
        return real(store, info, *args, **kwargs)

    monkeypatch.setattr(_build, "stream_index", counting)
    return names


def write_shard(where: Where) -> int:
    """``a-0.tar`` of the samples in order, with its sidecar, by ShardWriter; its size."""
    with ShardWriter(where.url("a-%d.tar"), max_count=4, **where.kwargs) as sink:
        for key, fields in repack_samples(range(4)):
            sink.write({"__key__": key, **fields})
    assert sink.shards == [where.url("a-0.tar")]
    return len(tar_shard(repack_samples(range(4))))


def rewrite(where: Where, name: str, data: bytes) -> None:
    """``name``'s bytes replaced by a tool that records no crc32c."""
    if where.scheme == "file":
        rewrite_file(Path("/" + where.bucket) / (where.base + name), data)
    else:
        where.put(name, data)  # a new object: a new ETag, no crc32c in listings


def dataset(where: Where, tmp_path: Path) -> ShardDataset:
    return ShardDataset.from_prefix(where.root, order=Order(shuffle=False),
                                    reads=ShardReads(index_dir=tmp_path / "idx"),
                                    settings=where.settings())


def keys_and_bytes(ds: ShardDataset) -> list[tuple[str, bytes]]:
    return [(s["__key__"], s["bin"]) for s in ds]


def expected(order: list[int]) -> list[tuple[str, bytes]]:
    return [(key, fields["bin"]) for key, fields in repack_samples(order)]


def test_a_shard_repacked_to_its_size_is_indexed_again_not_cut_by_its_sidecar(
        face: Where, tmp_path: Path, streamed: list[str]) -> None:
    # Where the store reports no crc32c the sidecar was matched by size alone:
    # every sample of the repacked shard failed its crc32c, from the sidecar
    # and then from the cache entry made of it, until both were deleted by hand.
    size = write_shard(face)
    first = dataset(face, tmp_path)
    assert keys_and_bytes(first) == expected([0, 1, 2, 3]) and streamed == []
    assert first._shards.infos[0].size == size
    repacked = tar_shard(repack_samples([3, 2, 1, 0]))
    assert len(repacked) == size
    rewrite(face, "a-0.tar", repacked)
    assert keys_and_bytes(dataset(face, tmp_path)) == expected([3, 2, 1, 0])
    assert streamed == ["a-0.tar"]
    # Indexed once: the map-style dataset takes the cache.
    table = ShardMapDataset.from_prefix(face.root, reads=ShardReads(index_dir=tmp_path / "idx"),
                                        settings=face.settings())
    assert [table[i]["__key__"] for i in range(4)] == REVERSED
    assert streamed == ["a-0.tar"]


def test_an_index_cached_from_a_stale_sidecar_is_not_taken(tmp_path: Path,
                                                          streamed: list[str]) -> None:
    # Where the stale sidecar was taken, its index went to the cache under the
    # shard's new version (the entry as it was keyed then): it must not count.
    where = Where("file", f"file://{tmp_path}/root", None)
    write_shard(where)
    rewrite(where, "a-0.tar", tar_shard(repack_samples([3, 2, 1, 0])))
    store = LocalStore()
    info = call(store.stat(where.bucket, where.base + "a-0.tar"))
    assert info.crc32c is None
    stale = decode_index(call(store.read(where.bucket, where.base + "a-0.tar" + INDEX_SUFFIX)),
                         "sidecar")
    stale.version = info.generation
    key = hashlib.sha256(f"{info.url}\n{info.generation}".encode()).hexdigest()[:32]
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / f"{key}{INDEX_SUFFIX}").write_bytes(encode_index(stale))
    assert keys_and_bytes(dataset(where, tmp_path)) == expected([3, 2, 1, 0])
    assert streamed == ["a-0.tar"]


def test_local_copies_keep_their_sidecar_or_are_indexed_again_once(
        tmp_path: Path, streamed: list[str]) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    write_shard(where)
    # As cp -a: the times (in ns) and the crc32c aioflux recorded in an xattr come along.
    shutil.copytree(tmp_path / "root", tmp_path / "kept")
    kept = Where("file", f"file://{tmp_path}/kept", None)
    assert keys_and_bytes(dataset(kept, tmp_path)) == expected([0, 1, 2, 3])
    assert streamed == []
    # As cp -r, later: another version and no crc32c, nothing to hold the
    # sidecar to. Indexed again, once per machine (then from the cache).
    (tmp_path / "plain").mkdir()
    for name in ("a-0.tar", "a-0.tar" + INDEX_SUFFIX):
        original = tmp_path / "root" / name
        shutil.copyfile(original, tmp_path / "plain" / name)
        later = original.stat().st_mtime_ns + 1_000_000_000
        os.utime(tmp_path / "plain" / name, ns=(later, later))
    plain = Where("file", f"file://{tmp_path}/plain", None)
    assert keys_and_bytes(dataset(plain, tmp_path)) == expected([0, 1, 2, 3])
    assert streamed == ["a-0.tar"]
    assert dataset(plain, tmp_path).counts == [4] and streamed == ["a-0.tar"]


def test_an_s3_copy_under_another_etag_keeps_its_sidecar_by_crc32c(
        emulator: Emulator, bucket: str, sync_client: Client, tmp_path: Path,
        streamed: list[str]) -> None:
    # The listing has no crc32c and the version (ETag) changed: the object's
    # metadata has the crc32c, which is the sidecar's.
    where = Where("s3", f"s3://{bucket}/root", None, {"endpoint": emulator.s3_endpoint},
                  emulator)
    write_shard(where)
    data = sync_client.read(bucket, "root/a-0.tar")
    # As a copy uploaded in parts: the same bytes and crc32c, another ETag.
    emulator.store.put(bucket, "copy/a-0.tar", data,
                       etag=hashlib.md5(b"parts").hexdigest() + "-2")
    emulator.store.put(bucket, "copy/a-0.tar" + INDEX_SUFFIX,
                       sync_client.read(bucket, "root/a-0.tar" + INDEX_SUFFIX))
    assert emulator.store.get(bucket, "copy/a-0.tar").etag != \
        emulator.store.get(bucket, "root/a-0.tar").etag
    copy = Where("s3", f"s3://{bucket}/copy", None, where.kwargs, emulator)
    ds = dataset(copy, tmp_path)
    assert keys_and_bytes(ds) == expected([0, 1, 2, 3]) and streamed == []
    assert ds._shards.infos[0].crc32c is None  # listed


def test_an_index_matches_by_crc32c_where_both_know_one_else_by_version() -> None:
    index = ShardIndex("tar", None, 100, 7, 5, 100, *new_columns())
    assert index.matches(100, 7, 9)  # a copy: another version, the same crc32c
    assert not index.matches(100, 8, 5)  # rewritten in place under its version
    assert index.matches(100, None, 5) and not index.matches(100, None, 6)
    assert not index.matches(101, None, 5)
    # Neither crc32c nor version to hold it to: the size alone proves nothing.
    assert not dataclasses.replace(index, crc32c=None, version=None).matches(100, None, None)
    assert not dataclasses.replace(index, crc32c=None).matches(100, 7, 6)


def test_a_shard_listed_without_crc32c_is_indexed_checked_against_its_stat(
        emulator: Emulator, bucket: str, tmp_path: Path, streamed: list[str]) -> None:
    # An S3 listing carries no crc32c: the stream that builds the index was
    # checked against nothing, so bytes that are not the object's (here an
    # object whose stored crc32c its bytes no longer have) were indexed as
    # they came, and every sample then "matched" them.
    import google_crc32c

    from aioflux import ChecksumMismatch

    data = tar_shard(repack_samples(range(4)))
    emulator.store.put(bucket, "rot/a-0.tar", data, with_md5=False,
                       crc32c=google_crc32c.value(data) ^ 1,
                       etag=hashlib.md5(b"parts").hexdigest() + "-2")
    where = Where("s3", f"s3://{bucket}/rot", None, {"endpoint": emulator.s3_endpoint},
                  emulator)
    with pytest.raises(ChecksumMismatch, match=rf"s3://{bucket}/rot/a-0.tar"):
        keys_and_bytes(dataset(where, tmp_path))
    assert streamed == ["a-0.tar"]


def test_a_sidecars_samples_have_their_headers_checked_and_a_built_index_not_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamed: list[str]) -> None:
    # Anyone may write a sidecar: its regions' headers are checked as they
    # are read. An index built here checked them as it was built.
    where = Where("file", f"file://{tmp_path}/root", None)
    write_shard(where)
    read_by: list[str] = []
    for name in ("plain_fields", "checked_fields"):
        real = getattr(_tar, name)
        monkeypatch.setattr(_tar, name, lambda *block, real=real, name=name: (
            read_by.append(name), real(*block))[1])
    assert keys_and_bytes(dataset(where, tmp_path / "a")) == expected([0, 1, 2, 3])
    assert streamed == [] and set(read_by) == {"plain_fields"}
    (tmp_path / "root" / "a-0.tar.idx").unlink()
    read_by.clear()
    assert keys_and_bytes(dataset(where, tmp_path / "b")) == expected([0, 1, 2, 3])
    assert streamed == ["a-0.tar"] and set(read_by) == {"checked_fields"}
