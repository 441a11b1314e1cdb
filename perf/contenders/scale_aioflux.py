"""scale contenders (aioflux): per-process memory and start-up at 1e7-1e9 samples.

``--mode loader``: ``total`` lines shards of ``--line`` bytes on ``file://``
(generated once into ``$AIOFLUX_PERF_SCALE_DIR``, then ``aioflux shards
index`` writes their sidecars and the folder's manifest, both untimed and
reported as ``generate_s`` / ``index_s`` by every round: what making them
once took, kept in the folder's ``done.json``). In
this fresh process: ``ShardDataset.from_prefix`` (timed: ``seconds``,
with a fresh ``index_dir``, so counts come from the manifest), a
DataLoader of 2 spawn workers, persistent, batch 256; 50 batches,
``set_epoch(1)``, a new iterator's first batch (``epoch_first_s``) and 49
more. Reported: this process's peak RSS growth over its RSS before
construction (``main_growth_mib``), each worker's peak RSS over a fresh
interpreter that imported torch and aioflux.torch (``worker_mib``), the
pickled ``state_dict()`` (``state_bytes``).

``--mode order``: ``perf.order_bench.measure`` at 1e9 samples (synthetic
counts, no data): ``one_us``, ``rank_positions_per_s``.

``--mode objects``: ``ObjectMapDataset.from_prefix`` over ``--count`` one-byte
files on ``file://`` (made once); this process's held RSS growth after
listing, plus each of 2 spawn DataLoader workers' growth of private memory
(copy-on-read) while it reads every object's record: ``node_b_per_object``
against ``1.5 x name bytes + 24``.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _contender import Stopwatch, load, report
from _scale import (
    data_arguments,
    data_root,
    drive,
    import_baseline_mib,
    line_bytes,
    made_before,
    shard_counts,
    shard_lines,
    status_mib,
)

BATCH = 256
BATCHES = 50


def _lines_folder(total: int, shards: int, line: int) -> tuple[Path, dict[str, float]]:
    folder = Path(data_root()) / f"lines-{total}-{shards}-{line}"
    marker = folder / "done.json"
    if marker.exists():
        return folder / "data", made_before(marker)
    shutil.rmtree(folder, ignore_errors=True)
    data = folder / "data"
    data.mkdir(parents=True)
    started = time.perf_counter()
    start = 0
    for k, count in enumerate(shard_counts(total, shards)):
        with open(data / f"part-{k:05d}.txt", "wb") as fh:
            for block in shard_lines(start, count, line):
                fh.write(block)
        start += count
    generated = time.perf_counter() - started
    started = time.perf_counter()
    aioflux = str(Path(sys.executable).parent / "aioflux")
    subprocess.run([aioflux, "shards", "index", "--format", "lines", f"file://{data}/"],
                   check=True, stdout=subprocess.DEVNULL)
    made = {"generate_s": round(generated, 2), "index_s": round(time.perf_counter() - started, 2)}
    marker.write_text(json.dumps(made))
    return data, made


def loader(total: int, shards: int, line: int) -> None:
    import torch.utils.data

    from aioflux.torch import Order, ShardDataset, ShardReads

    data, made = _lines_folder(total, shards, line)
    baseline = import_baseline_mib("import torch, torch.utils.data, aioflux.torch")
    index_dir = tempfile.mkdtemp(prefix="aioflux-scale-index-")
    try:
        gc.collect()
        rss0 = status_mib("VmRSS") or 0.0
        with Stopwatch() as watch:
            ds = ShardDataset.from_prefix(f"file://{data}/", format="lines",
                                          order=Order(batch_size=BATCH),
                                          reads=ShardReads(index_dir=index_dir))
        dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=2,
                                         multiprocessing_context="spawn",
                                         persistent_workers=True, collate_fn=list)
        seen = drive(dl, lambda: ds.set_epoch(1), BATCHES)
        growth = (status_mib("VmHWM") or 0.0) - rss0
        state = len(pickle.dumps(ds.state_dict()))
        total_seen = ds.total_samples
        del dl
    finally:
        shutil.rmtree(index_dir, ignore_errors=True)
    workers = seen["workers_peak_mib"]
    report(watch, nbytes=seen["items"] * line, samples=total_seen,
           main_growth_mib=round(growth, 1),
           worker_mib=round(max(workers) - baseline, 1) if workers else None,
           import_baseline_mib=round(baseline, 1), state_bytes=state, **seen, **made)


def order(shards: int, per_shard: int) -> None:
    from perf.order_bench import measure

    with Stopwatch() as watch:
        figures = measure(shards=shards, per_shard=per_shard)
    report(watch, nbytes=0, items=int(figures["samples"]),
           load1=round(os.getloadavg()[0], 2), **figures)


def _objects_folder(count: int) -> tuple[Path, int, dict[str, float]]:
    folder = Path(data_root()) / f"objects-{count}"
    marker = folder / "done.json"
    data = folder / "data"
    if not marker.exists():
        shutil.rmtree(folder, ignore_errors=True)
        started = time.perf_counter()
        per = 1000
        for d in range((count + per - 1) // per):
            sub = data / f"d{d:04d}"
            sub.mkdir(parents=True)
            for i in range(d * per, min(count, (d + 1) * per)):
                (sub / f"f{i:07d}.bin").write_bytes(b"x")
        marker.write_text(json.dumps({"generate_s": round(time.perf_counter() - started, 2)}))
    made = made_before(marker)
    # Names as the listing holds them: relative to the listed folder.
    name_bytes = sum(len(f"d{i // 1000:04d}/f{i:07d}.bin") for i in range(count))
    return data, name_bytes, made


def _private_mib() -> float:
    total = 0
    with open("/proc/self/smaps_rollup") as fh:
        for row in fh:
            if row.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(row.split()[1])
    return total / 1024


def _touch_every_record(_: int) -> None:
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    assert info is not None
    objects = info.dataset.objects  # type: ignore[attr-defined]
    before = _private_mib()
    total = 0
    for i in range(len(objects)):
        total += len(objects[i].name)
    grown = _private_mib() - before
    with open(os.environ["AIOFLUX_SCALE_OUT"] + f".{info.id}", "w") as fh:
        fh.write(json.dumps({"private_growth_mib": grown, "name_chars": total}))


def objects(count: int) -> None:
    import torch.utils.data

    from aioflux.torch import ObjectMapDataset

    data, name_bytes, made = _objects_folder(count)
    out = tempfile.mkdtemp(prefix="aioflux-scale-objects-")
    os.environ["AIOFLUX_SCALE_OUT"] = f"{out}/worker"
    try:
        gc.collect()
        rss0 = status_mib("VmRSS") or 0.0
        with Stopwatch() as watch:
            ds: Any = ObjectMapDataset.from_prefix(f"file://{data}/")
        peak = (status_mib("VmHWM") or 0.0) - rss0
        gc.collect()
        held = (status_mib("VmRSS") or 0.0) - rss0
        n = len(ds)
        dl = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2,
                                         multiprocessing_context="spawn",
                                         worker_init_fn=_touch_every_record, collate_fn=list)
        next(iter(dl))
        del dl
        workers = [json.loads(Path(f"{out}/worker.{k}").read_text()) for k in range(2)]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    worker_growth = sum(w["private_growth_mib"] for w in workers)
    node = (held + worker_growth) * 2**20 / n
    report(watch, nbytes=0, items=n, objects=n, name_b_per_object=round(name_bytes / n, 2),
           target_b_per_object=round(1.5 * name_bytes / n + 24, 2),
           main_held_b_per_object=round(held * 2**20 / n, 1),
           main_peak_b_per_object=round(peak * 2**20 / n, 1),
           workers_private_b_per_object=round(worker_growth * 2**20 / n, 1),
           node_b_per_object=round(node, 1),
           node_over_target=round(node / (1.5 * name_bytes / n + 24), 3),
           load1=round(os.getloadavg()[0], 2), **made)


def main() -> None:
    _, rest = load()
    parser = data_arguments()
    parser.add_argument("--mode", choices=("loader", "order", "objects"), required=True)
    parser.add_argument("--per-shard", type=int, default=10_000)
    parser.add_argument("--count", type=int, default=1_000_000)
    args = parser.parse_args(rest)
    assert len(line_bytes(0, args.line)) == args.line
    if args.mode == "loader":
        loader(args.total, args.shards, args.line)
    elif args.mode == "order":
        order(args.shards, args.per_shard)
    else:
        objects(args.count)


if __name__ == "__main__":
    main()
