"""Moving from s3torchconnector (and the S3 IO DataPipes) to aioflux: one
training script, ``--backend s3torchconnector`` or ``--backend aioflux``.

Only the dataset and checkpoint constructors change; the DataLoader, the
training loop and ``torch.save`` / ``torch.load`` stay::

    s3torchconnector                                  aioflux
    ------------------------------------------------  ---------------------------------------
    S3MapDataset.from_prefix(uri, region=r,           ObjectMapDataset.from_prefix(uri,
        endpoint=e, transform=fn)                         transform=fn, settings=
                                                          DatasetSettings(endpoint=e))
    S3IterableDataset.from_prefix(uri, region=r)      ObjectIterableDataset.from_prefix(uri)
    S3Checkpoint(region=r, endpoint=e)                Checkpoint()
        .writer(uri) / .reader(uri)                       .writer(uri) / .reader(uri)
    list_files_by_s3 / load_files_by_s3 (DataPipes)   list_files(uri) / load_files(urls)
    (none)                                            CheckpointManager(root): save_async,
                                                          latest(), load(), keep_last, history()

Differences to know: s3torchconnector's ``transform`` gets an ``S3Reader``
(call ``.read()``), aioflux's gets the object's bytes. aioflux needs no
``region=``: it takes ``AWS_REGION`` / the profile's, else asks the bucket
(and corrects a wrong one, as boto3 does); the settings' ``endpoint`` (or
``AWS_ENDPOINT_URL_S3``) points both at an S3-compatible store. aioflux's
datasets read a batch's objects concurrently (s3torchconnector reads each
one sequentially per worker), and every read is checked by crc32c.

Run either side against moto's S3 server started here (``pip install
"moto[server]"``)::

    python examples/from_s3torchconnector.py --backend aioflux
    python examples/from_s3torchconnector.py --backend s3torchconnector

or against a bucket (AWS credentials from the usual chain)::

    python examples/from_s3torchconnector.py --backend aioflux --url s3://my-bucket/prefix \\
        --region eu-west-1

The s3torchconnector side imports nothing of aioflux, so it also runs in an
environment that has only torch and s3torchconnector.
"""

from __future__ import annotations

import argparse
import logging
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

FEATURES, CLASSES = 16, 4


def decode(data: bytes | bytearray) -> tuple[torch.Tensor, int]:
    """One sample's bytes -> (features, label)."""
    features = torch.frombuffer(bytearray(data[: 4 * FEATURES]), dtype=torch.float32)
    return features, struct.unpack("<i", data[4 * FEATURES:])[0]


def samples(count: int) -> Iterator[tuple[str, bytes]]:
    """``(name, bytes)`` of the dataset: random features, a linear label."""
    weights = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(0))
    rows = torch.randn(count, FEATURES, generator=torch.Generator().manual_seed(1))
    for i, x in enumerate(rows):
        yield f"sample-{i:06d}", struct.pack(f"<{FEATURES}fi", *x.tolist(),
                                             int((x @ weights).argmax()))


def import_s3torchconnector() -> Any:
    """s3torchconnector, imported only when asked for, with a clear error."""
    try:
        import s3torchconnector
    except ImportError as exc:
        raise SystemExit(
            f"--backend s3torchconnector needs s3torchconnector, which did not import ({exc}). "
            "Install it with `pip install s3torchconnector`, or run with --backend aioflux."
        ) from exc
    return s3torchconnector


# ---- the lines that differ --------------------------------------------------------


def s3tc_config(endpoint: str | None) -> Any:
    s3tc = import_s3torchconnector()
    # An S3-compatible store on a plain host needs path-style URLs.
    return s3tc.S3ClientConfig(force_path_style=endpoint is not None)


def s3tc_decode(reader: Any) -> tuple[torch.Tensor, int]:
    return decode(reader.read())  # s3torchconnector hands over a file-like S3Reader


def make_dataset(backend: str, uri: str, region: str, endpoint: str | None) -> Any:
    if backend == "s3torchconnector":
        s3tc = import_s3torchconnector()
        return s3tc.S3MapDataset.from_prefix(uri, region=region, endpoint=endpoint,
                                             transform=s3tc_decode,
                                             s3client_config=s3tc_config(endpoint))
    from aioflux.torch import DatasetSettings, ObjectMapDataset

    return ObjectMapDataset.from_prefix(uri, transform=decode,
                                        settings=DatasetSettings(endpoint=endpoint))


