"""What ``torch.load`` through ``aioflux.open`` fetches: the object's bytes
once, counted by a proxy between the client and the emulator.

torch's zip reader reads the first bytes (the reader's whole read-ahead is
asked for), then the central directory in the last block, then the records
from the front. Dropping the blocks behind that last one fetched a 49 MB
checkpoint 1.9 times over.
"""

from __future__ import annotations

import pytest
import torch

import aioflux
from aioflux import Client, ClientConfig, ReaderOptions
from aioflux.testing import Emulator, FaultProxy

KIB = 1024
MIB = 1024 * KIB


def _state() -> dict[str, object]:
    """~6 MB of tensors of odd sizes, as a checkpoint's."""
    g = torch.Generator().manual_seed(7)
    return {
        "w": torch.randn(1_000_003, generator=g),                     # 4 MB
        "m": torch.randint(0, 1 << 40, (250_001,), generator=g),      # 2 MB
        "b": torch.randn(4097, generator=g).to(torch.bfloat16),
        "step": 3,
    }


@pytest.mark.parametrize("options", [
    ReaderOptions(),                                  # 4 MiB blocks: 2, both read ahead at once
    ReaderOptions(block_size=512 * KIB, read_ahead=32),
    ReaderOptions(block_size=512 * KIB, read_ahead=4),  # the window smaller than the object
], ids=["default", "small-blocks", "short-window"])
def test_torch_load_fetches_a_checkpoint_once(emulator: Emulator, bucket: str,
                                              config: ClientConfig,
                                              options: ReaderOptions) -> None:
    state = _state()
    with FaultProxy(emulator.endpoint) as proxy, \
            Client(config, endpoint=proxy.endpoint) as client:
        url = f"gs://{bucket}/ckpt.pt"
        with aioflux.open(url, "wb", client=client) as f:
            torch.save(state, f)
        size = client.stat(bucket, "ckpt.pt").size
        before = proxy.stats.bytes_to_client
        with aioflux.open(url, "rb", client=client, reader=options) as r:
            loaded = torch.load(r, weights_only=True)
            # Every block was checked on the way (its crc32c, front to
            # back): checking the rest fetches nothing more.
            r.verify()  # type: ignore[attr-defined]
        fetched = proxy.stats.bytes_to_client - before
    assert loaded.keys() == state.keys() and loaded["step"] == 3
    assert all(torch.equal(loaded[k], state[k]) for k in ("w", "m", "b"))
    # Responses' headers included; the bytes fetched twice took 1.5-1.9x.
    assert fetched <= 1.1 * size, (fetched, size)
