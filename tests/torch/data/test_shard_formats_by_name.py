"""The shard datasets read the format off the shards' names when no
``format=`` is given, by the one table ``aioflux shards`` reads too: a
folder of ``.jsonl`` files is lines (it was read as tar: "truncated: the
tar ends at byte 50"), compressed forms included; a folder of two formats,
or a name of neither, is refused before a shard is read."""

from __future__ import annotations

import bz2
import json
import lzma
from collections.abc import Callable
from pathlib import Path

import pytest

from aioflux import InvalidArgument
from aioflux._engines.shards import FORMAT_SUFFIXES, format_by_name, plain_suffix
from aioflux.cli import main
from aioflux.torch import Order, ShardDataset, ShardMapDataset, ShardReads
from tests.torch._shards_util import gz, jsonl, make_samples, tar_shard, zst
from tests.torch.conftest import Where

RECORDS = [{"id": i} for i in range(7)]


@pytest.mark.parametrize(("name", "fmt"), [
    ("a.tar", "tar"), ("a.TAR", "tar"), ("a.tar.gz", "tar"), ("a.tgz", "tar"),
    ("a.tar.zst", "tar"), ("a.tar.xz", "tar"), ("a.tbz2", "tar"),
    ("a.jsonl", "lines"), ("a.jsonl.gz", "lines"), ("a.json.zstd", "lines"),
    ("a.ndjson.bz2", "lines"), ("a.txt.xz", "lines"), ("dir.tar/a.txt", "lines"),
    ("a.bin", None), ("README.md", None), ("a.gz", None), ("tar", None), (".tar", None),
])
def test_the_name_says_the_format(name: str, fmt: str | None) -> None:
    assert format_by_name(name) == fmt
    assert (FORMAT_SUFFIXES.get(plain_suffix(name))) == fmt


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst", ".txt.bz2"])
def test_from_prefix_reads_a_folder_of_lines_shards_as_lines(
        where: Where, tmp_path: Path, suffix: str) -> None:
    data = jsonl(RECORDS[:4]), jsonl(RECORDS[4:])
    packs: dict[str, Callable[[bytes], bytes]] = {".jsonl": bytes, ".jsonl.gz": gz,
                                                  ".jsonl.zst": zst, ".txt.bz2": bz2.compress}
    pack = packs[suffix]
    for n, body in enumerate(data):
        where.put(f"part-{n}{suffix}", pack(body))
    ds = ShardDataset.from_prefix(where.root, order=Order(shuffle=False),
                                  reads=ShardReads(index_dir=tmp_path / "idx"),
                                  settings=where.settings())
    assert ds.counts == [4, 3]
    assert [json.loads(s) for s in ds] == RECORDS
    table = ShardMapDataset.from_prefix(where.root, decode="json",
                                        reads=ShardReads(index_dir=tmp_path / "idx"),
                                        settings=where.settings())
    assert [table[k] for k in range(len(table))] == RECORDS


@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_tar_shards_compressed_or_not_are_tar(where: Where, tmp_path: Path) -> None:
    where.put("a.tar", tar_shard(make_samples("a/", 2)))
    where.put("b.tar.xz", lzma.compress(tar_shard(make_samples("b/", 3))))
    ds = ShardDataset.from_prefix(where.root, reads=ShardReads(index_dir=tmp_path / "idx"),
                                  order=Order(shuffle=False))
    assert ds.counts == [2, 3]
    assert [s["__key__"] for s in ds] == ["a/00000", "a/00001", "b/00000", "b/00001",
                                          "b/00002"]
    pattern = ShardMapDataset(f"{where.root}/{{a.tar,b.tar.xz}}",
                              reads=ShardReads(index_dir=tmp_path / "idx"))
    assert pattern.counts == [2, 3]


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_a_folder_of_two_formats_is_refused(where: Where, tmp_path: Path) -> None:
    where.put("a.tar", tar_shard(make_samples("a/", 2)))
    where.put("b.jsonl", jsonl(RECORDS))
    with pytest.raises(InvalidArgument) as exc:
        ShardDataset.from_prefix(where.root,
                                 reads=ShardReads(index_dir=tmp_path / "idx"),
                                 settings=where.settings())
    assert str(exc.value) == (
        f"ShardDataset: {where.root} holds shards of two formats, tar ({where.url('a.tar')}) "
        f"and lines ({where.url('b.jsonl')}); a dataset reads one: name the shards of one "
        "format (a folder of their own, a brace pattern)")
    assert not (tmp_path / "idx").exists() or not any((tmp_path / "idx").iterdir())
    # The format given decides, as --format does for the CLI.
    only = ShardDataset(where.url("b.jsonl"), format="lines",
                        reads=ShardReads(index_dir=tmp_path / "idx"),
                        settings=where.settings())
    assert only.counts == [len(RECORDS)]


@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_a_name_of_no_format_is_refused_until_format_says_it(where: Where,
                                                              tmp_path: Path) -> None:
    where.put("shard-0", tar_shard(make_samples("a/", 2)))
    with pytest.raises(InvalidArgument, match=r"cannot tell the format of file://.*/shard-0 "
                                              r"from its name \(\.tar, \.jsonl, .*\): pass "
                                              r"format='lines' or 'parquet' or 'tar'"):
        ShardDataset.from_prefix(where.root, reads=ShardReads(index_dir=tmp_path / "idx"))
    assert ShardDataset.from_prefix(where.root, format="tar",
                                    reads=ShardReads(index_dir=tmp_path / "idx")).counts == [2]


def test_a_decode_no_format_takes_is_refused_before_any_read(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="decode must be"):
        ShardDataset(f"{tmp_path}/missing.jsonl", decode="yaml")  # type: ignore[arg-type]
    (tmp_path / "a.tar").write_bytes(tar_shard(make_samples("a/", 1)))
    with pytest.raises(InvalidArgument, match="decode for format 'tar'"):
        ShardDataset(f"{tmp_path}/a.tar", decode="json",
                     reads=ShardReads(index_dir=tmp_path / "idx"))


def test_the_cli_reads_the_same_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    # .tar.xz and .tgz were "cannot tell the format ... pass --format" to the CLI.
    (tmp_path / "a.tgz").write_bytes(gz(tar_shard(make_samples("a/", 2))))
    (tmp_path / "b.tar.xz").write_bytes(lzma.compress(tar_shard(make_samples("b/", 3))))
    (tmp_path / "c.ndjson.bz2").write_bytes(bz2.compress(jsonl(RECORDS)))
    assert main(["shards", "verify", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "verified 3 shards, 12 samples in the good ones: all good"
