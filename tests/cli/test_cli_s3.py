"""The CLI on ``s3://`` URLs, against moto's S3 server (a third-party S3).

``--s3-endpoint`` (or ``AWS_ENDPOINT_URL_S3``) points the S3 store at moto;
the ``run`` fixture also passes ``--endpoint`` for ``gs://`` URLs (our
emulator), so copies between all three stores run in one command.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aioflux import Client, ClientConfig
from aioflux._core.concurrency.portal import call
from aioflux._core.integrity.crc import crc32c
from aioflux.cli import main
from aioflux.s3 import S3Store
from aioflux.s3._multipart import Multipart
from aioflux.s3._store import S3Store as _S3Store
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket

T = TypeVar("T")


@dataclass
class S3Bucket:
    """A fresh bucket on moto, with a store driven on the portal loop."""

    store: S3Store
    name: str
    endpoint: str

    def do(self, coro: Coroutine[Any, Any, T]) -> T:
        return call(coro)

    def put(self, key: str, body: bytes) -> None:
        self.do(self.store.write(self.name, key, body))

    def get(self, key: str) -> bytes:
        return self.do(self.store.read(self.name, key))

    def keys(self, prefix: str = "") -> list[str]:
        async def collect() -> list[str]:
            return [o.name async for o in self.store.list_objects(self.name, prefix)]

        return self.do(collect())


@pytest.fixture
def s3(moto_s3: MotoS3) -> Iterator[S3Bucket]:
    store = S3Store(ClientConfig(max_concurrency=32, retry=FAST_RETRY),
                    endpoint=moto_s3.endpoint)
    name = unique_bucket("cli")
    call(store.create_bucket(name))
    try:
        yield S3Bucket(store, name, moto_s3.endpoint)
    finally:
        call(store.aclose())


@pytest.fixture
def s3run(run, s3: S3Bucket):  # type: ignore[no-untyped-def]
    """``run`` with ``--s3-endpoint`` pointing at moto."""

    def invoke(*argv: str) -> tuple[int, str, str]:
        return run(*argv, "--s3-endpoint", s3.endpoint)  # type: ignore[no-any-return]

    return invoke


def test_ls_stat_cat_du_follow_the_url_rule_on_s3(s3run, s3: S3Bucket) -> None:  # type: ignore[no-untyped-def]
    b = s3.name
    for key, body in (("a", b"A"), ("a/x", b"xx"), ("a/sub/y", b"yyy"), ("a2", b"2222")):
        s3.put(key, body)

    code, out, err = s3run("ls", f"s3://{b}/a")
    assert (code, err) == (0, "")
    # The object "a" and what the folder "a/" holds; never "a2".
    assert out.splitlines() == [f"s3://{b}/a", f"s3://{b}/a/sub/", f"s3://{b}/a/x"]

    code, out, _ = s3run("ls", "-r", f"s3://{b}/a")
    assert out.splitlines() == [f"s3://{b}/a", f"s3://{b}/a/sub/y", f"s3://{b}/a/x"]

    code, out, _ = s3run("ls", "--json", f"s3://{b}/a/")
    rows = json.loads(out)
    assert [r.get("url") or r["prefix"] for r in rows] == [f"s3://{b}/a/sub/", f"s3://{b}/a/x"]
    assert rows[1]["size"] == 2

    code, out, _ = s3run("stat", f"s3://{b}/a/x")
    info = json.loads(out)
    assert (code, info["url"], info["size"], info["crc32c"]) == (0, f"s3://{b}/a/x", 2,
                                                                crc32c(b"xx"))

    assert s3run("cat", f"s3://{b}/a/sub/y")[:2] == (0, "yyy")

    code, out, _ = s3run("du", "--json", f"s3://{b}/a")
    assert (code, json.loads(out)) == (0, {"url": f"s3://{b}/a", "objects": 3, "bytes": 6})


def test_missing_s3_objects_fail_in_one_line(s3run, s3: S3Bucket) -> None:  # type: ignore[no-untyped-def]
    for argv in (["stat", f"s3://{s3.name}/nope"], ["rm", f"s3://{s3.name}/nope"],
                 ["cat", f"s3://{s3.name}/nope"], ["cp", f"s3://{s3.name}/nope", "/tmp/x"],
                 ["ls", f"s3://{s3.name}/nope"], ["du", f"s3://{s3.name}/nope"]):
        code, out, err = s3run(*argv)
        assert (code, out) == (1, ""), argv
        assert err.startswith(f"aioflux {argv[0]}: ") and "nope" in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cp_between_every_pair_of_stores(s3run, s3: S3Bucket, sync_client: Client,  # type: ignore[no-untyped-def]
                                         bucket: str, tmp_path: Path) -> None:
    # One object above cp's streaming threshold (ranged reads into a
    # multipart upload), the others in one read and one write.
    files = {"big": os.urandom(17 * 1024 * 1024 + 5), "small": b"s" * 1000,
             "deep/er/f": b"deep"}
    src = tmp_path / "src"
    for rel, body in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(body)
    chain = [str(src), f"s3://{s3.name}/one", f"gs://{bucket}/two", f"s3://{s3.name}/three",
             str(tmp_path / "back")]
    for a, b in itertools.pairwise(chain):
        code, out, err = s3run("cp", "-r", a, b)
        assert (code, err) == (0, ""), (a, b, err)
        assert out == f"copied 3 file(s), {sum(map(len, files.values()))} bytes\n"
    for rel, body in files.items():
        assert s3.get(f"one/{rel}") == body
        assert sync_client.read(bucket, f"two/{rel}") == body
        assert s3.get(f"three/{rel}") == body  # within S3: CopyObject
        assert (tmp_path / "back" / rel).read_bytes() == body
    # One object, into a "folder" URL: it keeps its base name.
    assert s3run("cp", f"gs://{bucket}/two/deep/er/f", f"s3://{s3.name}/dir/")[0] == 0
    assert s3.get("dir/f") == b"deep"
    assert s3.keys("one/") == ["one/big", "one/deep/er/f", "one/small"]


def test_rm_r_deletes_in_batches_and_never_a_sibling(s3run, s3: S3Bucket,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [f"a/{i:05d}" for i in range(1001)]

    async def seed() -> None:
        from aioflux._core.concurrency.window import gather_bounded

        await gather_bounded((s3.store.write(s3.name, k, k.encode()) for k in keys), 32)

    s3.do(seed())
    s3.put("a", b"the object a")
    s3.put("a2", b"a sibling")
    batches: list[int] = []
    singles: list[str] = []
    batch, single = Multipart.delete_batch, _S3Store._delete_request

    async def counted_batch(self: Multipart, bucket: str, names: Any) -> None:
        batches.append(len(names))
        await batch(self, bucket, names)

    async def counted_single(self: _S3Store, bucket: str, name: str, etag: str | None) -> None:
        singles.append(name)
        await single(self, bucket, name, etag)

    monkeypatch.setattr(Multipart, "delete_batch", counted_batch)
    monkeypatch.setattr(_S3Store, "_delete_request", counted_single)
    code, out, err = s3run("rm", "-r", f"s3://{s3.name}/a")
    assert (code, out, err) == (0, "removed 1002 object(s)\n", "")
    # 1002 objects in two DeleteObjects requests (1000 keys at most each),
    # not 1002 DELETEs.
    assert (sorted(batches), singles) == ([2, 1000], [])
    assert s3.keys() == ["a2"]
    # A named object is deleted alone, so that a missing one fails.
    assert s3run("rm", f"s3://{s3.name}/a2")[:2] == (0, "removed 1 object(s)\n")
    assert (singles, s3.keys()) == (["a2"], [])


def test_clean_aborts_abandoned_multipart_uploads_on_s3(s3run, s3: S3Bucket) -> None:  # type: ignore[no-untyped-def]
    async def abandon(key: str) -> str:
        upload = s3.store.start_upload(s3.name, key, content_type="application/octet-stream",
                                       part_size=5 * 1024 * 1024)
        await upload.put(1, memoryview(bytes(5 * 1024 * 1024)))
        (found,) = [u for u in await s3.store.list_multipart_uploads(s3.name) if u.name == key]
        return found.upload_id

    upload_id = s3.do(abandon("ckpt/killed.pt"))
    s3.put("ckpt/kept.pt", b"published")

    code, out, _ = s3run("clean", "--dry-run", "--older-than", "0", f"s3://{s3.name}")
    assert code == 0
    assert f"would abort upload {upload_id} of s3://{s3.name}/ckpt/killed.pt" in out
    assert len(s3.do(s3.store.list_multipart_uploads(s3.name))) == 1

    code, out, _ = s3run("clean", "--older-than", "0", f"s3://{s3.name}")
    assert code == 0, out
    assert f"aborted upload {upload_id} of s3://{s3.name}/ckpt/killed.pt" in out
    assert out.splitlines()[-1].startswith("0 composed objects, 1 multipart uploads")
    assert s3.do(s3.store.list_multipart_uploads(s3.name)) == []
    assert s3.keys() == ["ckpt/kept.pt"]


def test_the_s3_endpoint_comes_from_the_aws_environment(run, s3: S3Bucket,  # type: ignore[no-untyped-def]
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    s3.put("k", b"v")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    assert run("ls", f"s3://{s3.name}")[:2] == (0, f"s3://{s3.name}/k\n")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    assert run("cat", f"s3://{s3.name}/k")[:2] == (0, "v")


def test_ckpt_list_reads_an_s3_root(s3run, s3: S3Bucket) -> None:  # type: ignore[no-untyped-def]
    code, out, err = s3run("ckpt", "list", f"s3://{s3.name}/run")
    assert (code, out) == (1, "")
    assert err == f"aioflux ckpt: ckpt list s3://{s3.name}/run/: no complete checkpoints under it\n"


def test_a_bucket_name_s3_refuses_is_a_usage_error(s3run) -> None:  # type: ignore[no-untyped-def]
    code, out, err = s3run("ls", "s3://x")
    assert (code, out) == (2, "")
    assert err == ("aioflux ls: error: argument url: bucket of 's3://x': invalid S3 bucket "
                   "name 'x': use 3-63 lowercase letters, digits, '-' or '.' "
                   "(see aioflux ls --help)\n")



def test_region_and_endpoint_flags_reach_the_s3_store(s3run, s3: S3Bucket,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux._api import stores

    made: list[Any] = []
    build = stores.BACKENDS["s3"]

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(build(*args, **kwargs))
        return made[-1]

    # The scheme table builds every s3:// store the command line makes.
    monkeypatch.setitem(stores.BACKENDS, "s3", recording)
    s3.put("k", b"v")
    code, out, _ = s3run("ls", "--region", "eu-central-1", "--concurrency", "3",
                         f"s3://{s3.name}")
    assert (code, out) == (0, f"s3://{s3.name}/k\n")
    (store,) = made
    assert isinstance(store, S3Store)
    assert (store.region, store.endpoint, store.config.max_concurrency) == (
        "eu-central-1", s3.endpoint, 3)
    # Requests are signed for the region given, not the environment's.
    assert store.endpoints.region_of_url(store.object_url(s3.name, "k")) == "eu-central-1"


def test_cp_streams_what_a_store_declares_it_cannot_copy(s3run, s3: S3Bucket,  # type: ignore[no-untyped-def]
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from aioflux.s3 import _store

    # A store declaring a copy limit (S3 declares none: past CopyObject's
    # 5 GiB it copies in parts): with the limit at 1 MiB here, a 17 MiB
    # object streams (ranged reads into a multipart upload) instead.
    monkeypatch.setattr(_S3Store, "features",
                        dataclasses.replace(_store.FEATURES, copy_limit=1024 * 1024))
    copied: list[str] = []
    copy = _S3Store.copy

    async def counted(self: _S3Store, *args: Any) -> Any:
        copied.append(args[1])
        return await copy(self, *args)

    monkeypatch.setattr(_S3Store, "copy", counted)
    big, small = os.urandom(17 * 1024 * 1024 + 3), b"small"
    s3.put("src/big", big)
    s3.put("src/small", small)
    code, out, err = s3run("cp", "-r", f"s3://{s3.name}/src", f"s3://{s3.name}/dst")
    assert out == f"copied 2 file(s), {len(big) + len(small)} bytes\n"
    assert (code, err) == (0, ""), err
    assert (s3.get("dst/big"), s3.get("dst/small")) == (big, small)
    assert copied == ["src/small"]  # only the small one went by CopyObject


def test_a_missing_aws_profile_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # The autouse _aws_env fixture points AWS_CONFIG_FILE at an empty temp path.
    monkeypatch.setenv("AWS_PROFILE", "nope")
    code = main(["ls", "s3://bkt/", "--s3-endpoint", "http://127.0.0.1:9",
                 "--region", "us-east-1"])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("aioflux ls: ") and "'nope'" in err and "AWS_PROFILE" in err


def test_cp_between_stores_keeps_the_content_type_and_metadata(  # type: ignore[no-untyped-def]
        s3run, s3: S3Bucket, sync_client: Client, bucket: str, tmp_path: Path) -> None:
    big = os.urandom(17 * 1024 * 1024)  # streams through a multipart upload
    sync_client.write(bucket, "src/small.csv", b"a,b\n", content_type="text/csv",
                      metadata={"k": "v"})
    sync_client.write(bucket, "src/big.csv", big, content_type="text/csv", metadata={"k": "v"})

    def attributes(store: S3Store | Client, where: str, name: str) -> tuple[Any, ...]:
        if isinstance(store, Client):
            info = store.stat(where, name)
        else:
            info = call(store.stat(where, name))
        return info.content_type, dict(info.metadata)

    # One object (stat), then a folder (a listing, which names neither).
    code, _, err = s3run("cp", f"gs://{bucket}/src/small.csv", f"s3://{s3.name}/one.csv")
    assert (code, err) == (0, "")
    assert attributes(s3.store, s3.name, "one.csv") == ("text/csv", {"k": "v"})
    code, _, err = s3run("cp", "-r", f"gs://{bucket}/src", f"s3://{s3.name}/tree")
    assert (code, err) == (0, "")
    assert attributes(s3.store, s3.name, "tree/small.csv") == ("text/csv", {"k": "v"})
    assert attributes(s3.store, s3.name, "tree/big.csv") == ("text/csv", {"k": "v"})
    assert s3.get("tree/big.csv") == big
    # And back from S3 to GCS (a listing again).
    code, _, err = s3run("cp", "-r", f"s3://{s3.name}/tree", f"gs://{bucket}/back")
    assert (code, err) == (0, "")
    assert attributes(sync_client, bucket, "back/small.csv") == ("text/csv", {"k": "v"})
    assert attributes(sync_client, bucket, "back/big.csv") == ("text/csv", {"k": "v"})
    # Files have neither: a download drops both, an upload is octet-stream.
    code, _, err = s3run("cp", "-r", f"gs://{bucket}/src", str(tmp_path / "down"))
    assert (code, err) == (0, "")
    assert (tmp_path / "down" / "big.csv").read_bytes() == big
    code, _, err = s3run("cp", str(tmp_path / "down" / "small.csv"), f"gs://{bucket}/up.csv")
    assert (code, err) == (0, "")
    assert attributes(sync_client, bucket, "up.csv") == ("application/octet-stream", {})


def test_ls_long_shows_the_etag_on_s3(s3run, s3: S3Bucket) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    s3.put("d/k", b"payload")
    code, out, err = s3run("ls", "-l", f"s3://{s3.name}/d/")
    assert (code, err) == (0, "")
    size, etag, _updated, url = out.split()
    # The ETag as S3 tools show it, not the 43-digit number it is as a generation.
    assert (int(size), etag, url) == (7, hashlib.md5(b"payload").hexdigest(),
                                      f"s3://{s3.name}/d/k")
    code, out, _ = s3run("stat", f"s3://{s3.name}/d/k")
    assert json.loads(out)["etag"] == etag


def test_cp_onto_itself_is_refused_on_s3(s3run, s3: S3Bucket) -> None:  # type: ignore[no-untyped-def]
    s3.put("d/k", b"payload")
    for dst in (f"s3://{s3.name}/d/k", f"s3://{s3.name}/d/"):
        code, out, err = s3run("cp", f"s3://{s3.name}/d/k", dst)
        assert (code, out) == (1, "")
        assert err == (f"aioflux cp: cp s3://{s3.name}/d/k: the source and destination are the "
                       "same object; nothing was copied\n")
    assert (s3.keys(), s3.get("d/k")) == (["d/k"], b"payload")


def test_an_empty_s3_bucket_matches_and_a_missing_one_fails(s3run, s3: S3Bucket) -> None:  # type: ignore[no-untyped-def]
    assert s3run("ls", f"s3://{s3.name}") == (0, "", "")
    assert s3run("du", f"s3://{s3.name}")[:2] == (0, f"0\t0 B\t0 objects\ts3://{s3.name}/\n")
    for argv in (["ls"], ["ls", "-r"], ["du"]):
        code, out, err = s3run(*argv, "s3://no-such-bucket-cli/x")
        assert (code, out) == (1, ""), argv
        assert err.startswith(f"aioflux {argv[0]}: list s3://no-such-bucket-cli/x"), err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize("etag_says", ["the truth", "a lie"])
def test_a_streamed_copy_without_a_crc32c_is_held_to_the_etag_s_md5(  # type: ignore[no-untyped-def]
        s3run, s3: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        etag_says: str) -> None:
    # Objects uploaded by boto3 or the AWS CLI have no crc32c: the MD5 their
    # plain ETag is checks the stream (a listed one is stat-ed for it), and
    # a mismatch publishes nothing.
    import aioflux.cli._copy as copy_mod

    monkeypatch.setattr(copy_mod, "STREAM_THRESHOLD", 1024)
    monkeypatch.setattr(copy_mod, "_CHUNK", 32 * 1024)
    data = os.urandom(100 * 1024 + 3)
    s3.put("src/big", data)  # one PUT: its ETag is its MD5
    stat = _S3Store.stat

    async def without_crc32c(self: _S3Store, *args: Any, **kwargs: Any) -> Any:
        info = await stat(self, *args, **kwargs)
        assert info.md5 is not None
        md5 = info.md5 if etag_says == "the truth" else "AAAAAAAAAAAAAAAAAAAAAA=="
        return info.replace(crc32c=None, md5=md5)

    monkeypatch.setattr(_S3Store, "stat", without_crc32c)
    for argv in (["cp", f"s3://{s3.name}/src/big", str(tmp_path / "one")],
                 ["cp", "-r", f"s3://{s3.name}/src", str(tmp_path / "tree")]):
        code, out, err = s3run(*argv)
        if etag_says == "the truth":
            assert (code, err) == (0, ""), err
        else:
            assert (code, out) == (1, "")
            assert "bytes read have MD5 " in err and "the object's ETag says AAAA" in err, err
    if etag_says == "the truth":
        assert (tmp_path / "one").read_bytes() == (tmp_path / "tree" / "big").read_bytes() == data
    else:
        assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
