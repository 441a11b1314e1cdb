"""``hf://models/...`` safetensors files through ``Checkpoint.load``, against
the fake Hub: each tensor as written, the Hub's token kept from its CDN,
and a file whose header does not describe it refused by name."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import torch

import aioflux
from aioflux.hf import HfStore
from aioflux.testing import FakeHub
from aioflux.torch import Checkpoint
from tests.backends.hf.conftest import TOKEN

_CODES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64",
          torch.bool: "BOOL", torch.float16: "F16", torch.uint8: "U8"}


def safetensors_bytes(tensors: Mapping[str, torch.Tensor],
                      metadata: Mapping[str, str] | None = None,
                      codes: Mapping[str, str] | None = None) -> bytes:
    """A safetensors file as the format's specification lays it out: the
    header's length, its JSON (space-padded to 8 bytes), the tensors' bytes
    back to back in the header's order."""
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    data = bytearray()
    for name, tensor in tensors.items():
        flat = tensor.contiguous().reshape(-1)
        raw = flat.view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        code = (codes or {}).get(name, _CODES[tensor.dtype])
        header[name] = {"dtype": code, "shape": list(tensor.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(data)


TENSORS = {
    "embed.weight": torch.arange(4 * 1000, dtype=torch.float32).reshape(1000, 4) / 7,
    "layer.0.bias": torch.linspace(-1, 1, 33).to(torch.bfloat16),
    "position_ids": torch.arange(512, dtype=torch.int64).reshape(1, 512),
    "mask": torch.tensor([True, False, True]),
    "scale": torch.tensor(0.5, dtype=torch.float16),
    "empty": torch.zeros(0, 3, dtype=torch.uint8),
}


@pytest.fixture
def store(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> Iterator[HfStore]:
    hub.create_repo("org/model", repo_type="model", gated=True)
    hub.push("org/model", {
        "model.safetensors": safetensors_bytes(TENSORS, {"format": "pt"}),
        "bad/truncated.safetensors": safetensors_bytes(TENSORS)[:-5],
        "bad/odd-dtype.safetensors": safetensors_bytes({"x": torch.zeros(2)},
                                                       codes={"x": "F4"}),
        "bad/not-json.safetensors": struct.pack("<Q", 8) + b"{nope!!}" + bytes(16),
    }, repo_type="model")
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with aioflux.SyncStore(HfStore()) as closing:  # closes the store's connections
        yield closing.aio


def _same(loaded: Mapping[str, torch.Tensor]) -> None:
    assert list(loaded) == list(TENSORS)
    for name, tensor in TENSORS.items():
        assert loaded[name].dtype == tensor.dtype, name
        assert loaded[name].shape == tensor.shape, name
        assert torch.equal(loaded[name], tensor), name


def test_a_model_s_weights_load_from_the_hub(hub: FakeHub, store: HfStore) -> None:
    ckpt = Checkpoint(store)
    _same(ckpt.load("hf://models/org/model/model.safetensors"))
    # huggingface_hub's HfFileSystem form of a model, and a device named
    _same(ckpt.load("hf://org/model/model.safetensors", map_location="cpu"))
    cdn = hub.sent("cdn")
    assert cdn and all("Authorization" not in r.headers for r in cdn)
    assert all("Authorization" in r.headers for r in hub.sent("hub"))


@pytest.mark.parametrize(("name", "error", "match"), [
    ("bad/truncated.safetensors", aioflux.ChecksumMismatch, "tensors end at"),
    ("bad/not-json.safetensors", aioflux.ChecksumMismatch, "does not parse"),
    ("bad/odd-dtype.safetensors", aioflux.InvalidArgument, "dtype F4"),
])
def test_a_file_its_header_does_not_describe_is_refused(store: HfStore, name: str,
                                                        error: type[Exception],
                                                        match: str) -> None:
    with pytest.raises(error, match=match) as caught:
        Checkpoint(store).load(f"hf://models/org/model/{name}")
    assert name in str(caught.value)
    if isinstance(caught.value, aioflux.StorageError):
        assert caught.value.name == name


def test_a_map_location_of_another_kind_is_refused(store: HfStore) -> None:
    with pytest.raises(aioflux.InvalidArgument, match="map_location"):
        Checkpoint(store).load("hf://models/org/model/model.safetensors",
                               map_location=lambda storage, location: storage)


def test_a_local_file_loads_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(safetensors_bytes(TENSORS))
    _same(Checkpoint().load(path))
    path.write_bytes(safetensors_bytes(TENSORS)[:-1])
    with pytest.raises(aioflux.ChecksumMismatch, match=r"model\.safetensors"):
        Checkpoint().load(path)
