"""scale contender (MosaicML Streaming): MDS shards of the same lines, read by its StreamingDataset.

The lines (``_scale.shard_lines``) are written once by ``MDSWriter``
(one ``bytes`` column, no compression, ``size_limit`` for about
``--shards`` shards) into ``$AIOFLUX_PERF_SCALE_DIR`` (untimed; reported
as ``generate_s``: what making them once took, kept in the folder's
``done.json``). In this fresh process:
``StreamingDataset(local=..., batch_size=256, shuffle=True)`` (timed:
``seconds``), a DataLoader of 2 spawn workers, persistent, batch 256; 50
batches, a new iterator (its next epoch) and its first batch
(``epoch_first_s``), 49 more. Memory as aioflux's contender measures it;
``state_bytes`` is the pickled ``state_dict(num_samples, False)``.
"""

from __future__ import annotations

import gc
import json
import math
import pickle
import shutil
import time
from pathlib import Path

from _contender import Stopwatch, load, report
from _scale import (
    data_arguments,
    data_root,
    drive,
    import_baseline_mib,
    made_before,
    shard_counts,
    shard_lines,
    status_mib,
)

BATCH = 256

# This machine has torch's CPU build and no CPU torchvision wheel: PyPI's
# torchvision (a requirement of mosaicml-streaming) links CUDA torch's
# libraries and fails to import. streaming/__init__ imports streaming.vision
# (its CIFAR/ImageNet datasets, its one user of torchvision) eagerly; an
# empty stand-in for that module lets MDSWriter and StreamingDataset import,
# unchanged. Run at the top of this script, so spawned workers (which
# re-import it as __mp_main__) have it too, and in the import baseline.
_NO_VISION = ("import sys, types; "
              "sys.modules.setdefault('streaming.vision', types.ModuleType('streaming.vision'))")
exec(_NO_VISION)


def _mds(total: int, shards: int, line: int) -> tuple[Path, dict[str, float]]:
    from streaming import MDSWriter

    folder = Path(data_root()) / f"mds-{total}-{shards}-{line}"
    marker = folder / "done.json"
    if marker.exists():
        return folder / "data", made_before(marker)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # An MDS sample of one bytes column: the sample's offset (4 B), its
    # column's size (4 B) and its bytes; a little slack keeps it at ~shards.
    limit = math.ceil(math.ceil(total / shards) * (line + 8) * 1.01) + 1024
    started = time.perf_counter()
    with MDSWriter(out=str(folder / "data"), columns={"line": "bytes"},
                   size_limit=limit) as writer:
        start = 0
        for count in shard_counts(total, shards):
            for block in shard_lines(start, count, line):
                for k in range(0, len(block), line):
                    writer.write({"line": block[k:k + line]})
            start += count
    made = {"generate_s": round(time.perf_counter() - started, 2)}
    marker.write_text(json.dumps(made))
    return folder / "data", made


def main() -> None:
    _, rest = load()
    parser = data_arguments()
    args = parser.parse_args(rest)

    import torch.utils.data
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    data, made = _mds(args.total, args.shards, args.line)
    clean_stale_shared_memory()  # a killed earlier round's /dev/shm entries
    baseline = import_baseline_mib(f"{_NO_VISION}\nimport torch, torch.utils.data, streaming")
    gc.collect()
    rss0 = status_mib("VmRSS") or 0.0
    with Stopwatch() as watch:
        ds = StreamingDataset(local=str(data), batch_size=BATCH, shuffle=True, shuffle_seed=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=2,
                                     multiprocessing_context="spawn", persistent_workers=True,
                                     collate_fn=list)
    seen = drive(dl, lambda: None)  # its epoch advances with each new iterator
    growth = (status_mib("VmHWM") or 0.0) - rss0
    state = len(pickle.dumps(ds.state_dict(seen["items"], False)))
    workers = seen["workers_peak_mib"]
    report(watch, nbytes=seen["items"] * args.line, samples=ds.num_samples,
           main_growth_mib=round(growth, 1),
           worker_mib=round(max(workers) - baseline, 1) if workers else None,
           import_baseline_mib=round(baseline, 1), state_bytes=state, shards_written=len(
               list(data.glob("shard.*.mds"))), **seen, **made)


if __name__ == "__main__":
    main()
