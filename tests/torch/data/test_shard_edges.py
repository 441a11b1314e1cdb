"""Shards as other tools leave them: bzip2 and xz shards (webdataset's tarfile
reads ``.tar.bz2`` and ``.tar.xz``), and shard lists from webdataset's brace
patterns, on a real store."""

from __future__ import annotations

import bz2
import lzma
import tarfile
from pathlib import Path
from typing import Any

import pytest

from aioflux import InvalidArgument, ShardFormatError
from aioflux.torch import Order, ShardDataset, ShardMapDataset, ShardReads, ShardWriter
from tests.torch._shards_util import expected_of, jsonl, make_samples, tar_shard
from tests.torch.conftest import Where


def _byte_exact(samples: list[dict[str, bytes]]) -> dict[str, dict[str, bytes]]:
    return {s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__")}
            for s in samples}


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_bzip2_and_xz_shards_are_decompressed(where: Where, tmp_path: Path) -> None:
    shards = {name: make_samples(f"{name[:1]}/", 40, size=3000)
              for name in ("a.tar.bz2", "b.tar.xz", "c.tbz2", "d.txz")}
    for name, samples in shards.items():
        data = tar_shard(samples, fmt=tarfile.GNU_FORMAT, extras=True)
        # Two streams in one, as pbzip2 and xz -T write them.
        half = len(data) // 2
        pack = bz2.compress if "b" in name.split(".", 1)[1] else lzma.compress
        where.put(name, pack(data[:half]) + pack(data[half:]))
    ds = ShardDataset.from_prefix(where.root,
                                  reads=ShardReads(index_dir=tmp_path / "idx", samples_per_read=4),
                                  settings=where.settings())
    assert ds.counts == [40, 40, 40, 40]
    got = list(ds)
    assert len(got) == 160
    assert _byte_exact(got) == expected_of(shards)
    table = ShardMapDataset.from_prefix(where.root, reads=ShardReads(index_dir=tmp_path / "idx"),
                                        settings=where.settings(cache_dir=tmp_path / "cache"))
    assert _byte_exact([table[i] for i in (0, 79, 159)]) == {
        k: v for k, v in expected_of(shards).items() if k in ("a/00000", "b/00039", "d/00039")}


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_bzip2_and_xz_lines_are_lines_not_compressed_bytes(where: Where,
                                                           tmp_path: Path) -> None:
    rows = [{"id": i, "text": "y" * (i % 70)} for i in range(200)]
    where.put("a.jsonl.bz2", bz2.compress(jsonl(rows[:120])))
    where.put("b.jsonl.xz", lzma.compress(jsonl(rows[120:], crlf=True)))
    ds = ShardDataset.from_prefix(where.root, format="lines",
                                  reads=ShardReads(index_dir=tmp_path / "idx"),
                                  order=Order(shuffle=False), settings=where.settings())
    assert ds.counts == [120, 80]
    assert list(ds) == [jsonl([row]).rstrip(b"\n") for row in rows]


