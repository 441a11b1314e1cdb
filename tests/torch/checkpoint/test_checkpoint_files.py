"""Checkpoints on local files: loads read straight from the file
(``aioflux/local/_reader.py``), saves through the streaming writer, both
bit for bit, and every byte of a load held to the file's crc32c, the bytes
``torch.load`` skips or reads out of order included.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from aioflux import ChecksumMismatch, NotFound, PreconditionFailed, WriterOptions
from aioflux._core.concurrency.portal import call
from aioflux.local import LocalStore, _reader
from aioflux.local._reader import FileReader
from aioflux.torch import Checkpoint, CheckpointManager
from aioflux.torch.dcp import DcpReader, DcpWriter

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

MiB = 1 << 20


def _bucket_name(path: Path) -> tuple[str, str]:
    bucket, name = str(path).lstrip("/").split("/", 1)
    return bucket, name


def _needs_crc(path: Path) -> None:
    if call(LocalStore().stat(*_bucket_name(path))).crc32c is None:
        pytest.skip("no user xattrs here: files carry no crc32c to check against")


def _state() -> dict[str, object]:
    torch.manual_seed(3)
    return {
        "f32": torch.randn(300, 70),
        "bf16": torch.randn(1000).to(torch.bfloat16),
        "f64": torch.randn(17, dtype=torch.float64),
        "i8": torch.randint(-128, 127, (5000,), dtype=torch.int8),
        "bool": torch.rand(333) > 0.5,
        "strided": torch.randn(40, 30)[::3, 1::2],
        "empty": torch.zeros(0, 4),
        "scalar": torch.tensor(2.5),
        "big": torch.randn(3 * MiB // 4 + 11),  # spans several writer parts
        "step": 12,
    }


def _bits_equal(got: object, want: object) -> bool:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        return (got.dtype == want.dtype and got.shape == want.shape
                and torch.equal(got.reshape(-1).view(torch.uint8),
                                want.reshape(-1).view(torch.uint8)))
    return got == want


def _flip(path: Path, at: int) -> None:
    """Flip the byte at ``at`` in place, keeping the file's size, time and
    recorded crc32c (bytes rotten on the disk, not a rewrite)."""
    before = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x10]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_checkpoint_round_trips_bit_for_bit_through_files(tmp_path: Path) -> None:
    state = _state()
    part = WriterOptions(part_size=MiB)
    path = tmp_path / "ck.pt"
    info = Checkpoint(writer=part).save(state, str(path))
    assert info.size == path.stat().st_size
    for loaded in (Checkpoint().load(str(path)), torch.load(path, weights_only=True)):
        assert loaded.keys() == state.keys()
        assert all(_bits_equal(loaded[k], v) for k, v in state.items())
    with CheckpointManager(f"file://{tmp_path}/run", keep_last=2, writer=part) as manager:
        manager.save(state, step=5)
        loaded = manager.load()
    assert all(_bits_equal(loaded[k], v) for k, v in state.items())


def test_a_dcp_checkpoint_round_trips_bit_for_bit_through_files(tmp_path: Path) -> None:
    state = _state()
    root = str(tmp_path / "dcp")
    dcp.save(state, storage_writer=DcpWriter(root))
    target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
              for k, v in state.items()}
    dcp.load(target, storage_reader=DcpReader(root))
    assert all(_bits_equal(target[k], v) for k, v in state.items())
    # torch's own reader reads what aioflux's writer wrote, and the reverse.
    target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
              for k, v in state.items()}
    dcp.load(target, storage_reader=dcp.FileSystemReader(root))
    assert all(_bits_equal(target[k], v) for k, v in state.items())
    theirs = str(tmp_path / "theirs")
    dcp.save(state, storage_writer=dcp.FileSystemWriter(theirs))
    target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
              for k, v in state.items()}
    dcp.load(target, storage_reader=DcpReader(theirs))
    assert all(_bits_equal(target[k], v) for k, v in state.items())


def test_a_file_load_checks_every_byte_torch_reads_skips_or_reads_first(
        tmp_path: Path) -> None:
    # torch.load reads the zip's central directory first, then each record's
    # header and data, never its name and padding: a flipped byte anywhere
    # (a tensor, a name, the directory) fails the load, never loads.
    state = {"w": torch.full((20000,), 1.5), "b": torch.arange(100)}
    good = tmp_path / "good.pt"
    Checkpoint().save(state, str(good))
    _needs_crc(good)
    data = good.read_bytes()
    tensor = data.index(torch.tensor([1.5]).numpy().tobytes() * 64)
    places = {
        "tensor data": tensor + 4001,
        "a record's name": data.index(b"data.pkl") + 2,
        "the central directory": len(data) - 60,
        "the last byte": len(data) - 1,
    }
    for what, at in places.items():
        bad = tmp_path / f"bad-{at}.pt"
        call(LocalStore().write(*_bucket_name(bad), data))  # recorded crc32c: the good bytes'
        _flip(bad, at)
        with pytest.raises(ChecksumMismatch, match=bad.name):
            Checkpoint().load(str(bad))
        assert what  # named for the failure report


def test_a_file_reader_checks_ranges_read_out_of_order_and_gaps(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    body = os.urandom(3 * MiB + 5)
    call(LocalStore().write(*_bucket_name(path), body))
    _needs_crc(path)
    with FileReader(*_bucket_name(path)) as reader:
        reader.seek(-100, os.SEEK_END)
        assert reader.read() == body[-100:]  # ahead of the check: read again by verify
        reader.seek(0)
        assert reader.read(10) == body[:10]
        reader.seek(1000)  # a small gap: read and checked on the way
        buf = bytearray(MiB)
        assert reader.readinto(buf) == MiB and buf == body[1000:1000 + MiB]
        reader.seek(2 * MiB)  # a long skip: left to verify
        assert reader.read(5) == body[2 * MiB:2 * MiB + 5]
        reader.verify()
    _flip(path, 2 * MiB + 100)  # inside the part no read reached
    with FileReader(*_bucket_name(path)) as reader:
        assert reader.read(10) == body[:10]
        with pytest.raises(ChecksumMismatch, match="crc32c"):
            reader.verify()
        with pytest.raises(ChecksumMismatch):  # and every later read says so
            reader.read(1)


@pytest.mark.parametrize("change", ["size", "generation"])
def test_a_file_reader_opened_at_a_version_refuses_another(tmp_path: Path, change: str) -> None:
    path = tmp_path / "blob"
    info = call(LocalStore().write(*_bucket_name(path), os.urandom(MiB)))
    wrong = info._replace(size=info.size + 1) if change == "size" \
        else info._replace(generation=info.generation + 1)
    with pytest.raises(ChecksumMismatch if change == "size" else NotFound,
                       match="bytes, expected" if change == "size" else "is gone"):
        FileReader(*_bucket_name(path), info=wrong)


def test_a_file_rewritten_in_place_while_it_loads_fails(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    body = os.urandom(MiB)
    call(LocalStore().write(*_bucket_name(path), body))
    with FileReader(*_bucket_name(path)) as reader:
        assert reader.read(100) == body[:100]
        st = os.stat(path)
        with open(path, "r+b") as fh:  # the same bytes, written again in place
            fh.write(body[:100])
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        with pytest.raises(ChecksumMismatch, match="modified while it was read"):
            reader.verify()


def test_a_partial_dcp_load_from_files_checks_the_items_it_reads(tmp_path: Path) -> None:
    # The model without the optimizer: only "w" is loaded, held to its own
    # item's crc32c; a flipped byte in "o", never read, does not fail it.
    root = tmp_path / "dcp"
    state = {"w": torch.randn(1000), "o": torch.randn(1000)}
    dcp.save(state, storage_writer=DcpWriter(str(root)))
    (data,) = [p for p in root.iterdir() if p.suffix == ".distcp"]
    raw = data.read_bytes()
    w_at = raw.index(state["w"].numpy().tobytes()[:64])
    o_at = raw.index(state["o"].numpy().tobytes()[:64])
    _flip(data, o_at + 100)
    target = {"w": torch.zeros(1000)}
    dcp.load(target, storage_reader=DcpReader(str(root)))
    assert torch.equal(target["w"], state["w"])
    _flip(data, w_at + 100)
    with pytest.raises(BaseException, match="the item was saved with"):  # DCP may wrap it
        dcp.load({"w": torch.zeros(1000)}, storage_reader=DcpReader(str(root)))


def test_a_dcp_data_file_rewritten_in_place_mid_load_is_a_precondition_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "dcp"
    state = {"a": torch.randn(1000), "b": torch.randn(1000)}
    dcp.save(state, storage_writer=DcpWriter(str(root)))
    (data,) = [p for p in root.iterdir() if p.suffix == ".distcp"]
    real = FileReader.item
    opened: list[int] = []

    def item(self: FileReader, offset: int, length: int) -> FileReader:
        opened.append(offset)
        if len(opened) == 2:  # the second item: the file rewritten before it
            st = os.stat(data)
            os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return real(self, offset, length)

    monkeypatch.setattr(FileReader, "item", item)
    with pytest.raises(BaseException, match="changed during the load") as caught:
        dcp.load({"a": torch.zeros(1000), "b": torch.zeros(1000)},
                 storage_reader=DcpReader(str(root)))
    assert PreconditionFailed.__name__ in repr(caught.value)


@pytest.mark.parametrize("disk", [False, True], ids=["memory", "disk"])
def test_long_reads_split_across_threads_land_whole_and_are_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: bool) -> None:
    # Reads from 8 MiB on are cut into spans read side by side (on a memory
    # filesystem; on a disk, one span): every span lands where it belongs,
    # and their crc32c combine in file order, from wherever the check stood
    # (here inside the read, after an overlap).
    monkeypatch.setattr(_reader, "on_disk", lambda st: disk)
    path = tmp_path / "big"
    body = os.urandom(21 * MiB + 12345)
    call(LocalStore().write(*_bucket_name(path), body))
    _needs_crc(path)
    with FileReader(*_bucket_name(path)) as reader:
        assert reader.read(100) == body[:100]
        reader.seek(50)  # overlaps what was checked
        buf = bytearray(20 * MiB)
        assert reader.readinto(buf) == len(buf)
        assert buf == body[50:50 + 20 * MiB]
        assert reader.read() == body[50 + 20 * MiB:]
        reader.verify()
    state = {"w": torch.randn(6 * MiB), "b": torch.arange(10)}  # a 24 MiB tensor
    Checkpoint().save(state, str(tmp_path / "ck.pt"))
    loaded = Checkpoint().load(str(tmp_path / "ck.pt"))
    assert _bits_equal(loaded["w"], state["w"]) and _bits_equal(loaded["b"], state["b"])
    for at in (3 * MiB, 15 * MiB + 7, len(body) - 2):  # in the first span, a later one, the tail
        bad = tmp_path / f"bad-{at}"
        call(LocalStore().write(*_bucket_name(bad), body))
        _flip(bad, at)
        with FileReader(*_bucket_name(bad)) as reader, \
                pytest.raises(ChecksumMismatch, match="crc32c"):
            buf = bytearray(len(body))
            reader.readinto(buf)  # the read reaches the end: the check decides there
            reader.verify()


def test_a_file_cut_short_while_read_fails_the_read(tmp_path: Path) -> None:
    path = tmp_path / "big"
    body = os.urandom(16 * MiB)
    call(LocalStore().write(*_bucket_name(path), body))
    with FileReader(*_bucket_name(path)) as reader:
        os.truncate(path, 10 * MiB)
        with pytest.raises(ChecksumMismatch, match="truncated while reading"):
            reader.readinto(bytearray(16 * MiB))
