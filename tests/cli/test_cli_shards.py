"""``aioflux shards ls|index|verify`` against the emulator and local files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from aioflux import Client
from aioflux._engines.shards import FORMATS, INDEX_SUFFIX, _build, encode_index, stream_index
from aioflux.testing import Emulator
from aioflux.torch import DatasetSettings, Order, ShardDataset, ShardReads, ShardWriter
from tests.torch._shards_util import repack_samples, rewrite_file, tar_shard


def write_shards(url: str, count: int, per_shard: int, **kwargs: Any) -> list[str]:
    with ShardWriter(url, max_count=per_shard, **kwargs) as sink:
        for i in range(count):
            sink.write({"__key__": f"k{i:04d}", "bin": bytes([i % 256]) * (50 + i),
                        "cls": i % 3})
    return sink.shards


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every shard a dataset indexes by streaming it (rather than from a sidecar)."""
    streamed: list[str] = []
    real = _build.stream_index

    def counting(store: Any, info: Any, *args: Any, **kwargs: Any) -> Any:
        streamed.append(info.url)
        return real(store, info, *args, **kwargs)

    monkeypatch.setattr(_build, "stream_index", counting)
    return streamed


def test_ls_index_then_the_dataset_reads_only_sidecars(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, sync_client: Client,
        counted: list[str]) -> None:
    shards = write_shards(f"gs://{bucket}/ds/train-%03d.tar", 11, 4, index=False,
                          endpoint=emulator.endpoint)
    sync_client.write(bucket, "ds/notes.txt.idx", b"a stray sidecar is not a shard")
    code, out, err = run("shards", "ls", f"gs://{bucket}/ds/")
    assert code == 0, err
    assert rows(out)[:3] == [["-", str(info.size), "none", info.url]
                             for info in (sync_client.stat(bucket, f"ds/train-{n:03d}.tar")
                                          for n in range(3))]
    assert rows(out)[3][:5] == ["0", "30720", "total", "3", "shards"]
    assert "3 without a matching index" in out

    code, out, err = run("shards", "index", f"gs://{bucket}/ds/")
    assert code == 0, err
    assert rows(out) == [["4", "indexed", shards[0]], ["4", "indexed", shards[1]],
                         ["3", "indexed", shards[2]], ["indexed", "3", "shards,", "0",
                                                       "already", "indexed"]]
    for n in range(3):
        info = sync_client.stat(bucket, f"ds/train-{n:03d}.tar")
        assert sync_client.read(bucket, info.name + INDEX_SUFFIX) == \
            encode_index(stream_index(sync_client.aio, info, FORMATS["tar"]))
    counted.clear()  # the streaming above

    code, out, _ = run("shards", "ls", "--json", f"gs://{bucket}/ds/")
    listed = json.loads(out)
    assert [(r["samples"], r["index"]) for r in listed["shards"]] == [(4, "ok"), (4, "ok"),
                                                                       (3, "ok")]
    assert listed["total"] == {"shards": 3, "indexed": 3, "samples": 11, "bytes": 30720}

    # The dataset takes every index from the sidecars: no shard is streamed.
    ds = ShardDataset(shards, order=Order(shuffle=False), reads=ShardReads(cache_indexes=False),
                      settings=DatasetSettings(endpoint=emulator.endpoint))
    assert ds.counts == [4, 4, 3] and counted == []
    assert [s["cls"] for s in ds] == [str(i % 3).encode() for i in range(11)]
    # Without sidecars the same dataset streams each shard once: the count above is real.
    ShardDataset(shards, reads=ShardReads(cache_indexes=False, sidecars=False),
                 settings=DatasetSettings(endpoint=emulator.endpoint))
    assert counted == shards

    code, out, _ = run("shards", "index", f"gs://{bucket}/ds/")
    assert (code, rows(out)) == (0, [["indexed", "0", "shards,", "3", "already", "indexed"]])
    code, out, _ = run("shards", "index", "--force", f"gs://{bucket}/ds/train-{{000..001}}.tar")
    assert code == 0 and rows(out)[-1][:2] == ["indexed", "2"]