def test_a_damaged_xz_shard_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    data = bytearray(lzma.compress(jsonl([{"id": i} for i in range(50)])))
    data[len(data) // 2] ^= 0xFF
    where.put("a.jsonl.xz", bytes(data))
    with pytest.raises(ShardFormatError, match=r"a\.jsonl\.xz: corrupt xz data"):
        ShardDataset.from_prefix(where.root, format="lines", reads=ShardReads(cache_indexes=False))


@pytest.mark.parametrize("pattern", ["s-%03d.jsonl.bz2", "s-{:03d}.jsonl.xz", "s-%03d.tar.xz"])
def test_the_writer_refuses_names_read_as_a_compression_it_does_not_write(
        tmp_path: Path, pattern: str) -> None:
    # Before, the samples went out uncompressed under a suffix readers decompress.
    with pytest.raises(InvalidArgument, match="writes gzip"):
        ShardWriter(f"{tmp_path}/{pattern}", format="tar" if ".tar" in pattern else "lines")
    assert list(tmp_path.iterdir()) == []


def test_a_webdataset_brace_pattern_names_the_same_shards(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    shards = {f"s-{n:03d}.tar": make_samples(f"k{n}/", 3) for n in range(12)}
    for name, samples in shards.items():
        where.put(name, tar_shard(samples))
    # braceexpand pads both ends to 3 digits (one of them has a leading zero).
    padded = ShardDataset(f"{where.root}/s-{{0..011}}.tar",
                          reads=ShardReads(index_dir=tmp_path / "i"))
    assert [info.name.rsplit("/", 1)[1] for info in padded.shards] == list(shards)
    # Nested lists name each shard once (the innermost first read s-000 twice).
    nested = ShardDataset(f"{where.root}/s-{{000,{{001,002}}}}.tar",
                          reads=ShardReads(index_dir=tmp_path / "i"),
                          order=Order(shuffle=False))
    assert nested.counts == [3, 3, 3]
    assert sorted(s["__key__"] for s in nested) == sorted(
        key for n in range(3) for key, _ in shards[f"s-{n:03d}.tar"])


def test_patterns_joined_by_two_colons_are_read_one_after_the_other(tmp_path: Path) -> None:
    # webdataset's expand_urls splits a string at "::" before expanding each
    # part: taken as one name, the string was a NotFound.
    where = Where("file", f"file://{tmp_path}/root", None)
    for name in ("a-0.tar", "a-1.tar", "b-0.tar"):
        where.put(name, tar_shard(make_samples(name[:3] + "/", 2)))
    both = ShardMapDataset(f"{where.root}/a-{{0..1}}.tar::{where.root}/b-0.tar",
                           reads=ShardReads(index_dir=tmp_path / "i"))
    assert both.counts == [2, 2, 2]
    assert [both[i]["__key__"].split("/")[0] for i in range(6)] == [
        "a-0", "a-0", "a-1", "a-1", "b-0", "b-0"]


@pytest.mark.parametrize(("world", "rank", "suffix"),
                         [(1, 0, ".jsonl.gz"), (2, 0, ".jsonl.gz"), (3, 2, ".jsonl.gz"),
                          (2, 1, ".tar.gz")])
def test_a_compressed_shard_s_cursor_goes_once_its_samples_are_read(
        tmp_path: Path, world: int, rank: int, suffix: str) -> None:
    # A cursor holds its shard's compressed block, a decompressed piece and the
    # decoder (MiBs). Each was kept to the end of the pass: it was dropped only
    # at the end of the data, which a run never reaches (a line's newline, a
    # tar's end blocks come after the last sample), nor, under DDP or with
    # DataLoader workers, a run of an iterator that does not get the shard's
    # last sample. Memory grew with every compressed shard of the epoch.
    import gc
    import gzip
    import weakref

    from aioflux._engines.shards import _compressed

    where = Where("file", f"file://{tmp_path}/root", None)
    for n in range(12):
        if suffix == ".tar.gz":
            data = tar_shard(make_samples(f"s{n}/", 40))
        else:
            data = jsonl({"shard": n, "line": i} for i in range(40))
        where.put(f"s{n:02d}{suffix}", gzip.compress(data))
    live: weakref.WeakSet[_compressed.Cursor] = weakref.WeakSet()
    made = _compressed.Cursor.__init__

    def counted(self: _compressed.Cursor, *args: Any, **kwargs: Any) -> None:
        live.add(self)
        made(self, *args, **kwargs)

    ds = ShardDataset.from_prefix(where.root, format="tar" if suffix == ".tar.gz" else "lines",
                                  reads=ShardReads(index_dir=tmp_path / "idx", samples_per_read=8,
                                                   prefetch_bytes=1 << 16, reads_in_flight=2),
                                  order=Order(shuffle_window=8, batch_size=2, world_size=world,
                                              rank=rank))
    most = seen = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_compressed.Cursor, "__init__", counted)
        for _ in ds:
            seen += 1
            # No gc.collect() here: a cursor is in no cycle, so it goes when
            # dropped (a collection a sample took minutes in a full run).
            most = max(most, len(live))
    gc.collect()
    assert seen == len(ds)
    # Shard after shard (a window of one read): the shard being read, and
    # the next ones the reads in flight have started.
    assert most <= 3, most
    assert len(live) == 0


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_lines_come_out_as_bytes_short_and_long(where: Where, tmp_path: Path) -> None:
    # A line is its region's bytes: a short one a slice of its read, a long
    # one (16 KiB and more) a view of it made bytes, with no decode asked.
    lines = [f"line {i} ".encode() * (3000 if i % 7 == 3 else 1) for i in range(60)]
    assert any(len(line) >= 16 * 1024 for line in lines)
    where.put("part-000.jsonl", b"".join(line + b"\n" for line in lines[:30]))
    where.put("part-001.jsonl", b"".join(line + b"\r\n" for line in lines[30:]))
    ds = ShardDataset.from_prefix(where.root, format="lines", order=Order(shuffle=False),
                                  reads=ShardReads(index_dir=tmp_path / "idx"),
                                  settings=where.settings())
    got = list(ds)
    assert all(type(line) is bytes for line in got)
    assert got == lines
