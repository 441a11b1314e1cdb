"""scale contender (LitData): ``optimize()`` chunks of the same lines, read by its StreamingDataset.

The lines (``_scale.shard_lines``, as ``str``: LitData serializes no bare
``bytes``) are written once by ``litdata.optimize`` (one input a shard,
``chunk_size`` a shard's lines, 2 workers) into
``$AIOFLUX_PERF_SCALE_DIR`` (untimed; ``generate_s``: what making them
once took, kept in the folder's ``done.json``). In this fresh process: ``StreamingDataset(input_dir,
shuffle=True)`` (timed: ``seconds``), a ``StreamingDataLoader`` of 2 spawn
workers, persistent, batch 256; 50 batches, ``set_epoch(2)``, a new
iterator's first batch (``epoch_first_s``), 49 more. Memory as aioflux's
contender measures it; ``state_bytes`` is the loader's pickled
``state_dict()``.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import shutil
import time
from collections.abc import Iterator
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


def _lines_of(task: tuple[int, int, int]) -> Iterator[str]:
    start, count, line = task
    for block in shard_lines(start, count, line):
        text = block.decode()
        for k in range(0, len(text), line):
            yield text[k:k + line]


def _optimized(total: int, shards: int, line: int) -> tuple[Path, dict[str, float]]:
    from litdata import optimize

    folder = Path(data_root()) / f"litdata-{total}-{shards}-{line}"
    marker = folder / "done.json"
    if marker.exists():
        return folder / "data", made_before(marker)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    counts = shard_counts(total, shards)
    starts = [sum(counts[:k]) for k in range(shards)]
    started = time.perf_counter()
    optimize(fn=_lines_of, inputs=[(s, c, line) for s, c in zip(starts, counts, strict=True)],
             output_dir=str(folder / "data"), chunk_size=max(counts), num_workers=2)
    made = {"generate_s": round(time.perf_counter() - started, 2)}
    marker.write_text(json.dumps(made))
    return folder / "data", made


def main() -> None:
    _, rest = load()
    parser = data_arguments()
    args = parser.parse_args(rest)

    from litdata import StreamingDataLoader, StreamingDataset

    data, made = _optimized(args.total, args.shards, args.line)
    cache = Path(data_root()) / f"litdata-cache-{os.getpid()}"
    os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = str(cache)
    baseline = import_baseline_mib("import torch, torch.utils.data, litdata")
    gc.collect()
    rss0 = status_mib("VmRSS") or 0.0
    try:
        with Stopwatch() as watch:
            ds = StreamingDataset(input_dir=str(data), shuffle=True, seed=1)
        dl = StreamingDataLoader(ds, batch_size=BATCH, num_workers=2,
                                 multiprocessing_context="spawn", persistent_workers=True,
                                 collate_fn=list)
        seen = drive(dl, lambda: ds.set_epoch(2))
        growth = (status_mib("VmHWM") or 0.0) - rss0
        state = len(pickle.dumps(dl.state_dict()))
        samples = len(ds)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    workers = seen["workers_peak_mib"]
    report(watch, nbytes=seen["items"] * args.line, samples=samples,
           main_growth_mib=round(growth, 1),
           worker_mib=round(max(workers) - baseline, 1) if workers else None,
           import_baseline_mib=round(baseline, 1), state_bytes=state, **seen, **made)


if __name__ == "__main__":
    main()