def test_verify_passes_good_shards_and_names_a_truncated_one(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, sync_client: Client) -> None:
    shards = write_shards(f"gs://{bucket}/v/s-%d.tar", 9, 3, endpoint=emulator.endpoint)
    with ShardWriter(f"gs://{bucket}/v/t-%d.jsonl.gz", format="lines", max_count=2,
                     endpoint=emulator.endpoint) as sink:
        for i in range(5):
            sink.write({"i": i})
    code, out, err = run("shards", "verify", f"gs://{bucket}/v/")
    assert code == 0, out + err
    assert [r[:2] for r in rows(out)[:-1]] == [["ok", "3"]] * 3 + [["ok", "2"], ["ok", "2"],
                                                                   ["ok", "1"]]
    assert out.splitlines()[-1] == "verified 6 shards, 14 samples in the good ones: all good"

    # The middle shard cut inside its second sample's data (sidecar left as it was).
    whole = sync_client.read(bucket, "v/s-1.tar")
    emulator.store.put(bucket, "v/s-1.tar", whole[:2000])
    code, _, err = run("shards", "verify", f"gs://{bucket}/v/s-")  # a name prefix: no folder
    assert code == 1 and "no shards there" in err
    code, out, _ = run("shards", "verify", "--format", "tar", f"gs://{bucket}/v/s-{{0..2}}.tar")
    assert code == 1
    bad = [line for line in out.splitlines() if line.startswith("BAD")]
    assert len(bad) == 1 and bad[0].startswith(f"BAD  {shards[1]}: ")
    assert "byte" in bad[0] and shards[1] in bad[0].split(": ", 1)[1]
    assert out.splitlines()[-1].endswith("1 bad")


