"""ckpt_save contender: ``torch.save`` into s3torchconnector's ``S3Checkpoint.writer``.

The writer is its CRT client's streaming multipart upload (parts leave
while ``torch.save`` writes; part size and concurrency at its defaults).
"""

from __future__ import annotations

import argparse

import torch
from _contender import Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state
from s3tc_common import REGION, client_config
from s3torchconnector import S3Checkpoint

if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    args = parser.parse_args(rest)
    checkpoint = S3Checkpoint(region=REGION, endpoint=manifest.s3,
                              s3client_config=client_config())
    url = f"s3://{manifest.bucket}/s3_ckpt_save/s3tc.pt"
    state = build_state(args)
    rss_state = rss_mb()
    with Stopwatch() as watch:
        with checkpoint.writer(url) as f:
            torch.save(state, f)
    with checkpoint.reader(url) as f:
        stored = f.seek(0, 2)
    report(watch, nbytes=stored, items=1, stored_bytes=stored, rss_state_mb=round(rss_state, 1))
