"""dcp_load contender: ``dcp.load`` of the checkpoint state from a bucket in one process.

``--reader aioflux``: ``DcpReader(gs://...)`` of a checkpoint
``DcpWriter`` saved (items' crc32c recorded). Runs under the project's
python.

``--reader fsspec``: torch's own
``torch.distributed.checkpoint._fsspec_filesystem.FsspecReader(gs://...,
token="anon", endpoint_url=emulator)`` of a checkpoint its
``FsspecWriter`` saved, gcsfs underneath. Runs under the gcsfs venv, with
the plain ``GCSFileSystem`` (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``,
as in ``ckpt_save_gcsfs.py``).

Each side's checkpoint is saved once a run (untimed: skipped when its
``.metadata`` is there); the timed load fills a state of zeros built
before the timer, checked bit for bit after it (items 1, or 0 if any
tensor differs). No process group: DCP's single-process load.
"""

from __future__ import annotations

import argparse
import os
import urllib.error
import urllib.request
import warnings
from typing import Any
from urllib.parse import quote

# Must be set before gcsfs is imported: it picks its class at import time.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

import torch
import torch.distributed.checkpoint as dcp
from _contender import Manifest, Stopwatch, load, report
from ckpt_common import add_state_args, build_state, state_bytes


def _saved(manifest: Manifest, root: str) -> bool:
    """Whether ``root`` (a folder of the run's bucket) holds a checkpoint."""
    name = quote(f"{root}/.metadata", safe="")
    url = f"{manifest.endpoint}/storage/v1/b/{manifest.bucket}/o/{name}"
    try:
        with urllib.request.urlopen(url) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise
    return True


def _sides(kind: str, manifest: Manifest, root: str) -> tuple[Any, Any]:
    """The writer that saves the checkpoint and the reader timed."""
    url = f"gs://{manifest.bucket}/{root}"
    if kind == "aioflux":
        from aioflux import Client
        from aioflux.torch.dcp import DcpReader, DcpWriter

        client = Client(endpoint=manifest.endpoint)
        return DcpWriter(url, client=client), DcpReader(url, client=client)
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    options = {"token": "anon", "project": "perf", "endpoint_url": manifest.endpoint}
    return FsspecWriter(url, sync_files=False, **options), FsspecReader(url, **options)


if __name__ == "__main__":
    warnings.filterwarnings("ignore", "torch.distributed is disabled")
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    parser.add_argument("--reader", choices=["aioflux", "fsspec"], required=True)
    args = parser.parse_args(rest)
    root = f"dcp_load/{args.reader}-{args.count}x{args.tensor_mib}"
    writer, reader = _sides(args.reader, manifest, root)
    state = build_state(args)
    if not _saved(manifest, root):
        dcp.save(state, storage_writer=writer)
    target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
              for k, v in state.items()}
    with Stopwatch() as watch:
        dcp.load(target, storage_reader=reader)
    same = all(torch.equal(target[k], v) for k, v in state.items()
               if isinstance(v, torch.Tensor)) and target["step"] == state["step"]
    report(watch, nbytes=state_bytes(state), items=int(same))
