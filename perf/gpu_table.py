"""The docs' GPU-node table: ``gpu_node``'s rows in seconds and samples/s,
each from the newest run that measured it, aioflux beside torch's own and
the physical references, and the 2-core machine's ``ckpt_file`` rows beside
them (GiB/s)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from perf.results import Run

__all__ = ["GPU_MARKERS", "render_gpu_tables"]

GPU_MARKERS = ("<!-- perf:gpu:start (python -m perf report) -->", "<!-- perf:gpu:end -->")

# (what, aioflux's row, torch's row, the references' rows)
_CUDA_ROWS = (
    ("`save_async` blocking, first save", "aioflux-async-first", "",
     ("ref-d2h-fresh",)),
    ("`save_async` blocking, with the pool", "aioflux-async-pool", "",
     ("ref-d2h-pinned", "ref-d2h-pageable")),
    ("save", "aioflux-save", "torch-save", ()),
    ('`load(map_location="cuda")`', "aioflux-load", "torch-load",
     ("ref-h2d-pinned", "ref-h2d-pageable")),
    ("DCP save", "aioflux-dcp-save", "torch-dcp-save", ()),
    ("DCP load into CUDA tensors", "aioflux-dcp-load", "torch-dcp-load", ()),
    ("DCP `async_save` blocking, second save", "aioflux-dcp-async", "torch-dcp-async", ()),
    # On a disk (``where=disk``): shown once a run measured them.
    ("save, disk (torch's: + fsync)", "aioflux-save-disk", "torch-save-disk", ()),
    ('`load(map_location="cuda")`, disk, cold', "aioflux-load-disk", "torch-load-disk", ()),
    ("DCP save, disk", "aioflux-dcp-save-disk", "torch-dcp-save-disk", ()),
    ("DCP load, disk, cold", "aioflux-dcp-load-disk", "torch-dcp-load-disk", ()),
    # From the emulator's bucket (1 GiB): "torch's own" is torch's copy of
    # each storage to the device as it is read, the load before its staging.
    ('`load(map_location="cuda")` from a bucket, 1 GiB (torch\'s: its own copies '
     'to the device)', "aioflux-load-bucket", "aioflux-load-bucket-unstaged", ()),
)
_REFERENCE = {
    "ref-d2h-fresh": 'fresh `.to("cpu")`',
    "ref-d2h-pinned": "D2H into pinned",
    "ref-d2h-pageable": "into pageable, reused",
    "ref-h2d-pinned": "H2D from pinned",
    "ref-h2d-pageable": "from pageable",
}
# The 2-core machine's file:// checkpoint pairs (ckpt_file): what, aioflux, torch.
_TWO_CORE_ROWS = (
    ("save, /dev/shm", "aioflux-save-shm", "torch-save-shm"),
    ("load, /dev/shm", "aioflux-load-shm", "torch-load-shm"),
    ("DCP save, /dev/shm", "aioflux-dcp-save-shm", "torch-dcp-save-shm"),
    ("DCP load, /dev/shm", "aioflux-dcp-load-shm", "torch-dcp-load-shm"),
    ("save, disk (torch: + fsync)", "aioflux-save-disk", "torch-save-disk"),
    ("load, disk", "aioflux-load-disk", "torch-load-disk"),
)


def _newest(runs: Sequence[Run], scenario: str, contender: str) -> Run | None:
    for run in reversed(runs):
        if run.info["scenario"] == scenario and not run.info.get("quick") and run.ok(contender):
            return run
    return None


def _median(run: Run | None, contender: str, key: str) -> float | None:
    if run is None or not contender:
        return None
    values = [float(s["wall_s"]) if key == "seconds" else float(s["extra"][key])
              for s in run.ok(contender)
              if key == "seconds" or isinstance(s.get("extra", {}).get(key), (int, float))]
    return statistics.median(values) if values else None


def _seconds(run: Run | None, contender: str) -> str:
    wall = _median(run, contender, "seconds")
    if wall is None:
        return "-"
    done = _median(run, contender, "done_s")
    return f"{wall:.2f} s" + ("" if done is None else f" (done {done:.2f} s)")


def _gib_s(run: Run | None, contender: str) -> str:
    if run is None:
        return "-"
    rates = [float(s["bytes"]) / float(s["wall_s"]) / 2**30 for s in run.ok(contender)
             if s.get("bytes") and s.get("wall_s")]
    return f"{statistics.median(rates):.2f} GiB/s" if rates else "-"


def _machine(run: Run) -> str:
    m = run.info["machine"]
    return f"{m['nproc']} cores, {m['python']}, run {run.info['run']} @{run.info['git'][:7]}"


def _at(run: Run | None) -> str:
    return "-" if run is None else f"{run.info['run'][:15]} @{run.info['git'][:7]}"


def render_gpu_tables(runs: Sequence[Run]) -> str:
    """The GPU node's rows (one round each: a device loan), each from the
    newest run that measured aioflux's side (the other sides from that
    run too), and the 2-core rows beside them."""
    cuda = [(what, _newest(runs, "gpu_node", ours), ours, theirs, refs)
            for what, ours, theirs, refs in _CUDA_ROWS]
    out = ["#### A GPU node (one H200, 16 cores)", ""]
    if all(run is None for _, run, *_ in cuda):
        out.append("No GPU run has been recorded yet.")
    else:
        out += ["A 4 GiB bf16 state on `cuda:0`, files on `/dev/shm`; one round a run "
                "(seconds; the run's start, UTC, and commit beside each row).", "",
                "| what | aioflux | torch's own | physical reference | run |",
                "|---|---:|---:|---|---|"]
        for what, run, ours, theirs, refs in cuda:
            if run is None and ours.endswith(("-disk", "-bucket")):
                continue  # rows of later loans: shown once a run measured them
            ref = "; ".join(f"{_REFERENCE[r]} {_seconds(run, r)}" for r in refs)
            out.append(f"| {what} | {_seconds(run, ours)} | {_seconds(run, theirs)} "
                       f"| {ref} | {_at(run)} |")
    counts = sorted({int(name.rsplit("-w", 1)[1]) for run in runs
                     if run.info["scenario"] == "gpu_node" for name in run.order
                     if name.startswith("loader-aioflux-w")})
    if counts:
        out += ["", "DataLoader, 16 KiB samples in tar shards, batches of 64 pinned and "
                "moved to the GPU, samples/s:", "",
                "| workers | `ShardDataset` | a plain `tarfile` loop "
                "| the same DataLoader, no I/O | run |", "|---:|---:|---:|---:|---|"]
        for n in counts:
            run = _newest(runs, "gpu_node", f"loader-aioflux-w{n}")
            cells = [_median(run, f"loader-{impl}-w{n}", "samples_per_s")
                     for impl in ("aioflux", "plain", "noio")]
            rates = " | ".join("-" if c is None else f"{c / 1e3:.1f}k" for c in cells)
            out.append(f"| {n} | {rates} | {_at(run)} |")
    two = _newest(runs, "ckpt_file", "aioflux-save-shm")
    if two is not None:
        out += ["", f"#### The 2-core machine, `file://` checkpoints ({_machine(two)})", "",
                "| what | aioflux | torch's own |", "|---|---:|---:|"]
        out += [f"| {what} | {_gib_s(two, ours)} | {_gib_s(two, theirs)} |"
                for what, ours, theirs in _TWO_CORE_ROWS]
    return "\n".join(out)