def checkpoint(backend: str, region: str, endpoint: str | None) -> Any:
    """An object with ``.writer(uri)`` and ``.reader(uri)``, in either library."""
    if backend == "s3torchconnector":
        s3tc = import_s3torchconnector()
        return s3tc.S3Checkpoint(region=region, endpoint=endpoint,
                                 s3client_config=s3tc_config(endpoint))
    from aioflux.torch import Checkpoint

    # The process-wide S3 store: its endpoint is AWS_ENDPOINT_URL_S3 (see main).
    return Checkpoint()


def write_dataset(backend: str, uri: str, count: int, region: str,
                  endpoint: str | None) -> None:
    """Store the samples under ``uri`` with the library being shown."""
    if backend == "s3torchconnector":
        ckpt = checkpoint(backend, region, endpoint)  # its writer writes any object
        for name, body in samples(count):
            with ckpt.writer(uri + name) as writer:
                writer.write(body)
        return
    import aioflux

    # One file object per sample keeps the example short; a real job would
    # write them concurrently with an S3Store.
    for name, body in samples(count):
        with aioflux.open(uri + name, "wb") as f:
            f.write(body)
    listed = list(aioflux.list_files(uri))  # list_files_by_s3's successor
    assert len(listed) == count, (len(listed), count)


# ---- the same for both ------------------------------------------------------------


def train(backend: str, url: str, region: str, endpoint: str | None, count: int,
          workers: int) -> str:
    data_uri = url.rstrip("/") + "/data/"
    write_dataset(backend, data_uri, count, region, endpoint)
    dataset = make_dataset(backend, data_uri, region, endpoint)
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
    assert seen == count, (seen, count)

    ckpt_uri = url.rstrip("/") + "/model.pt"
    ckpt = checkpoint(backend, region, endpoint)
    with ckpt.writer(ckpt_uri) as writer:
        torch.save(model.state_dict(), writer)
    with ckpt.reader(ckpt_uri) as reader:
        restored = torch.load(reader)
    assert all(torch.equal(restored[k], v) for k, v in model.state_dict().items())
    return (f"from_s3torchconnector[{backend}]: 1 epoch over {seen} samples "
            f"(loss {total / seen:.3f}), checkpoint saved and loaded back from {ckpt_uri}")


@contextmanager
def storage(url: str | None, endpoint: str | None) -> Iterator[tuple[str, str | None]]:
    """``(s3:// URL, endpoint)`` to use: the given ones, or moto's S3 server
    started here with a fresh bucket."""
    if url is not None:
        yield url, endpoint
        return
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise SystemExit(f"without --url this example runs against moto's S3 server, which "
                         f"did not import ({exc}): `pip install \"moto[server]\"`") from exc
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        moto = f"http://{host}:{port}"
        import urllib.request

        # CreateBucket: moto accepts it unsigned.
        urllib.request.urlopen(urllib.request.Request(f"{moto}/examples", method="PUT"))
        yield "s3://examples/from-s3torchconnector", moto
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["aioflux", "s3torchconnector"],
                        default="aioflux")
    parser.add_argument("--url", help="s3://bucket/prefix (default: moto's S3 server, "
                                      "started here)")
    parser.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL_S3"),
                        help="an S3-compatible store's API root (default: "
                             "AWS_ENDPOINT_URL_S3, else AWS)")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"),
                        help="the bucket's region (s3torchconnector needs it)")
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    args = parser.parse_args()
    if args.backend == "s3torchconnector":
        import_s3torchconnector()  # fail before any work if it is missing
    with storage(args.url, args.endpoint) as (url, endpoint):
        if endpoint is not None and args.backend == "aioflux":
            # aioflux's process-wide stores (aioflux.open, Checkpoint(),
            # list_files) follow the AWS convention for S3-compatible stores.
            os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
        print(train(args.backend, url, args.region, endpoint, args.samples, args.workers))


if __name__ == "__main__":
    main()
