"""ckpt_load contender: the bytes ``torch.load(S3Checkpoint.reader(url))`` reads.

Opens the object with ``S3Checkpoint.reader`` (its default sequential
reader: the CRT client's ranged GETs in flight ahead of the position) and
reads front to back in 8 MiB ``readinto`` calls, like the aioflux
contender, without the deserialisation (the same local cost for everyone).
"""

from __future__ import annotations

from _contender import Stopwatch, load, report
from ckpt_common import checkpoint_object
from s3tc_common import REGION, client_config
from s3torchconnector import S3Checkpoint

if __name__ == "__main__":
    manifest, rest = load()
    # The object is composed through the GCS JSON API, the same store.
    name, size = checkpoint_object(manifest)
    checkpoint = S3Checkpoint(region=REGION, endpoint=manifest.s3,
                              s3client_config=client_config())
    buf = bytearray(8 * 2**20)
    view = memoryview(buf)
    total = 0
    with Stopwatch() as watch:
        with checkpoint.reader(f"s3://{manifest.bucket}/{name}") as f:
            while n := f.readinto(view):
                total += n
    report(watch, nbytes=total, items=1)
