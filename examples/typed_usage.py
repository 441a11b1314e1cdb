"""A user's script: the client, a store's blocking face, both datasets and
the checkpoint manager, written the way a user writes them, with type
annotations.

CI (``.ci/run``) type-checks this file with ``mypy --strict`` from a
directory outside the checkout, against the package installed by
``pip install -e .``, so it proves both that the public API is precisely
typed and that an editable install is visible to type checkers.
``tests/examples`` also runs it: it starts the bundled emulator itself.

    python examples/typed_usage.py
"""

from __future__ import annotations

import os
import tempfile

import torch
from torch.utils.data import DataLoader

import aioflux
from aioflux import Client, ListPage, LocalStore, ObjectInfo, SyncStore
from aioflux.testing import running_emulator
from aioflux.torch import (
    CheckpointInfo,
    CheckpointManager,
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
)

BUCKET = "typed-usage"
SAMPLES = 12


def decode(data: bytes) -> torch.Tensor:
    """The datasets' transform: an object's bytes as a uint8 tensor."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def write_samples(client: Client) -> list[ObjectInfo]:
    """``SAMPLES`` objects of 16 bytes each under ``data/``."""
    return [client.write(BUCKET, f"data/{i:03d}.bin", bytes([i]) * 16) for i in range(SAMPLES)]


def check_client(client: Client) -> str:
    """Whole and ranged reads, stat and listing; returns the greeting read back."""
    client.write(BUCKET, "hello.txt", b"hello, typed world")
    greeting: str = client.read(BUCKET, "hello.txt").decode()
    head: bytes = client.read(BUCKET, "hello.txt", start=0, end=5)
    assert head == b"hello", head
    info: ObjectInfo = client.stat(BUCKET, "hello.txt")
    assert info.size == len(greeting)
    names: list[str] = [obj.name for obj in client.list_objects(BUCKET, "data/")]
    assert len(names) == SAMPLES, names
    return greeting


def check_sync_store(folder: str) -> int:
    """Any store's blocking face (here the filesystem's), typed as its store's
    methods are; returns the bytes read back into a buffer."""
    bucket, _, prefix = folder.strip("/").partition("/")
    with SyncStore(LocalStore()) as files:
        written: ObjectInfo = files.write(bucket, f"{prefix}/a.bin", b"0123456789")
        buffer = bytearray(written.size)
        count: int = files.read(bucket, f"{prefix}/a.bin", into=buffer)
        pages: list[ListPage] = list(files.list(bucket, f"{prefix}/", delimiter="/"))
        assert [o.name for page in pages for o in page.objects] == [f"{prefix}/a.bin"]
        files.delete(bucket, f"{prefix}/a.bin")
        return count


def check_datasets() -> int:
    """One pass over each dataset; returns the bytes seen by the map-style one."""
    train = ObjectMapDataset.from_prefix(f"gs://{BUCKET}/data/", transform=decode)
    first: torch.Tensor = train[0]
    assert first.tolist() == [0] * 16
    seen = 0
    for batch in DataLoader(train, batch_size=4):
        seen += batch.numel()
    stream = ObjectIterableDataset.from_prefix(f"gs://{BUCKET}/data/", transform=decode,
                                               order=Order(seed=0))
    stream.set_epoch(0)
    sums = sorted(int(sample.sum()) for sample in stream)
    assert sums == [16 * i for i in range(SAMPLES)], sums
    return seen


def check_checkpoints() -> int:
    """Save twice (once in the background), load the latest into a model."""
    model = torch.nn.Linear(4, 2)
    manager = CheckpointManager(f"gs://{BUCKET}/run", keep_last=2)
    try:
        manager.save({"model": model.state_dict(), "step": 1}, 1)
        with torch.no_grad():
            model.weight.fill_(0.5)
        manager.save_async({"model": model.state_dict(), "step": 2}, 2).result()
        manager.wait()
        restored = torch.nn.Linear(4, 2)
        restored.load_state_dict(manager.load()["model"])
        assert torch.equal(restored.weight, model.weight)
        latest: CheckpointInfo | None = manager.latest()
        assert latest is not None
        return latest.step
    finally:
        manager.close()


def main() -> None:
    with running_emulator() as emulator:
        # Like any GCS tool, aioflux talks to an emulator named here.
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.endpoint
        emulator.create_bucket(BUCKET)
        with Client() as client:
            write_samples(client)
            greeting = check_client(client)
        with tempfile.TemporaryDirectory() as folder:
            assert check_sync_store(folder) == 10
        seen = check_datasets()
        step = check_checkpoints()
    print(f"typed_usage: aioflux {aioflux.__version__}: read {greeting!r}, "
          f"{seen} bytes through ObjectMapDataset, latest checkpoint step {step}")


if __name__ == "__main__":
    main()
