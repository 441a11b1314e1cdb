"""torch.distributed.checkpoint over gs:// with a 2-process gloo group."""

from __future__ import annotations

import socket

import pytest
import torch.multiprocessing as mp

from aioflux import Client
from aioflux.testing import Emulator
from tests.torch._dcp_worker import run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(180)
def test_two_rank_sharded_save_async_save_load(emulator: Emulator, bucket: str,
                                               sync_client: Client) -> None:
    root = f"gs://{bucket}/dcp"
    mp.spawn(run, args=(2, _free_port(), emulator.endpoint, root), nprocs=2, join=True)
    names = {o.name for o in sync_client.list_objects(bucket)}
    for sub in ("plain", "zstd"):
        assert f"dcp/{sub}/.metadata" in names
        assert f"dcp/{sub}/.metadata.tmp" not in names
        assert len([n for n in names if n.startswith(f"dcp/{sub}/") and n.endswith(".distcp")]) == 2
    plain = sum(o.size for o in sync_client.list_objects(bucket, "dcp/plain/"))
    packed = sum(o.size for o in sync_client.list_objects(bucket, "dcp/zstd/"))
    assert 0 < packed < plain * 1.05  # random floats barely compress; the stream still decodes
    assert sync_client.list_multipart_uploads(bucket) == []
