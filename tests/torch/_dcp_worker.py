"""Rank body of the 2-process DCP tests (gloo on CPU), started from the tests' forkserver."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor


def full_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(42)
    return {"w": torch.randn(64, 1000, generator=g), "b": torch.randn(1000, generator=g),
            "emb": torch.randn(128, 300, generator=g)}


def run(rank: int, world: int, rendezvous: str, endpoint: str, root: str) -> None:
    """One rank; the ranks meet through the file ``rendezvous`` (no port,
    which another process could take between its choice and its use)."""
    # gs:// roots: our emulator; s3:// roots: moto; file:// roots need none.
    # Set here: a rank started from the tests' forkserver has the server's
    # environment, not the test's.
    if endpoint:
        os.environ["AWS_ENDPOINT_URL_S3" if root.startswith("s3://")
                   else "STORAGE_EMULATOR_HOST"] = endpoint
    from aioflux.torch.dcp import DcpReader, DcpWriter

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        full = full_tensors()

        def sharded(zero: bool) -> dict[str, object]:
            sd: dict[str, object] = {
                k: distribute_tensor(torch.zeros_like(v) if zero else v, mesh, [Shard(0)])
                for k, v in full.items()}
            sd["step"] = 0 if zero else 7
            return sd

        # 1) blocking save / load
        dcp.save(sharded(False), storage_writer=DcpWriter(f"{root}/plain"))
        # 2) async save with DCP's zstd stream extension
        fut = dcp.async_save(sharded(False),
                             storage_writer=DcpWriter(f"{root}/zstd", compression="zstd"))
        fut.result()
        for sub in ("plain", "zstd"):
            target = sharded(True)
            dcp.load(target, storage_reader=DcpReader(f"{root}/{sub}"))
            assert target["step"] == 7, (sub, target["step"])
            for k, v in full.items():
                t = target[k]
                assert isinstance(t, DTensor)
                assert torch.equal(t.full_tensor(), v), (sub, k)
                # the local shard is this rank's rows only
                assert t.to_local().shape[0] == v.shape[0] // world
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Checked and done: leave without the interpreter's teardown, where a
    # torch/gloo C++ thread now and then aborted the rank ("terminate called
    # without an active exception", SIGABRT) after everything had passed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
