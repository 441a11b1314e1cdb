"""A zstd-compressed checkpoint loads without being told: every load path
finds the compression from the object's first bytes (a zstd frame's magic
number, 28 B5 2F FD), where ``torch.load`` used to fail on the compressed
bytes with an unpickling error that named no compression. Without the
zstandard package, such an object is an error that names the extra."""

from __future__ import annotations

import io
import struct
import sys
from typing import Any

import pytest
import torch

import aioflux
from aioflux import ChecksumMismatch, InvalidArgument
from aioflux.torch import Checkpoint, CheckpointManager
from tests.torch.conftest import Where

zstandard = pytest.importorskip("zstandard")

MAGIC = b"\x28\xb5\x2f\xfd"
EXTRA = "aioflux-storage[zstd]"


def _state() -> dict[str, Any]:
    g = torch.Generator().manual_seed(3)
    return {"w": torch.randn(50_000, generator=g), "zeros": torch.zeros(100_000), "step": 3}


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def _head(where: Where, name: str) -> bytes:
    with aioflux.open(where.url(name), client=where.client) as f:
        return f.read(4)


def test_a_zstd_checkpoint_loads_without_being_told(where: Where) -> None:
    state = _state()
    Checkpoint(where.client).save(state, where.url("c.pt"), compression="zstd")
    assert _head(where, "c.pt") == MAGIC
    assert _equal(Checkpoint(where.client).load(where.url("c.pt")), state)
    assert _equal(Checkpoint(where.client).load(where.url("c.pt"), compression="zstd"), state)


def test_a_plain_checkpoint_loads_as_before(where: Where) -> None:
    state = _state()
    Checkpoint(where.client).save(state, where.url("p.pt"))
    assert _head(where, "p.pt") == b"PK\x03\x04"  # a zip archive
    assert _equal(Checkpoint(where.client).load(where.url("p.pt")), state)
    # Told it is zstd, it must be.
    with pytest.raises(ChecksumMismatch, match="not a valid zstd stream"):
        Checkpoint(where.client).load(where.url("p.pt"), compression="zstd")
    with pytest.raises(InvalidArgument, match="compression must be one of 'zstd', got 'gzip'"):
        Checkpoint(where.client).load(where.url("p.pt"), compression="gzip")


def test_a_stream_that_starts_with_a_skippable_frame_is_zstd(where: Where) -> None:
    # pzstd starts its streams with a skippable frame (magic 0x184D2A5?).
    state = _state()
    plain = io.BytesIO()
    torch.save(state, plain)
    skippable = struct.pack("<II", 0x184D2A5E, 4) + b"meta"
    packed = skippable + zstandard.ZstdCompressor(write_checksum=True).compress(
        plain.getvalue())
    with aioflux.open(where.url("pz.pt"), "wb", client=where.client) as f:
        f.write(packed)
    assert _equal(Checkpoint(where.client).load(where.url("pz.pt")), state)


def test_a_manager_loads_a_zstd_checkpoint_without_being_told(where: Where) -> None:
    state = _state()
    with CheckpointManager(where.url("run"), client=where.client, compression="zstd") as mgr:
        info = mgr.save(state, 5)
    assert "state.pt.zst" in info.objects and info.compression == "zstd"
    with CheckpointManager(where.url("run"), client=where.client) as plain:
        assert _equal(plain.load(), state)
        assert _equal(plain.load(5), state)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_lightning_loads_a_checkpoint_whatever_its_compression_setting(where: Where) -> None:
    pytest.importorskip("lightning")
    from aioflux.torch.lightning import GcsCheckpointIO

    state = _state()
    GcsCheckpointIO(where.client, compression="zstd").save_checkpoint(state, where.url("z.ckpt"))
    GcsCheckpointIO(where.client).save_checkpoint(state, where.url("p.ckpt"))
    assert _head(where, "z.ckpt") == MAGIC
    for plugin in (GcsCheckpointIO(where.client), GcsCheckpointIO(where.client,
                                                                  compression="zstd")):
        for name in ("z.ckpt", "p.ckpt"):
            assert _equal(plugin.load_checkpoint(where.url(name)), state)


def test_open_auto_decompresses_only_what_is_zstd(where: Where) -> None:
    data = b"".join(b"line %d\n" % i for i in range(50_000))
    with aioflux.open(where.url("d.zst"), "wb", client=where.client, compression="zstd") as f:
        f.write(data)
    with aioflux.open(where.url("d.bin"), "wb", client=where.client) as f:
        f.write(data)
    # None: the stored bytes, as cp copies them.
    with aioflux.open(where.url("d.zst"), client=where.client) as f:
        stored = f.read()
    assert stored.startswith(MAGIC) and zstandard.ZstdDecompressor().decompressobj().decompress(
        stored) == data
    with aioflux.open(where.url("d.zst"), client=where.client, compression="auto") as f:
        assert f.read() == data
    with aioflux.open(where.url("d.zst"), "r", client=where.client, compression="auto") as t:
        assert t.readline() == "line 0\n"
    with aioflux.open(where.url("d.bin"), client=where.client, compression="auto") as f:
        assert f.seekable() and f.read(7) == b"line 0\n"
        f.seek(-6, io.SEEK_END)
        assert f.read() == b"49999\n"
    with pytest.raises(InvalidArgument, match="compression must be one of 'zstd', got 'auto'"):
        aioflux.open(where.url("w.bin"), "wb", client=where.client, compression="auto")


def test_without_zstandard_a_zstd_object_names_the_extra(where: Where,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state()
    Checkpoint(where.client).save(state, where.url("z.pt"), compression="zstd")
    Checkpoint(where.client).save(state, where.url("p.pt"))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # its import raises ImportError
    with pytest.raises(InvalidArgument) as info:
        Checkpoint(where.client).load(where.url("z.pt"))
    assert where.url("z.pt") in str(info.value) and EXTRA in str(info.value)
    assert "zstd-compressed" in str(info.value)
    assert _equal(Checkpoint(where.client).load(where.url("p.pt")), state)  # needs none
    with pytest.raises(InvalidArgument, match=EXTRA.replace("[", r"\[").replace("]", r"\]")):
        aioflux.open(where.url("z.pt"), client=where.client, compression="auto")
    with aioflux.open(where.url("p.pt"), client=where.client, compression="auto") as f:
        assert f.read(2) == b"PK"
    for make in (lambda: aioflux.open(where.url("n.bin"), "wb", client=where.client,
                                      compression="zstd"),
                 lambda: Checkpoint(where.client).save(state, where.url("n.pt"),
                                                        compression="zstd"),
                 lambda: CheckpointManager(where.url("run"), client=where.client,
                                           compression="zstd")):
        with pytest.raises(InvalidArgument, match="zstandard package"):
            make()
    assert not any(n.startswith(("n.", "run")) for n in where.names())
