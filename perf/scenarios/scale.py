"""scale: per-process memory and start-up that do not grow with the data set (issue 49).

No emulator traffic: the data sets are on local disk (``file://``), made
once by the contenders into ``$AIOFLUX_PERF_SCALE_DIR`` (default
``/tmp/aioflux-perf-scale``), keyed by their parameters and kept between
rounds and runs (untimed). Making them is most of a first run at 1e8: on
this 2-core machine under load, aioflux's lines 62 s and their index 29 s,
MDS 842 s (``MDSWriter``, ~4.5 us a sample), LitData about 17 us of CPU a
sample (``optimize``, 2 workers: 263 s at 1e7, most of an hour at 1e8);
make them before taking the lock, e.g. by the contenders' ``_mds`` /
``_optimized`` / ``_lines_folder``, and remove the folder when done.
Each round is a fresh process per contender (``perf/contenders/scale_*.py``):

- ``aioflux-<N>``: ``ShardDataset.from_prefix`` over 100 lines shards of
  9-byte lines with their sidecars and manifest (``aioflux shards index``);
  a DataLoader of 2 spawn, persistent workers, batch 256: 50 batches,
  ``set_epoch(1)``, 50 more;
- ``streaming-<N>`` / ``litdata-<N>``: the same lines as MDS shards
  (``MDSWriter``) and as ``litdata.optimize`` chunks, read by each one's
  ``StreamingDataset`` through the same loader and steps;
- ``aioflux-order-1e9``: the epoch order at 1e9 samples (synthetic counts,
  ``perf/order_bench.py``);
- ``aioflux-objects-<M>``: ``MapDataset.from_prefix`` over M one-byte files.

Parameters: ``totals`` (comma-separated sample counts, default ``10000000``;
``10000000,100000000`` adds 1e8), ``peer_totals`` (the totals the peers
run at; default all of them), ``peers`` (``1``; ``0`` leaves the peers
out), ``objects`` (1,000,000 files), ``order_shards`` (100,000 shards of
``order_per_shard`` 10,000 samples). ``--quick``: 1e6 samples, 10,000 files.
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Limit, Options, Plan

__all__ = ["plan", "size_label"]

_MIB = "MiB"


def size_label(count: int) -> str:
    """``10000000`` -> ``1e7``; counts that are no power of ten keep their digits."""
    text = str(count)
    if count >= 10 and text[0] == "1" and set(text[1:]) == {"0"}:
        return f"1e{len(text) - 1}"
    return text


def _ready() -> str | None:
    return project_imports("import aioflux.torch; aioflux.torch.ShardDataset")


def _loader_limits(name: str) -> list[Limit]:
    return [
        Limit(name, "seconds", "<=", 5.0, "s", "construction"),
        Limit(name, "main_growth_mib", "<=", 256.0, _MIB, "main RSS growth"),
        Limit(name, "worker_mib", "<=", 256.0, _MIB, "spawn worker over imports"),
        Limit(name, "epoch_first_s", "<=", 2.0, "s", "set_epoch + first batch"),
        Limit(name, "state_bytes", "<=", 65536.0, "B", "state_dict pickled"),
    ]


def plan(options: Options) -> Plan:
    default = "1000000" if options.quick else "10000000"
    totals = [int(t) for t in options.params.get("totals", default).split(",")]
    with_peers = options.get("peers", 1) == 1
    peer_totals = [int(t) for t in options.params.get("peer_totals", ",".join(
        str(t) for t in totals)).split(",")]
    count = options.get("objects", 10_000 if options.quick else 1_000_000)
    order_shards = options.get("order_shards", 100_000)
    order_per_shard = options.get("order_per_shard", 10_000)
    contenders: list[Contender] = []
    limits: list[Limit] = []
    for total in totals:
        size = size_label(total)
        shape = ("--total", str(total), "--shards", "100", "--line", "9")
        name = f"aioflux-{size}"
        contenders.append(Contender(
            name, "scale_aioflux.py", None, ("--mode", "loader", *shape), available=_ready,
            note=f"{size} lines of 9 B in 100 file:// shards, sidecars and manifest written "
                 "by `aioflux shards index` before the first round; ShardDataset.from_prefix("
                 "format='lines', order=Order(batch_size=256), reads=ShardReads(index_dir="
                 "a fresh temp dir)) timed; "
                 "DataLoader(2 spawn persistent workers, batch 256)"))
        limits += _loader_limits(name)
        if with_peers and total in peer_totals:
            contenders.append(Contender(
                f"streaming-{size}", "scale_streaming.py", "streaming", shape,
                note=f"the same {size} lines as MDS shards (MDSWriter, one bytes column, "
                     "size_limit for ~100 shards); StreamingDataset(local=, batch_size=256, "
                     "shuffle=True) timed; its next epoch is the loader's next iterator"))
            contenders.append(Contender(
                f"litdata-{size}", "scale_litdata.py", "litdata", shape,
                note=f"the same {size} lines (as str) in litdata.optimize() chunks (one "
                     "input a shard, chunk_size = a shard's lines); StreamingDataset("
                     "input_dir, shuffle=True) timed; StreamingDataLoader; set_epoch(2)"))
    order_size = size_label(order_shards * order_per_shard)
    order_name = f"aioflux-order-{order_size}"
    contenders.append(Contender(
        order_name, "scale_aioflux.py", None,
        ("--mode", "order", "--shards", str(order_shards), "--per-shard", str(order_per_shard)),
        available=_ready,
        note=f"perf.order_bench.measure: {order_shards:,} shards x {order_per_shard:,} "
             "samples (synthetic counts, no data), one process; rank 7 of 8, batch 256"))
    limits += [Limit(order_name, "one_us", "<=", 20.0, "us", "one position's sample"),
               Limit(order_name, "rank_positions_per_s", ">=", 1e6, "positions/s",
                     "a rank's share iterated")]
    objects_name = f"aioflux-objects-{size_label(count)}"
    contenders.append(Contender(
        objects_name, "scale_aioflux.py", None, ("--mode", "objects", "--count", str(count)),
        available=_ready,
        note=f"MapDataset.from_prefix over {count:,} one-byte files (file://, 1,000 a "
             "folder) timed; per object: this process's held RSS growth plus 2 spawn "
             "workers' growth of private memory while each reads every record"))
    limits.append(Limit(objects_name, "node_over_target", "<=", 1.0, "x",
                        "node B/object over 1.5 x name + 24"))
    figures = [("seconds", "construction s"), ("first_batch_s", "first batch s"),
               ("main_growth_mib", "main growth MiB"),
               ("worker_mib", "worker over imports MiB"),
               ("epoch_first_s", "next epoch first batch s"),
               ("state_bytes", "state B"), ("generate_s", "data made once s"),
               ("one_us", "us a position"), ("rank_positions_per_s", "rank positions/s"),
               ("held_b_per_shard", "order B/shard"),
               ("node_b_per_object", "node B/object"), ("target_b_per_object", "target B/object")]
    return Plan(
        name="scale",
        description="per-process memory and start-up on file:// data sets of "
                    + ", ".join(size_label(t) for t in totals) + " samples (aioflux, "
                    "MosaicML Streaming, LitData), the epoch order at "
                    f"{order_size} samples, and a MapDataset of {count:,} objects",
        bucket="perf-scale",
        objects=[],
        contenders=contenders,
        baseline=f"aioflux-{size_label(totals[0])}",
        notes=["every figure comes from a fresh process a round; memory figures hold "
               "under load, time figures do not: each row carries the 1-minute load "
               "average its contender saw (2 shared cores)",
               "no ratios: the rows' wall times measure different things (construction; "
               "the order's whole measurement; the listing). Start-up to compare is "
               "construction plus the first batch (2 spawn workers importing torch); "
               "LitData's StreamingDataset does its work on the first iteration",
               "worker figures: each spawn worker's peak RSS (VmHWM, read from /proc by "
               "the main process) minus a fresh interpreter's after importing torch and "
               "the library; shared memory a worker maps (MDS's /dev/shm) counts in it",
               "data made once: seconds the data set took to make (and, for aioflux, "
               "index), once, by whichever round or process made it; kept in "
               "$AIOFLUX_PERF_SCALE_DIR keyed by its parameters and reused, never timed"],
        timeout_s=3600.0,
        warm_read=False,
        limits=limits,
        figures=figures,
        ratios=False,
    )
