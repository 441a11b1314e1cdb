"""Object names end to end: an object written under a name is read, listed,
copied and deleted under exactly that name on every store, or the name is
refused (``InvalidURL``) before any request; never another object's bytes,
another name, or another bucket.

Runs on the backends of the conformance tests (our emulator's GCS and S3
faces, fake-gcs-server, moto, the filesystem, ``MemoryStore``).
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import pytest

import aioflux
from aioflux import Client, InvalidURL, WriterOptions
from aioflux._core.records.urls import format_url
from aioflux._core.storage.protocol import delete_all
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux.testing import Emulator
from tests.backends import test_client_conformance as conformance
from tests.backends.test_client_conformance import Target, _part_size
from tests.conftest import unique_bucket

# The conformance tests' fixtures: every backend, a fresh bucket (or directory).
backend = conformance.backend
target = conformance.target

NAMES = [
    "a b", "a+b", "a%2Fb", "a%20b", "100%", "%zz", "a#b", "a?b", "a;b", "a=b&c", "~user",
    "a*b'(c)!", "a\\b", "[x]{y}", "a\tb", "a\x01b", "a\x7fb", "trailing ",
    unicodedata.normalize("NFC", "é"), unicodedata.normalize("NFD", "é"), "😀", "中文",
    "a//b", "./a", "a/./b", "a/../b", "x" * 200,
]
# Names the filesystem refuses (empty, "." or ".." segments), with InvalidURL.
NOT_PATHS = {"a//b", "./a", "a/./b", "a/../b"}
# Names Azure cannot keep as written ("\\" read as "/", "." and ".." segments
# resolved, control characters its XML listings cannot carry).
NOT_AZURE = {"a\\b", "a\x01b", "./a", "a/./b", "a/../b"}


def _refused(target: Target, name: str) -> bool:
    """Whether ``target``'s store refuses ``name`` before any request."""
    if target.kind == "local":
        return name in NOT_PATHS or bool({".", ".."} & set(name.split("/")))
    if target.kind == "azurite":
        return (name in NOT_AZURE or bool({".", ".."} & set(name.split("/")))
                or re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]", name) is not None)
    return False


def _id(name: str) -> str:
    return ascii(name)[1:-1][:24]


async def _names(target: Target, prefix: str) -> list[str]:
    return [o.name async for o in target.store.list_objects(target.bucket, target.n(prefix))]


@pytest.mark.parametrize("name", NAMES, ids=map(_id, NAMES))
async def test_a_name_round_trips(target: Target, name: str) -> None:
    store, bucket = target.store, target.bucket
    full, other = target.n("t/" + name), target.n("t/~other")
    data = os.urandom(1000)
    if _refused(target, name):
        with pytest.raises(InvalidURL):
            await store.write(bucket, full, data)
        assert await _names(target, "") == []
        return
    await store.write(bucket, other, b"other")
    await store.write(bucket, full, data)
    assert (await store.stat(bucket, full)).name == full
    assert await store.read(bucket, full) == data
    assert await store.read(bucket, full, start=10, end=20) == data[10:20]
    assert sorted(await _names(target, "t/")) == sorted([full, other])
    assert full in await _names(target, "t/" + name)
    # From the name on: a start offset is inclusive, on every store.
    listed = [o.name async for o in store.list_objects(bucket, target.n("t/"),
                                                        start_offset=full)]
    assert listed == sorted(n for n in (full, other) if n >= full)
    await store.copy(bucket, full, bucket, full + ".copy")
    assert await store.read(bucket, full + ".copy") == data
    await store.delete(bucket, full + ".copy")
    await store.delete(bucket, full)
    assert await _names(target, "t/") == [other]


async def test_names_of_1024_bytes_are_taken_and_longer_refused(target: Target) -> None:
    store, bucket = target.store, target.bucket
    if target.kind == "local":
        pytest.skip("a file name's limit is the filesystem's (test_local_races_and_pipes)")
    longest = "é" * 512  # 1024 bytes of UTF-8
    await store.write(bucket, longest, b"x")
    assert await _names(target, "") == [longest]
    with pytest.raises(InvalidURL, match="longer than 1024 bytes"):
        await store.write(bucket, longest + "x", b"y")
    assert await _names(target, "") == [longest]


@pytest.mark.parametrize("name", ["a b ", "a\t", "é ", "x\x01y"], ids=_id)
async def test_listing_from_a_start_offset_below_which_is_a_control_character(
        target: Target, name: str) -> None:
    # S3 lists from start-after (exclusive): the key sent just below "a b "
    # must not end in "\x1f", which moto echoes into XML no parser reads.
    store, bucket = target.store, target.bucket
    if _refused(target, name):
        with pytest.raises(InvalidURL):
            await store.write(bucket, target.n(name), b"x")
        return
    names = [target.n(n) for n in (name[:-1], name, name + "z")]
    for n in names:
        await store.write(bucket, n, b"x")
    listed = [o.name async for o in store.list_objects(bucket, target.prefix,
                                                        start_offset=target.n(name))]
    assert listed == names[1:]


@pytest.mark.parametrize("backend", ["s3", "s3-emulator"])
async def test_a_batch_delete_of_keys_xml_cannot_carry(target: Target) -> None:
    # A DeleteObjects body naming "a\x01b" is MalformedXML: the whole batch
    # failed, and `aioflux rm -r` with it.
    store, bucket = target.store, target.bucket
    doomed = ["a\x01b", "plain", "c\x1fd", "e\ufffe"]
    for name in [*doomed, "kept"]:
        await store.write(bucket, name, name.encode())
    await delete_all(store, bucket, doomed, concurrency=4)
    assert await _names(target, "") == ["kept"]


