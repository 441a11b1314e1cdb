"""ckpt_load contender: gcs-torch-dataflux's ``DatafluxCheckpoint.reader``.

``reader(name)`` downloads the whole object with ``blob.download_to_file``
(one stream) into a ``BytesIO`` and returns it; ``torch.load`` then reads
from memory. Only ``reader()`` is timed: it is the whole transfer.
The client is the one ``DatafluxCheckpoint`` builds itself
(google-cloud-storage 2.x, emulator and anonymous credentials from
``STORAGE_EMULATOR_HOST``); nothing is bypassed.
"""

from __future__ import annotations

from _contender import Stopwatch, load, report
from ckpt_common import checkpoint_object
from dataflux_pytorch.dataflux_checkpoint import DatafluxCheckpoint

if __name__ == "__main__":
    manifest, _ = load()
    ckpt = DatafluxCheckpoint(project_name="perf", bucket_name=manifest.bucket)
    name, size = checkpoint_object(manifest)
    with Stopwatch() as watch:
        stream = ckpt.reader(name)
        total = stream.getbuffer().nbytes
    report(watch, nbytes=total, items=1)
