"""``torch.distributed.checkpoint`` to gs://: ``dcp.async_save`` with
``DcpWriter`` while training goes on, then ``dcp.load`` with
``DcpReader`` into a fresh model and optimizer.

``dcp.async_save`` stages the state dict to CPU memory, returns a future
and uploads in a background thread: each rank's data file is a streaming
multipart upload, and the ``.metadata`` object is published last, so a
checkpoint either loads completely or not at all. ``get_state_dict`` /
``set_state_dict`` give model and optimizer state in DCP's form (the same
calls work for FSDP / DTensor models). This runs as one process in a gloo
group of one; under ``torchrun`` every rank would write its own shard.

Run it on the bundled emulator (20 ms to first byte, 100 MB/s per connection)::

    python examples/dcp_async_save.py

or against a real bucket (checkpoints go under ``PREFIX/dcp/step-N/``)::

    python examples/dcp_async_save.py --url gs://my-bucket/aioflux-example

Needs numpy (``pip install numpy``): DCP gathers its plans with
torch.distributed's object collectives, which pickle through it.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

try:
    # DCP gathers its save and load plans with torch.distributed's object
    # collectives, which pickle through numpy; the CPU torch wheel does not
    # bring it. Say so before torch fails deep inside with "Numpy is not
    # available".
    import numpy  # noqa: F401
except ImportError as exc:
    raise SystemExit(f"dcp_async_save.py needs numpy (torch.distributed.checkpoint uses it), "
                     f"which did not import ({exc}): `pip install numpy`") from exc

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from aioflux import Client, Conflict
from aioflux.torch.dcp import DcpReader, DcpWriter


def make_model(width: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 64))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def run(url: str, steps: int, save_every: int, width: int) -> str:
    root = f"{url.rstrip('/')}/dcp"
    torch.manual_seed(0)
    model, optimizer = make_model(width)
    pending: Future[object] | None = None
    blocked = 0.0
    saves = 0
    with Client() as client:  # closed at the end, releasing its connections
        for step in range(1, steps + 1):
            x = torch.randn(32, 64)
            loss = nn.functional.mse_loss(model(x), x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % save_every == 0 or step == steps:
                t0 = time.perf_counter()
                if pending is not None:
                    pending.result()  # one save in flight at a time; re-raises its error
                model_sd, optim_sd = get_state_dict(model, optimizer)
                pending = dcp.async_save(
                    {"model": model_sd, "optim": optim_sd, "step": step},
                    storage_writer=DcpWriter(f"{root}/step-{step}", client=client))
                blocked += time.perf_counter() - t0
                saves += 1
        assert pending is not None
        pending.result()  # the last save

        # Restore into fresh objects, as a new job would. DCP loads in place:
        # the target state dict says which tensors to read and their shapes.
        fresh_model, fresh_optimizer = make_model(width)
        model_sd, optim_sd = get_state_dict(fresh_model, fresh_optimizer)
        state = {"model": model_sd, "optim": optim_sd, "step": 0}
        dcp.load(state, storage_reader=DcpReader(f"{root}/step-{steps}", client=client))
        set_state_dict(fresh_model, fresh_optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
    assert state["step"] == steps
    for (name, a), b in zip(model.state_dict().items(), fresh_model.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    for a, b in zip(optimizer.state_dict()["state"].values(),
                    fresh_optimizer.state_dict()["state"].values(), strict=True):
        assert all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)
    tensors = len(model.state_dict())
    return (f"dcp_async_save: {saves} async saves during {steps} steps, training blocked "
            f"{blocked:.2f} s in all; loaded {root}/step-{steps} into a fresh model: "
            f"{tensors} tensors and the optimizer state match")


@contextmanager
def storage(url: str | None, default_bucket: str) -> Iterator[str]:
    """Yield the gs:// URL to use, starting the bundled emulator if needed."""
    if url is not None:
        yield url
        return
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        with Client() as client:  # an emulator someone else started: add our bucket
            try:
                client.create_bucket(default_bucket)
            except Conflict:
                pass
        yield f"gs://{default_bucket}"
        return
    from aioflux.testing import GCS_LIKE_PROFILE, running_emulator

    with running_emulator(profile=GCS_LIKE_PROFILE) as emu:
        emu.create_bucket(default_bucket)
        os.environ["STORAGE_EMULATOR_HOST"] = emu.endpoint  # every aioflux client honours it
        try:
            yield f"gs://{default_bucket}"
        finally:
            del os.environ["STORAGE_EMULATOR_HOST"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="gs://bucket/prefix (default: the bundled emulator)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--width", type=int, default=1024, help="hidden units (checkpoint size)")
    args = parser.parse_args()
    # DCP coordinates ranks through a process group; a group of one needs no
    # rendezvous, so an in-memory store will do.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with storage(args.url, "aioflux-examples") as url:
            print(run(url, args.steps, args.save_every, args.width))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
