"""ckpt_save contender: ``torch.save`` into a gcsfs file.

``GCSFileSystem.open(path, "wb")`` buffers ``block_size`` bytes (gcsfs's
default) and sends them through one resumable upload session, chunk after
chunk. The plain ``GCSFileSystem`` is used
(``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``), so its gRPC bucket-type
probe, which waits out 60 s against an emulator, never runs.
"""

from __future__ import annotations

import argparse
import os

# Must be set before gcsfs is imported: it picks its class at import time.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

import torch
from _contender import Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state
from gcsfs.core import GCSFileSystem

if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    args = parser.parse_args(rest)
    fs = GCSFileSystem(project="perf", token="anon", endpoint_url=manifest.endpoint)
    state = build_state(args)
    rss_state = rss_mb()
    path = f"{manifest.bucket}/ckpt_save/gcsfs.pt"
    with Stopwatch() as watch:
        with fs.open(path, "wb") as f:
            torch.save(state, f)
            serialized = f.tell()
    stored = fs.info(path)["size"]
    report(watch, nbytes=serialized, items=1, serialized_bytes=serialized, stored_bytes=stored,
           rss_state_mb=round(rss_state, 1), block_size=fs.default_block_size)
