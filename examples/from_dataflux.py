"""Moving from dataflux (``gcs-torch-dataflux``) to aioflux: one training
script, ``--backend dataflux`` or ``--backend aioflux``.

Only the dataset and checkpoint constructors change; the DataLoader, the
training loop, the decoding function (``transform=`` here) and
``torch.save`` / ``torch.load`` stay::

    dataflux                                          aioflux
    ------------------------------------------------  ---------------------------------------
    DataFluxMapStyleDataset(project, bucket,          ObjectMapDataset.from_prefix(
        config=Config(prefix=prefix),                     f"gs://{bucket}/{prefix}",
        data_format_fn=fn)                                transform=fn)
    DatafluxCheckpoint(project, bucket)               Checkpoint()
        .writer(name) / .reader(name)                     .writer(url) / .reader(url)
    (none)                                            CheckpointManager(root): save_async,
                                                          latest(), load(), keep_last, history()

Differences to know: aioflux's writer streams parts as ``torch.save``
produces them and publishes the object only on a clean close (dataflux
buffers everything in memory and uploads on ``close()``, also when the
``with`` body raised); its reader serves ``torch.load`` with parallel ranged
reads; its datasets also accept ``transform=`` (the same thing) and list
without one process per CPU.

Run the aioflux side on the bundled emulator::

    python examples/from_dataflux.py --backend aioflux

the dataflux side (needs ``pip install gcs-torch-dataflux 'google-cloud-storage<3'``;
the script seeds data with aioflux either way)::

    python examples/from_dataflux.py --backend dataflux

or either against a real bucket::

    python examples/from_dataflux.py --backend aioflux --url gs://my-bucket/prefix --project my-proj
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from aioflux import AsyncClient, Client, Conflict, parse_url

FEATURES, CLASSES = 16, 4


def data_format_fn(data: bytes | bytearray) -> tuple[torch.Tensor, int]:
    """bytes -> (features, label); both libraries call it for every object."""
    features = torch.frombuffer(bytearray(data[: 4 * FEATURES]), dtype=torch.float32)
    return features, struct.unpack("<i", data[4 * FEATURES:])[0]


def import_dataflux() -> Any:
    """dataflux's modules, imported only when asked for, with a clear error."""
    try:
        from dataflux_pytorch import dataflux_checkpoint, dataflux_mapstyle_dataset
    except ImportError as exc:
        raise SystemExit(
            f"--backend dataflux needs gcs-torch-dataflux, which did not import ({exc}). "
            "Install it with `pip install gcs-torch-dataflux 'google-cloud-storage<3'`, "
            "or run with --backend aioflux.") from exc
    return dataflux_mapstyle_dataset, dataflux_checkpoint


# ---- the lines that differ --------------------------------------------------------


def make_dataset(backend: str, project: str, bucket: str, prefix: str) -> Any:
    if backend == "dataflux":
        mapstyle, _ = import_dataflux()
        return mapstyle.DataFluxMapStyleDataset(
            project_name=project, bucket_name=bucket,
            config=mapstyle.Config(prefix=prefix), data_format_fn=data_format_fn)
    from aioflux.torch import ObjectMapDataset

    return ObjectMapDataset.from_prefix(f"gs://{bucket}/{prefix}", transform=data_format_fn)


def save_checkpoint(backend: str, project: str, bucket: str, name: str, state: Any,
                    client: Client) -> None:
    if backend == "dataflux":
        _, checkpoint = import_dataflux()
        ckpt = checkpoint.DatafluxCheckpoint(project_name=project, bucket_name=bucket)
        with ckpt.writer(name) as writer:
            torch.save(state, writer)
        return
    from aioflux.torch import Checkpoint

    # Checkpoint(client) is like DatafluxCheckpoint(..., storage_client=client);
    # without one it uses a process-wide client.
    with Checkpoint(client).writer(f"gs://{bucket}/{name}") as writer:
        torch.save(state, writer)


def load_checkpoint(backend: str, project: str, bucket: str, name: str, client: Client) -> Any:
    if backend == "dataflux":
        _, checkpoint = import_dataflux()
        ckpt = checkpoint.DatafluxCheckpoint(project_name=project, bucket_name=bucket)
        with ckpt.reader(name) as reader:
            return torch.load(reader)
    from aioflux.torch import Checkpoint

    with Checkpoint(client).reader(f"gs://{bucket}/{name}") as reader:
        return torch.load(reader)


# ---- the same for both ------------------------------------------------------------


def train(backend: str, project: str, url: str, samples: int, workers: int) -> str:
    bucket, prefix = parse_url(url.rstrip("/") + "/data/")
    asyncio.run(write_dataset(bucket, prefix, samples))

    dataset = make_dataset(backend, project, bucket, prefix)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True,
                                         num_workers=workers)
    torch.manual_seed(0)
    model = nn.Linear(FEATURES, CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    seen, total = 0, 0.0
    for features, labels in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(features), labels)
        loss.backward()
        optimizer.step()
        seen += len(labels)
        total += loss.item() * len(labels)
    assert seen == samples, (seen, samples)

    name = parse_url(url.rstrip("/") + "/model.pt").name
    with Client() as client:  # closed here, releasing its connections
        save_checkpoint(backend, project, bucket, name, model.state_dict(), client)
        restored = load_checkpoint(backend, project, bucket, name, client)
    assert all(torch.equal(restored[k], v) for k, v in model.state_dict().items())
    return (f"from_dataflux[{backend}]: 1 epoch over {seen} samples (loss {total / seen:.3f}), "
            f"checkpoint saved and loaded back from gs://{bucket}/{name}")


async def write_dataset(bucket: str, prefix: str, samples: int) -> None:
    weights = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(0))
    rows = torch.randn(samples, FEATURES, generator=torch.Generator().manual_seed(1))
    async with AsyncClient() as client:
        await asyncio.gather(*(
            client.write(bucket, f"{prefix}sample-{i:06d}",
                         struct.pack(f"<{FEATURES}fi", *x.tolist(),
                                     int((x @ weights).argmax())))
            for i, x in enumerate(rows)))


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
        yield f"gs://{default_bucket}/from-dataflux"
        return
    from aioflux.testing import GCS_LIKE_PROFILE, running_emulator

    with running_emulator(profile=GCS_LIKE_PROFILE) as emu:
        emu.create_bucket(default_bucket)
        # Both libraries (google-cloud-storage under dataflux) honour this variable.
        os.environ["STORAGE_EMULATOR_HOST"] = emu.endpoint
        try:
            yield f"gs://{default_bucket}/from-dataflux"
        finally:
            del os.environ["STORAGE_EMULATOR_HOST"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["aioflux", "dataflux"], default="aioflux")
    parser.add_argument("--url", help="gs://bucket/prefix (default: the bundled emulator)")
    parser.add_argument("--project", default="aioflux-example",
                        help="GCP project (dataflux needs one; aioflux does not)")
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    args = parser.parse_args()
    if args.backend == "dataflux":
        import_dataflux()  # fail before any work if it is missing
    with storage(args.url, "aioflux-examples") as url:
        print(train(args.backend, args.project, url, args.samples, args.workers))


if __name__ == "__main__":
    main()