def test_verify_finds_a_flipped_byte_in_a_local_shard(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shards = write_shards(str(tmp_path / "local-%d.tar"), 6, 3)
    path = tmp_path / "local-1.tar"
    written = path.stat().st_mtime_ns
    data = bytearray(path.read_bytes())
    assert data[512 + 10] == 3  # shard 1's sample 0 (k0003): a byte of its "bin" field
    data[512 + 10] ^= 0xFF
    # As another tool would, later: the file's recorded crc32c no longer
    # applies, and its version (modification time) is not the indexed one.
    rewrite_file(path, bytes(data))
    code, out, _ = run("shards", "verify", str(tmp_path))
    assert code == 1
    (bad,) = [line for line in out.splitlines() if line.startswith("BAD")]
    assert bad.startswith(f"BAD  {shards[1]}: verify {shards[1]}: the index "
                          f"{shards[1]}{INDEX_SUFFIX} is of a tar shard, ")
    assert "not this one" in bad
    assert out.splitlines()[-1] == "verified 2 shards, 3 samples in the good ones: 1 bad"
    # With its old time back the file passes for what aioflux wrote: where the
    # filesystem keeps the recorded crc32c, the read itself fails on it.
    os.utime(path, ns=(written, written))
    code, out, _ = run("shards", "verify", str(path))
    assert code == 1 and out.startswith(f"BAD  {shards[1]}: ")
    # Where it keeps none, the sidecar is of this version: verify holds the
    # shard against it sample by sample.
    with contextlib.suppress(OSError):
        os.removexattr(path, "user.aioflux.crc32c")
    code, out, _ = run("shards", "verify", str(tmp_path))
    assert code == 1
    (bad,) = [line for line in out.splitlines() if line.startswith("BAD")]
    assert bad == (f"BAD  {shards[1]}: verify {shards[1]}: its index {shards[1]}{INDEX_SUFFIX}: "
                   f"sample 0 at byte 0 does not match (crc32c "
                   f"{bad.split('crc32c ')[1].split(' ')[0]} != "
                   f"{bad.split('!= ')[1]}")


def test_a_stale_sidecar_is_reported_and_index_replaces_it(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, sync_client: Client) -> None:
    (shard,) = write_shards(f"gs://{bucket}/st/a-%d.tar", 2, 5, endpoint=emulator.endpoint)
    sidecar = sync_client.read(bucket, "st/a-0.tar.idx")
    write_shards(f"gs://{bucket}/st/a-%d.tar", 3, 5, endpoint=emulator.endpoint, index=False)
    code, out, _ = run("shards", "ls", f"gs://{bucket}/st/a-0.tar")
    assert rows(out)[0] == ["-", "10240", "stale", shard]
    code, out, _ = run("shards", "verify", f"gs://{bucket}/st/a-0.tar")
    assert code == 1 and "not this one" in out
    assert run("shards", "index", f"gs://{bucket}/st/")[0] == 0
    assert sync_client.read(bucket, "st/a-0.tar.idx") != sidecar
    assert run("shards", "verify", f"gs://{bucket}/st/")[0] == 0
    # A damaged sidecar is reported too.
    damaged = bytearray(sync_client.read(bucket, "st/a-0.tar.idx"))
    damaged[-1] ^= 1
    sync_client.write(bucket, "st/a-0.tar.idx", bytes(damaged))
    code, out, _ = run("shards", "verify", f"gs://{bucket}/st/")
    assert code == 1
    assert f"BAD  {shard}: read index {shard}{INDEX_SUFFIX}: damaged" in out


def test_format_by_name_or_flag(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "log-0.log").write_bytes(b"one\ntwo\n")
    code, _, err = run("shards", "index", str(tmp_path))
    assert code == 2 and "pass --format" in err
    code, out, err = run("shards", "index", "--format", "lines", str(tmp_path))
    assert code == 0, err
    assert rows(out)[0][:2] == ["2", "indexed"]
    code, out, _ = run("shards", "ls", "--format", "lines", str(tmp_path))
    assert rows(out)[0][:3] == ["2", "8", "ok"]
    code, _, err = run("shards", "ls", str(tmp_path / "missing-{0..1}.tar"))
    # The shards are stat-ed concurrently and the first failure ends the
    # command: either missing shard may be the one named.
    assert code == 1 and re.search(r"stat file://\S+/missing-[01]\.tar failed", err), err


@pytest.mark.parametrize("scheme", ["file", "s3"])
def test_a_shard_repacked_to_its_size_has_a_stale_sidecar_until_index_renews_it(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, sync_client: Client, tmp_path: Path,
        scheme: str) -> None:
    # Where the store reports no crc32c (local files other tools write, S3
    # listings) ls called the sidecar ok by its size alone.
    local = scheme == "file"
    root = str(tmp_path / "re") if local else f"s3://{bucket}/re"
    face = {} if local else {"endpoint": emulator.s3_endpoint}
    with ShardWriter(f"{root}/a-%d.tar", max_count=4, **face) as sink:
        for key, fields in repack_samples(range(4)):
            sink.write({"__key__": key, **fields})
    (shard,) = sink.shards
    repacked = tar_shard(repack_samples([3, 2, 1, 0]))
    size = str(len(repacked))

    def cli(*argv: str) -> tuple[int, str, str]:
        return run("shards", *argv, *(() if local else ("--s3-endpoint", emulator.s3_endpoint)))  # type: ignore[no-any-return]

    code, out, err = cli("ls", root)
    assert (code, rows(out)[0]) == (0, ["4", size, "ok", shard]), err
    if local:
        rewrite_file(tmp_path / "re" / "a-0.tar", repacked)
    else:
        emulator.store.put(bucket, "re/a-0.tar", repacked)
    code, out, err = cli("ls", root)
    assert (code, rows(out)[0]) == (0, ["-", size, "stale", shard]), err
    code, out, _ = cli("verify", root)
    assert code == 1 and f"BAD  {shard}: " in out and "not this one" in out
    code, out, err = cli("index", root)
    assert (code, rows(out)[0]) == (0, ["4", "indexed", shard]), err
    code, out, _ = cli("ls", root)
    assert rows(out)[0] == ["4", size, "ok", shard]
    assert cli("verify", root)[0] == 0
    if not local:
        # A copy under another ETag (uploaded in parts) has the crc32c its sidecar records.
        emulator.store.put(bucket, "cp/a-0.tar", repacked,
                           etag=hashlib.md5(b"parts").hexdigest() + "-2")
        emulator.store.put(bucket, "cp/a-0.tar" + INDEX_SUFFIX,
                           sync_client.read(bucket, "re/a-0.tar" + INDEX_SUFFIX))
        code, out, _ = cli("ls", f"s3://{bucket}/cp/")
        assert rows(out)[0] == ["4", size, "ok", f"s3://{bucket}/cp/a-0.tar"]
