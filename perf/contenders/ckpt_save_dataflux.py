"""ckpt_save contender: gcs-torch-dataflux's ``DatafluxCheckpoint`` writer.

``DatafluxCheckpoint(project_name, bucket_name)`` builds its own
``storage.Client(project=...)``; google-cloud-storage 2.x sees
``STORAGE_EMULATOR_HOST`` (set by the harness), points at the emulator and
uses anonymous credentials, so nothing is passed in or bypassed.
``writer(name)`` is a ``BytesIO``: ``torch.save`` serialises the whole
checkpoint into memory, and ``close()`` uploads it with the XML multipart
API (8 threads x 32 MiB parts, each part copied to ``bytes`` first).
"""

from __future__ import annotations

import argparse

import torch
from _contender import Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state
from dataflux_pytorch.dataflux_checkpoint import DatafluxCheckpoint

if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    args = parser.parse_args(rest)
    ckpt = DatafluxCheckpoint(project_name="perf", bucket_name=manifest.bucket)
    state = build_state(args)
    rss_state = rss_mb()
    name = "ckpt_save/dataflux.pt"
    with Stopwatch() as watch:
        with ckpt.writer(name) as writer:
            torch.save(state, writer)
            serialized = writer.getbuffer().nbytes
    stored = ckpt.bucket.get_blob(name).size
    report(watch, nbytes=serialized, items=1, serialized_bytes=serialized, stored_bytes=stored,
           rss_state_mb=round(rss_state, 1))