async def test_streaming_writes_publish_under_exactly_the_name(target: Target,
                                                                backend: str) -> None:
    # In parts: GCS's XML multipart URL kept "/" unquoted, and yarl resolved
    # "a/../b" to "b" before sending: the upload published "b" (and
    # "x/../../other/y" in another bucket). Answers naming "a\x01b" (S3's
    # and GCS's XML) could not be parsed.
    store, bucket = target.store, target.bucket
    part = _part_size(store)
    other_bucket = bucket + "-other"
    if target.kind not in ("local", "memory"):
        await store.create_bucket(other_bucket)  # type: ignore[attr-defined]
    names = ["a/../b", "a/./b", "./a", f"x/../../{other_bucket}/y", "a\x01b", "é a+b%2F#?"]
    written = []
    for name in names:
        data = os.urandom(2 * part + 7)
        if _refused(target, name):
            with pytest.raises(InvalidURL):
                AsyncObjectWriter(store, bucket, target.n(name))
            continue
        async with AsyncObjectWriter(store, bucket, target.n(name),
                                     options=WriterOptions(part_size=part)) as out:
            await out.write(data)
        assert await store.read(bucket, target.n(name)) == data, name
        written.append(target.n(name))
    assert sorted(await _names(target, "")) == sorted(written)
    if target.kind not in ("local", "memory"):
        assert [o async for o in store.list_objects(other_bucket)] == []
    if backend in ("emulator", "s3-emulator"):
        # Listed URL-encoded on S3 (moto encodes no upload listing); on GCS
        # such a name goes through a resumable session: no upload to list.
        upload = store.start_upload(bucket, target.n("open\x01"), part_size=part)
        await upload.put(1, memoryview(os.urandom(part)))
        try:
            uploads = await store.list_multipart_uploads(  # type: ignore[attr-defined]
                bucket, target.n("open"))
            multipart = getattr(upload, "mode", "multipart") == "multipart"
            assert [u.name for u in uploads] == ([target.n("open\x01")] if multipart else [])
        finally:
            await upload.abort()


@pytest.mark.parametrize(("mode", "compression"), [("wb", None), ("w", None), ("wb", "zstd")])
async def test_open_refuses_to_write_a_name_ending_in_a_slash(target: Target, mode: str,
                                                              compression: str | None) -> None:
    # On GCS and S3 it made a folder placeholder "newdir/": an object that
    # listings, datasets and `cp -r` to files skip (and a file cannot be).
    if target.kind == "memory":
        pytest.skip("no URL scheme reaches a MemoryStore")
    if compression:
        pytest.importorskip("zstandard")
    url = format_url(target.store.features.scheme, target.bucket, target.n("newdir/"))
    with pytest.raises(InvalidURL, match=re.escape(f"write {url}: the name ends in '/'")):
        aioflux.open(url, mode, client=target.store, compression=compression)
    assert await _names(target, "") == []
    if target.kind != "local":
        # The stores' own API still makes placeholders, as other tools do.
        await target.store.write(target.bucket, target.n("newdir/"), b"")
        assert await _names(target, "") == [target.n("newdir/")]


def test_cp_r_keeps_every_name_under_the_folder(run, emulator: Emulator,  # type: ignore[no-untyped-def]
                                                tmp_path: Path) -> None:
    # The destination names were StoreURL.join's, which drops empty
    # segments: "src//a" landed on "dst/a" over "src/a"'s copy, "src/d/" on
    # "dst/d", and cp reported every file copied.
    bucket = unique_bucket("names")
    emulator.create_bucket(bucket)
    objects = {"src/a": b"1", "src//a": b"2", "src/d/": b"3", "src/d": b"4", "src/e//f": b"5",
               "src/é a+b%2F#?": b"6"}
    with Client(endpoint=emulator.endpoint) as client:
        for name, data in objects.items():
            client.write(bucket, name, data)
        code, _, err = run("cp", "-r", f"gs://{bucket}/src", f"gs://{bucket}/dst")
        assert code == 0, err
        copied = {o.name: client.read(bucket, o.name) for o in client.list_objects(bucket, "dst")}
        assert copied == {"dst" + name[3:]: data for name, data in objects.items()}
        # On disk "a//b" has no place: each such object is refused alone (one
        # line, exit 1) and never lands on another's file ("src//a" on "a");
        # the rest is copied, as the listing brings it.
        code, _, err = run("cp", "-r", f"gs://{bucket}/src", str(tmp_path / "out"))
        refused = [line for line in err.splitlines() if "not a plain path" in line]
        assert code == 1 and len(refused) == 2, err
        assert "out//a'" in refused[0] and "out/e//f'" in refused[1] and "not copied" in refused[1]
        assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == {
            "a": b"1", "d": b"4", "é a+b%2F#?": b"6"}
        for name in ("src//a", "src/e//f"):
            client.delete(bucket, name)
        code, _, err = run("cp", "-r", f"gs://{bucket}/src", str(tmp_path / "out"))
        assert code == 0 and "placeholder" in err, err
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == {
        "a": b"1", "d": b"4", "é a+b%2F#?": b"6"}
