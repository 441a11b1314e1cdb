"""The training part of ``aioflux demo``: a tiny classifier fed from a bucket.

Runs in a spawned process for the phase that "crashes" (it SIGKILLs itself
while a checkpoint save is in flight) and in the demo process for the
resume. Events go to a JSON-lines file, flushed per line, so the parent
still sees everything written before the kill.

Each checkpoint carries the dataset's position (``data_state``), so the
resume continues the epoch where the restored model left it; each sample
carries its index, and every checkpoint's event lists the ``(epoch, index)``
pairs trained since the previous one, so the parent can check that the
restored run trained on every planned sample once per epoch.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..torch import CheckpointManager, DatasetSettings, ObjectIterableDataset, Order

__all__ = ["FEATURES", "TrainPlan", "decode_sample", "encode_sample", "main", "train"]

FEATURES = 254  # 254 float32 + an int32 label + an int32 index = 1 KiB per sample
CLASSES = 10


def encode_sample(features: torch.Tensor, label: int, index: int) -> bytes:
    """Serialize one sample as raw little-endian bytes."""
    # struct rather than Tensor.numpy(): no copy through another library.
    return struct.pack(f"<{FEATURES}fii", *features.tolist(), label, index)


def decode_sample(data: bytes) -> tuple[torch.Tensor, int, int]:
    """The dataset's ``transform``: bytes -> (features, label, sample index)."""
    features = torch.frombuffer(bytearray(data[: 4 * FEATURES]), dtype=torch.float32)
    label, index = struct.unpack("<ii", data[4 * FEATURES:])
    return features, label, index


def make_model() -> nn.Module:
    """~1.3 M parameters: a checkpoint (with Adam state) of ~16 MB."""
    return nn.Sequential(nn.Linear(FEATURES, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, CLASSES))


@dataclass(frozen=True)
class TrainPlan:
    """What one training phase does."""

    data_url: str
    ckpt_root: str
    endpoint: str | None
    total_steps: int
    ckpt_every: int
    batch_size: int
    workers: int
    crash_at: int | None
    events: str


def _emit(path: str, **event: Any) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def _progress(step: int, total: int, loss: float, rate: float, phase: str) -> None:
    width = 30
    filled = int(width * step / total)
    line = (f"\r  {phase:<8} [{'#' * filled}{'-' * (width - filled)}] step {step:>4}/{total} "
            f"loss {loss:6.3f} {rate:8,.0f} samples/s ")
    if sys.stderr.isatty():
        sys.stderr.write(line)
        sys.stderr.flush()


def train(plan: TrainPlan, phase: str) -> None:
    """Train until ``plan.total_steps`` (or ``plan.crash_at``), resuming model,
    optimizer and data position if a checkpoint exists; checkpoints go out
    with ``save_async`` every ``plan.ckpt_every`` steps.

    Args:
        plan: the phase's settings.
        phase: label for progress and events.
    """
    torch.manual_seed(0)
    from .._api.sync import Client

    client = Client(endpoint=plan.endpoint)
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    manager = CheckpointManager(plan.ckpt_root, keep_last=3, client=client)
    step = 0
    # batch_size: the global order is cut into batches of this size (one
    # rank), which is what makes the saved position exact.
    dataset = ObjectIterableDataset.from_prefix(
        plan.data_url, transform=decode_sample, settings=DatasetSettings(endpoint=plan.endpoint),
        order=Order(seed=1, batch_size=plan.batch_size))
    _emit(plan.events, kind="listed", phase=phase, objects=len(dataset.objects))
    latest = manager.latest()
    if latest is not None:
        state = manager.load(latest.step)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
        data_state = manager.load_data_state(latest.step)
        if data_state is not None:
            dataset.load_state_dict(data_state)
        _emit(plan.events, kind="resumed", phase=phase, step=step,
              epoch=dataset.epoch, position=data_state and data_state["samples"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=plan.batch_size,
                                         num_workers=plan.workers,
                                         persistent_workers=plan.workers > 0)
    loss_fn = nn.CrossEntropyLoss()
    samples = 0
    blocked = 0.0
    start = time.perf_counter()
    epoch = dataset.epoch  # the restored one, mid-epoch, or 0
    trained: list[tuple[int, int]] = []  # (epoch, sample index) since the last checkpoint
    loss = torch.tensor(0.0)
    while step < plan.total_steps:
        dataset.set_epoch(epoch)
        # track(): the position counts batches this loop took, not the ones
        # the workers have fetched ahead.
        for features, labels, indices in dataset.track(loader):
            trained.extend((epoch, int(i)) for i in indices.tolist())
            optimizer.zero_grad()
            loss = loss_fn(model(features), labels)
            loss.backward()
            loss = loss.detach()
            optimizer.step()
            step += 1
            samples += len(labels)
            _progress(step, plan.total_steps, float(loss), samples / (time.perf_counter() - start),
                      phase)
            if step % plan.ckpt_every == 0 or step == plan.total_steps:
                t0 = time.perf_counter()
                manager.save_async({"model": model.state_dict(),
                                    "optimizer": optimizer.state_dict(), "step": step}, step,
                                   data_state=dataset.state_dict())
                blocked += time.perf_counter() - t0
                _emit(plan.events, kind="trained", phase=phase, step=step, samples=trained)
                trained = []
                _emit(plan.events, kind="saved", phase=phase, step=step, count=samples,
                      seconds=time.perf_counter() - start, blocked=blocked, loss=float(loss))
                if plan.crash_at is not None and step >= plan.crash_at:
                    # The crash: the save just started is still uploading.
                    os.kill(os.getpid(), signal.SIGKILL)
            if step >= plan.total_steps:
                break
        epoch += 1
    manager.wait()
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    _emit(plan.events, kind="done", phase=phase, step=step, count=samples,
          seconds=time.perf_counter() - start, blocked=blocked, loss=float(loss))
    manager.close()
    client.close()


def main() -> None:
    """Entry point of the crashing phase: ``python -c ... main()`` with the
    plan as JSON in ``argv[1]``."""
    train(TrainPlan(**json.loads(sys.argv[1])), "train")
