"""DCP loads from a bucket take each whole tensor item from its fetched
bytes straight into the state dict's tensor, or through the device's
staging ring (``torch/dcp.py`` with ``checkpoint/_dcp_direct.py``), as
local files' items are: no copy loaded by torch and then copied in, and
every item still held to the crc32c its writer recorded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from aioflux import Client, ClientConfig
from aioflux.testing import Emulator
from aioflux.torch.dcp import DcpReader, DcpWriter
from tests.conftest import FAST_RETRY
from tests.torch.checkpoint._cpu_ring import cpu_ring

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _state() -> dict[str, Any]:
    torch.manual_seed(11)
    return {
        "f32": torch.randn(200_000),
        "bf16": torch.randn(300, 700).to(torch.bfloat16),
        "i8": torch.randint(-128, 127, (300_000,), dtype=torch.int8),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "step": 7,
    }


def _zeros(state: dict[str, Any]) -> dict[str, Any]:
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in state.items()}


def _same(got: dict[str, Any], want: dict[str, Any]) -> bool:
    return all(torch.equal(got[k].reshape(-1).view(torch.uint8), v.reshape(-1).view(torch.uint8))
               and got[k].dtype == v.dtype for k, v in want.items() if isinstance(v, torch.Tensor))


@pytest.fixture
def saved(emulator: Emulator, bucket: str) -> Iterator[tuple[str, Client, dict[str, Any]]]:
    state = _state()
    with Client(ClientConfig(retry=FAST_RETRY), endpoint=emulator.endpoint) as client:
        root = f"gs://{bucket}/ckpt"
        dcp.save(state, storage_writer=DcpWriter(root, client=client))
        yield root, client, state


def _copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes of every tensor copy made while a load runs."""
    copies: list[int] = []
    real: Callable[..., torch.Tensor] = torch.Tensor.copy_

    def copy_(tensor: torch.Tensor, src: torch.Tensor, *args: Any, **kw: Any) -> torch.Tensor:
        copies.append(src.nbytes)
        return real(tensor, src, *args, **kw)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    return copies


def test_a_bucket_items_bytes_go_straight_into_their_destinations(
    saved: tuple[str, Client, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, client, state = saved
    target = _zeros(state)
    where = {k: v.data_ptr() for k, v in target.items() if isinstance(v, torch.Tensor)}
    copies = _copies(monkeypatch)
    dcp.load(target, storage_reader=DcpReader(root, client=client))
    monkeypatch.undo()
    assert _same(target, state) and target["step"] == 7
    assert {k: target[k].data_ptr() for k in where} == where
    assert copies == []  # none loaded by torch elsewhere and copied in


def test_a_staged_destination_takes_a_bucket_items_bytes_through_the_ring(
    saved: tuple[str, Client, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A CUDA destination's path, on the CPU where there is no CUDA.
    root, client, state = saved
    made = cpu_ring(monkeypatch)
    copies = _copies(monkeypatch)
    target = _zeros(state)
    dcp.load(target, storage_reader=DcpReader(root, client=client))
    monkeypatch.undo()
    assert _same(target, state)
    (stager,) = made
    assert stager.nbytes == sum(v.nbytes for v in state.values() if isinstance(v, torch.Tensor))
    assert not stager._buffers and copies == []


def test_a_flipped_byte_in_a_bucket_item_fails_the_load(
    saved: tuple[str, Client, dict[str, Any]], emulator: Emulator
) -> None:
    root, client, state = saved
    bucket, prefix = root[len("gs://"):].split("/", 1)
    (data,) = [o.name for page in client.list(bucket, prefix + "/") for o in page.objects
               if o.name.endswith(".distcp")]
    raw = bytearray(client.read(bucket, data))
    at = raw.index(state["i8"].numpy().tobytes()[:64]) + 1000
    raw[at] ^= 0x01
    emulator.store.put(bucket, data, bytes(raw))  # a new version whose bytes rot
    with pytest.raises(BaseException, match="the item was saved with"):
        dcp.load(_zeros(state), storage_reader=DcpReader(root, client=client))
