"""dcp_save contender: ``dcp.save`` through aioflux's DCP writer.

``GcsStorageWriter(gs://...)``: one data file per rank streamed by the
multipart writer, each item's crc32c recorded as it is written, items
without torch's zip CRC32 (the crc32c covers them), ``.metadata`` last.
One process, no process group (DCP's single-process save).
"""

from __future__ import annotations

import argparse
import warnings

import torch.distributed.checkpoint as dcp
from _contender import Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state, state_bytes

from aioflux import AsyncClient
from aioflux.torch.dcp import GcsStorageWriter

if __name__ == "__main__":
    warnings.filterwarnings("ignore", "torch.distributed is disabled")
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    args = parser.parse_args(rest)
    client = AsyncClient(endpoint=manifest.endpoint)
    state = build_state(args)
    rss_state = rss_mb()
    root = f"gs://{manifest.bucket}/dcp_save/aioflux"
    with Stopwatch() as watch:
        dcp.save(state, storage_writer=GcsStorageWriter(root, client=client))
    report(watch, nbytes=state_bytes(state), items=1, rss_state_mb=round(rss_state, 1))
