"""ShardWriter: shards (tar, lines) written to every store read back byte for byte,
with sidecars equal to what indexing the shard by streaming builds."""

from __future__ import annotations

import gc
import io
import json
import os
import shutil
import subprocess
import tarfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioflux import ClientConfig, InvalidArgument, WriterOptions, parse_url
from aioflux._core.concurrency.portal import call
from aioflux._core.storage.protocol import ObjectStore
from aioflux._engines.shards import (
    FORMATS,
    INDEX_SUFFIX,
    decode_index,
    encode_index,
    stream_index,
)
from aioflux._engines.shards._manifest import MANIFEST_NAME
from aioflux.local import LocalStore
from aioflux.local._files import path_of
from aioflux.testing import Emulator
from aioflux.torch import Order, ShardDataset, ShardReads, ShardWriter
from tests.conftest import FAST_RETRY
from tests.torch.conftest import Where

SHARD_SETTINGS: dict[str, Any] = {"order": Order(shuffle=False),
                                  "reads": ShardReads(cache_indexes=False)}


@pytest.fixture(params=["gs", "file", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    """An empty folder on each store (``where`` of conftest runs only some tests on s3)."""
    if request.param == "file":
        yield Where("file", f"file://{tmp_path}/root", None)
        return
    if request.param == "s3":
        yield request.getfixturevalue("s3_where")
        return
    from aioflux import Client

    emulator: Emulator = request.getfixturevalue("emulator")
    bucket: str = request.getfixturevalue("bucket")
    with Client(ClientConfig(max_concurrency=16, retry=FAST_RETRY),
                endpoint=emulator.endpoint) as client:
        yield Where("gs", f"gs://{bucket}/root", client, {"endpoint": emulator.endpoint},
                    emulator)


def local_path(url: str) -> Path:
    return Path(path_of(*parse_url(url)))


def tar_samples(count: int) -> list[dict[str, Any]]:
    """Samples with every kind of value, a two-dot field, a key deep enough for
    a pax long name and a non-ASCII key."""
    out: list[dict[str, Any]] = []
    for i in range(count):
        key = f"{'deep/' * 25 if i % 5 == 3 else ''}{'é' if i % 7 == 2 else ''}s{i:05d}"
        out.append({"__key__": key, "jpg": bytes([i % 256]) * (37 * i + 1), "cls": i % 10,
                    "txt": f"sample {i}", "json": {"i": i, "tags": ["a", "b"]},
                    "seg.png": bytearray(b"\x89PNG" * (i % 4)), "score": i / 8,
                    "__meta__": "not written"})
    return out


def as_read(sample: dict[str, Any], url: str) -> dict[str, Any]:
    """What a reader gives back for a written tar sample."""
    def raw(value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if isinstance(value, (dict, list)):
            return json.dumps(value).encode()
        return str(value).encode()

    fields = {k.lower(): raw(v) for k, v in sample.items() if not k.startswith("__")}
    return {"__key__": sample["__key__"], "__url__": url, **fields}


def sidecar_matches_streaming(store: ObjectStore, url: str, fmt: str) -> None:
    """The sidecar is, byte for byte, the index one streamed pass over the shard builds."""
    bucket, name = parse_url(url)
    info = call(store.stat(bucket, name))
    streamed = stream_index(store, info, FORMATS[fmt])
    sidecar = call(store.read(bucket, name + INDEX_SUFFIX))
    assert sidecar == encode_index(streamed)
    assert len(decode_index(sidecar, url)) == len(streamed) > 0


def test_tar_round_trip_on_every_store(backend: Where) -> None:
    samples = tar_samples(23)
    with ShardWriter(backend.url("train-%04d.tar"), max_count=10, **backend.kwargs) as w:
        for sample in samples:
            w.write(sample)
        assert w.count == 23
    assert w.shards == [backend.url(f"train-{n:04d}.tar") for n in range(3)]
    assert backend.names() == sorted([MANIFEST_NAME, *(f"train-{n:04d}.tar{s}" for n in range(3)
                                                       for s in ("", INDEX_SUFFIX))])
    for url in w.shards:
        sidecar_matches_streaming(backend.store, url, "tar")
    ds = ShardDataset(w.shards, **SHARD_SETTINGS, settings=backend.settings())
    assert ds.counts == [10, 10, 3]
    got = list(ds)
    expected = [as_read(s, w.shards[i // 10]) for i, s in enumerate(samples)]
    assert got == expected


def test_tar_bytes_are_tarfiles_and_list_with_tar(tmp_path: Path) -> None:
    samples = tar_samples(9)
    with ShardWriter(tmp_path / "one-{:02d}.tar") as w:
        for sample in samples:
            w.write(sample)
    (url,) = w.shards
    path = local_path(url)
    data = path.read_bytes()
    # What Python's tarfile writes for the same members, byte for byte.
    expected = io.BytesIO()
    with tarfile.open(fileobj=expected, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for sample in samples:
            for field, value in sorted(as_read(sample, "").items()):
                if field.startswith("__"):
                    continue
                info = tarfile.TarInfo(f"{sample['__key__']}.{field}")
                info.size, info.mode, info.uname, info.gname = len(value), 0o444, "bigdata", \
                    "bigdata"
                tar.addfile(info, io.BytesIO(value))
    assert data == expected.getvalue()
    members = [f"{s['__key__']}.{f}" for s in samples
               for f in sorted(k for k in s if not k.startswith("__"))]
    with tarfile.open(path) as tar:
        assert tar.getnames() == members
        assert all(m.mode == 0o444 and m.uname == "bigdata" and m.mtime == 0
                   for m in tar.getmembers())
    if shutil.which("tar") is None:
        pytest.skip("no tar command here")
    # GNU tar escapes the bytes of a non-ASCII name unless told not to (in the C locale).
    gnu = b"GNU tar" in subprocess.run(["tar", "--version"], capture_output=True).stdout
    listed = subprocess.run(["tar", *(["--quoting-style=literal"] if gnu else []), "-tf",
                             str(path)], capture_output=True, check=True)
    assert listed.stdout.decode().splitlines() == members


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_lines_round_trip(tmp_path: Path, compression: str | None) -> None:
    suffix = {None: "", "gzip": ".gz", "zstd": ".zst"}[compression]
    records: list[Any] = [{"text": f"line {i}", "n": i} for i in range(30)]
    records[4] = "a plain str line, ünïcode"
    records[9] = b"raw bytes \xff\x00 as they are"
    records[13] = [1, 2, 3]
    with ShardWriter(tmp_path / f"text-%03d.jsonl{suffix}", format="lines", max_count=12,
                     start_shard=7) as w:
        for record in records:
            w.write(record)
    assert [Path(parse_url(u).name).name for u in w.shards] == \
        [f"text-{n:03d}.jsonl{suffix}" for n in (7, 8, 9)]
    for url in w.shards:
        sidecar_matches_streaming(LocalStore(), url, "lines")
        index = decode_index(local_path(url + INDEX_SUFFIX).read_bytes(), url)
        assert index.compression == compression
    ds = ShardDataset(w.shards, format="lines", **SHARD_SETTINGS)
    expected = [r if isinstance(r, bytes) else
                r.encode() if isinstance(r, str) else json.dumps(r).encode() for r in records]
    assert list(ds) == expected


def test_lines_round_trip_on_every_store(backend: Where) -> None:
    with ShardWriter(backend.url("t-{shard:02d}.jsonl.gz"), format="lines", max_count=5,
                     **backend.kwargs) as w:
        for i in range(12):
            w.write({"i": i})
    assert len(w.shards) == 3
    for url in w.shards:
        sidecar_matches_streaming(backend.store, url, "lines")
    ds = ShardDataset(w.shards, format="lines", decode="json", **SHARD_SETTINGS,
                      settings=backend.settings())
    assert list(ds) == [{"i": i} for i in range(12)]


def test_an_exception_in_the_block_publishes_nothing_of_the_shard(backend: Where) -> None:
    with pytest.raises(RuntimeError, match="stop"):
        with ShardWriter(backend.url("x-%02d.tar"), max_count=4, **backend.kwargs) as w:
            for i in range(10):
                w.write({"__key__": f"k{i}", "bin": bytes(1000)})
            raise RuntimeError("stop")
    # Shards 0 and 1 were finished when the sample that opened shard 2 came.
    # The finished shards are in the manifest too.
    assert backend.names() == [MANIFEST_NAME, "x-00.tar", "x-00.tar.idx", "x-01.tar",
                               "x-01.tar.idx"]
    assert len(w.shards) == 2 and w.count == 8
    with pytest.raises(InvalidArgument, match="after close"):
        w.write({"__key__": "late", "bin": b"x"})


def test_max_size_rolls_over_before_a_shard_would_pass_it(tmp_path: Path) -> None:
    # A 1000-byte member takes 1536 bytes (header, padded data); a tar ends
    # with 1024 zero bytes, padded to a multiple of 10240. Twelve samples end
    # at 19456 + 1024 -> 20480 bytes; a thirteenth would make 30720 (its
    # members alone, 19968 bytes, would still fit).
    with ShardWriter(tmp_path / "s-%d.tar", max_size=20480) as w:
        for i in range(26):
            w.write({"__key__": f"k{i:02d}", "bin": bytes([i]) * 1000})
        w.write({"__key__": "big", "bin": bytes(30000)})  # alone, and larger than max_size
        w.write({"__key__": "after", "bin": b"x"})
    sizes = [(tmp_path / f"s-{n}.tar").stat().st_size for n in range(5)]
    assert sizes == [20480, 20480, 10240, 40960, 10240]
    ds = ShardDataset(w.shards, **SHARD_SETTINGS)
    assert ds.counts == [12, 12, 2, 1, 1]
    assert [s["__key__"] for s in ds] == [f"k{i:02d}" for i in range(26)] + ["big", "after"]


def test_an_empty_writer_writes_nothing(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "e-%d.tar") as w:
        pass
    assert w.shards == [] and w.count == 0
    assert list(tmp_path.iterdir()) == []


def test_index_false_writes_no_sidecar_and_the_dataset_streams(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "n-%d.jsonl", format="lines", index=False) as w:
        for i in range(3):
            w.write(f"line {i}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n-0.jsonl"]
    assert (tmp_path / "n-0.jsonl").read_bytes() == b"line 0\nline 1\nline 2\n"
    assert list(ShardDataset(w.shards, format="lines", decode="utf-8", **SHARD_SETTINGS)) == \
        ["line 0", "line 1", "line 2"]


@pytest.mark.parametrize(("sample", "message"), [
    ({"jpg": b"x"}, "needs a str '__key__'"),
    ({"__key__": 7, "jpg": b"x"}, "needs a str '__key__'"),
    ({"__key__": "dir/a.b", "jpg": b"x"}, r"'\.' in its last part.*'dir/a'"),
    ({"__key__": "dir/", "jpg": b"x"}, "would not read back"),
    ({"__key__": "k", "__meta__": b"x"}, "no fields"),
    ({"__key__": "k", "JPG": b"x", "jpg": b"y"}, "twice"),
    ({"__key__": "k", "a/b": b"x"}, "would not read back"),
    ({"__key__": "k", "jpg": None}, "must be bytes, str"),
    ({"__key__": "k", "jpg": {1, 2}}, "must be bytes, str"),
    ({"__key__": "k", "json": {"x": object()}}, "not JSON"),
    ({"__key__": "k", "txt": "\udc80"}, "not UTF-8"),
    (["not", "a", "dict"], "must be a dict"),
    # A tar header's name ends at its first NUL: "img" with no field, "seg".
    ({"__key__": "img\x00001", "jpg": b"x"}, "NUL"),
    ({"__key__": "k", "seg\x00mask": b"x"}, "NUL"),
])
def test_tar_samples_that_would_not_read_back_are_refused(tmp_path: Path, sample: Any,
                                                          message: str) -> None:
    with ShardWriter(tmp_path / "r-%d.tar") as w:
        w.write({"__key__": "first", "jpg": b"ok"})
        with pytest.raises(InvalidArgument, match=message):
            w.write(sample)
        # The same key twice in a row would be read back as one sample.
        with pytest.raises(InvalidArgument, match="same key"):
            w.write({"__key__": "first", "cls": b"1"})
        w.write({"__key__": "last", "jpg": b"ok"})  # nothing was written: the shard goes on
    assert [s["__key__"] for s in ShardDataset(w.shards, **SHARD_SETTINGS)] == ["first", "last"]


def test_numbers_and_bools_of_numpy_and_torch_are_written_as_text(tmp_path: Path) -> None:
    # Labels come out of numpy and torch: np.int64 and bools were refused
    # ("a value must be bytes, str, int, float, dict or list").
    np = pytest.importorskip("numpy")
    import torch

    values = {"a": np.int64(3), "b": np.int32(-2), "c": np.float32(0.5), "d": np.bool_(True),
              "e": True, "f": False, "g": torch.tensor(4), "h": np.uint8(7),
              "i": torch.tensor(True), "j": torch.tensor(0.25)}
    with ShardWriter(tmp_path / "n-%d.tar") as w:
        w.write({"__key__": "k", **values})
        # A shape a number would lose: one value in a list or a matrix is no scalar.
        for shaped in (np.array([1, 2]), np.array([1]), torch.tensor([0.25]), torch.ones(1, 1)):
            with pytest.raises(InvalidArgument, match="must be bytes, str, a number"):
                w.write({"__key__": "j", "cls": shaped})
    [sample] = ShardDataset(w.shards, **SHARD_SETTINGS)
    assert {k: v for k, v in sample.items() if not k.startswith("__")} == {
        "a": b"3", "b": b"-2", "c": b"0.5", "d": b"True", "e": b"True", "f": b"False",
        "g": b"4", "h": b"7", "i": b"True", "j": b"0.25"}


@pytest.mark.parametrize(("line", "message"), [
    ("two\nlines", "newline"), (b"ends with cr\r", r"\\r"), ("", "empty"), (b"", "empty"),
    (7, "must be a dict, list, str or bytes"), ("\udc80", "not UTF-8"), ([{1, 2}], "not JSON"),
])
def test_lines_that_would_not_read_back_are_refused(tmp_path: Path, line: Any,
                                                    message: str) -> None:
    with ShardWriter(tmp_path / "l-%d.txt", format="lines") as w:
        with pytest.raises(InvalidArgument, match=message):
            w.write(line)
        w.write("fine")
    assert (tmp_path / "l-0.txt").read_bytes() == b"fine\n"


@pytest.mark.parametrize(("pattern", "kwargs", "message"), [
    ("train.tar", {}, "one integer field"),
    ("train-%d-%d.tar", {}, "one integer field"),
    ("train-{000..009}.tar", {}, "one integer field"),
    ("train-{a}-{b}.tar", {}, "one integer field"),
    ("t-%d.jsonl.gz", {"format": "lines", "compression": "zstd"}, "readers read as gzip"),
    ("t-%d.jsonl", {"format": "lines", "compression": "gzip"}, "not compressed"),
    ("t-%d.tar.gz", {}, "compression is for format 'lines'"),
    ("t-%d.tar", {"format": "orc"}, "format must be one of"),
    ("t-%d.tar", {"format": "parquet"}, "Parquet shards are named"),
    ("t-%d.parquet", {"format": "tar", "schema": object()}, "schema is for format"),
    ("t-%d.tar", {"max_count": 0}, "max_count must be >= 1"),
    ("t-%d.tar", {"compression": "bz2"}, "compression must be one of"),
    # Readers go by the name: tar bytes under a .jsonl name read as one line.
    ("t-%d.jsonl", {}, "format 'tar' but the shards are named .*'lines'"),
    ("t-%d.tar", {"format": "lines"}, "format 'lines' but the shards are named .*'tar'"),
    ("run%d/t-{:03d}.tar", {}, "both a %-field and a {}-field"),
])
def test_bad_settings_are_refused(tmp_path: Path, pattern: str, kwargs: dict[str, Any],
                                  message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        ShardWriter(str(tmp_path / pattern), **kwargs)


def test_a_percent_in_a_folder_of_a_braces_pattern_is_the_folder_s(tmp_path: Path) -> None:
    folder = tmp_path / "top-5%"
    with ShardWriter(str(folder / "t-{:03d}.jsonl"), format="lines", max_count=1) as w:
        w.write("a")
        w.write("b")
    assert sorted(p.name for p in folder.glob("t-*.jsonl")) == ["t-000.jsonl", "t-001.jsonl"]


def test_a_shard_streams_in_bounded_memory(tmp_path: Path) -> None:
    # 48 MiB in one shard through 1 MiB parts, two in flight: the writer
    # holds a few parts, never the shard. (A plain aioflux.open writer of
    # these settings peaks at ~11.7 MB here, whatever the object's size.)
    payload = os.urandom(1 << 20)
    tracemalloc.start()
    try:
        with ShardWriter(tmp_path / "m-%d.tar", writer=WriterOptions(part_size=1 << 20,
                                                                     max_in_flight=2)) as w:
            for i in range(48):
                w.write({"__key__": f"k{i:03d}", "bin": payload})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tmp_path / "m-0.tar").stat().st_size > 48 << 20
    assert peak < 24 << 20, peak  # half the shard
    sidecar_matches_streaming(LocalStore(), w.shards[0], "tar")


def test_webdataset_shards_read_back_through_shard_dataset(tmp_path: Path) -> None:
    wds = pytest.importorskip("webdataset")
    samples = [{"__key__": f"w{i:04d}", "jpg": os.urandom(100 + i), "cls": str(i).encode(),
                "seg.png": b"p" * i} for i in range(17)]
    with wds.ShardWriter(str(tmp_path / "wds-%02d.tar"), maxcount=6, verbose=0) as sink:
        for sample in samples:
            sink.write(sample)
    urls = [str(tmp_path / f"wds-{n:02d}.tar") for n in range(3)]
    ds = ShardDataset(urls, **SHARD_SETTINGS)
    assert ds.counts == [6, 6, 5]
    got = list(ds)
    assert [{k: v for k, v in s.items() if k != "__url__"} for s in got] == samples


# webdataset's tar iterators leave their files to the garbage collector.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_our_shards_read_back_through_webdataset(tmp_path: Path) -> None:
    wds = pytest.importorskip("webdataset")
    samples = tar_samples(14)
    with ShardWriter(tmp_path / "ours-%02d.tar", max_count=5) as w:
        for sample in samples:
            w.write(sample)
    paths = [str(local_path(u)) for u in w.shards]
    got = list(wds.WebDataset(paths, shardshuffle=False, empty_check=False))
    gc.collect()
    assert len(got) == 14
    for sample, read in zip(samples, got, strict=True):
        expected = as_read(sample, "")
        del expected["__url__"]
        assert {k: v for k, v in read.items() if k not in ("__url__", "__local_path__")} == \
            expected
