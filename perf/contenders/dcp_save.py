"""dcp_save contender: ``dcp.save`` of the checkpoint state in one process.

``--writer aioflux``: ``GcsStorageWriter(gs://...)``, one data file per
rank streamed by the multipart writer, each item's crc32c recorded as it
is written, items without torch's zip CRC32 (the crc32c covers them),
``.metadata`` last. Runs under the project's python.

``--writer fsspec``: torch's own
``torch.distributed.checkpoint._fsspec_filesystem.FsspecWriter(gs://...,
token="anon", endpoint_url=emulator)``, the way to a bucket that torch
ships, with gcsfs underneath (its default block size; items with torch's
zip CRC32; ``sync_files=False``: fsspec's files have no descriptor to
fsync; ``--threads N``: its ``thread_count=N``, N data files written at
once, 1 unless given). Runs under the gcsfs venv, with the plain
``GCSFileSystem`` (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``, as in
``ckpt_save_gcsfs.py``).

No process group: DCP's single-process save.
"""

from __future__ import annotations

import argparse
import os
import warnings
from typing import Any

# Must be set before gcsfs is imported: it picks its class at import time.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

import torch.distributed.checkpoint as dcp
from _contender import Manifest, Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state, state_bytes


def _writer(kind: str, manifest: Manifest, threads: int) -> Any:
    root = f"gs://{manifest.bucket}/dcp_save/{kind}"
    if kind == "aioflux":
        from aioflux import AsyncClient
        from aioflux.torch.dcp import GcsStorageWriter

        return GcsStorageWriter(root, client=AsyncClient(endpoint=manifest.endpoint))
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    return FsspecWriter(root, sync_files=False, thread_count=threads, token="anon",
                        project="perf", endpoint_url=manifest.endpoint)


if __name__ == "__main__":
    warnings.filterwarnings("ignore", "torch.distributed is disabled")
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    parser.add_argument("--writer", choices=["aioflux", "fsspec"], required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(rest)
    writer = _writer(args.writer, manifest, args.threads)
    state = build_state(args)
    rss_state = rss_mb()
    with Stopwatch() as watch:
        dcp.save(state, storage_writer=writer)
    report(watch, nbytes=state_bytes(state), items=1, rss_state_mb=round(rss_state, 1))
