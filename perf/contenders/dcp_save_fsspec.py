"""dcp_save contender: ``dcp.save`` through torch's fsspec writer on gcsfs.

``torch.distributed.checkpoint._fsspec_filesystem.FsspecWriter(gs://..., token="anon",
endpoint_url=emulator)``: DCP's own writer for fsspec paths, the way to a
bucket that torch ships, with gcsfs underneath (resumable uploads of
gcsfs's default block size; items with torch's zip CRC32). The plain
``GCSFileSystem`` is used (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``), as
in ``ckpt_save_gcsfs.py``.
"""

from __future__ import annotations

import argparse
import os
import warnings

# Must be set before gcsfs is imported: it picks its class at import time.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

import torch.distributed.checkpoint as dcp
from _contender import Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state, state_bytes
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

if __name__ == "__main__":
    warnings.filterwarnings("ignore", "torch.distributed is disabled")
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    args = parser.parse_args(rest)
    state = build_state(args)
    rss_state = rss_mb()
    root = f"gs://{manifest.bucket}/dcp_save/fsspec"
    with Stopwatch() as watch:
        # sync_files: fsspec's files have no descriptor to fsync.
        dcp.save(state, storage_writer=FsspecWriter(root, sync_files=False, token="anon",
                                                     project="perf",
                                                     endpoint_url=manifest.endpoint))
    report(watch, nbytes=state_bytes(state), items=1, rss_state_mb=round(rss_state, 1))
