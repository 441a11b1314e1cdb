"""gpu_node: issue 61's rows on a CUDA machine, with their physical references.

Run it where there is a GPU (``perf/gpu_node.sh`` installs what the
machine lacks from wheels and runs it; see there). Every row is a fresh
process (``contenders/gpu_node.py``), each state built untimed on
``cuda:0``: ``gib`` GiB of bf16 in ``count`` tensors, files on
``/dev/shm``.

- references: host copies of the state, pinned and pageable (reused
  buffers), a fresh ``.to("cpu")``, and copies back to the device;
- ``save_async``'s blocking time, first save and the pool's (target: the
  pool's <= 1.5x ``ref-d2h-pinned``, the first <= ``ref-d2h-fresh``);
- save / load (``map_location="cuda"``) and DCP save / load / async save,
  aioflux against torch's own (and aioflux's DCP save from one thread,
  ``aioflux-dcp-save-t1``, beside its default's); the load from the
  emulator's bucket (``bucket_gib`` GiB, 1; the run's network profile),
  staged against torch's own copies to the device (``-unstaged``);
- DataLoader rows, 16 KiB samples in tar shards: ``ShardDataset``, a plain
  ``tarfile`` loop (shards split by worker) and the same DataLoader with
  no I/O at all, at ``workers`` (0, 4, 8, 16), batches of 64 pinned and
  moved to the GPU (``ShardDataset`` in the same batches of 64; beside it
  at 8 workers ``loader-aioflux-b1-w8``, its order without batches, and
  ``loader-aioflux-p8-w8``, a prefetch_factor of 8; ``loader-noio-busy-w8``,
  no I/O but 25 us of Python a sample, ``loader-noio-busyfree-w8``, as
  long a SHA-256 a sample (no GIL held), and ``loader-aioflux-si-w8``, the
  workers' GIL switch interval 0.2 ms: whether the gap is the GIL's
  hand-off in a busy worker); each row reports where
  the main process waited (its first batch, its waits for the loader,
  their p50 and p99, its own thread's CPU) and how long the workers'
  dataset took to give a batch's samples (p50, p99, most);
  and the three again at ``kept_workers`` (8) with the
  main process's glibc heap kept (``loader-*-kept-w<N>``: scenario
  ``workers`` says why).

Without CUDA the CUDA rows are unavailable (the harness skips them) and
the DataLoader rows run on the CPU, batches staying there: the scenario
then checks the runner, not the GPU targets. Parameters: ``gib`` (4; 0.25
with --quick), ``count`` (64), ``workers`` (``0,4,8,16``; ``0,2`` with
--quick), ``kept_workers`` (``8``; ``2`` with --quick; empty for none),
``samples`` per shard (512 of 64 shards; 64 with --quick), ``part``
(``all``; ``cuda``: the references, save_async, save/load and DCP rows;
``loader``: the DataLoader rows; ``perf/gpu_node.sh run`` runs the two
parts one after the other, each recorded when it ends), ``where``
(``shm``; ``disk``, or ``shm,disk``: save, load and DCP save and load
also on a disk folder, ``$AIOFLUX_PERF_DISK_DIR`` or ``/var/tmp``, as
``<impl>-<row>-disk``: torch's save then fsyncs the file and its folder,
as aioflux's local store does before it publishes, and each load reads a
file written back and dropped from the page cache).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target

__all__ = ["plan"]

_REFS = ("d2h-pinned", "d2h-pageable", "d2h-fresh", "h2d-pinned", "h2d-pageable")
_PAIRS = ("save", "load", "dcp-save", "dcp-load", "dcp-async")
_DISK_PAIRS = ("save", "load", "dcp-save", "dcp-load")


@functools.cache
def _cuda() -> str | None:
    probe = subprocess.run([sys.executable, "-c",
                            "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
                           capture_output=True, text=True, check=False)
    if probe.returncode == 0:
        return None
    return "no CUDA device here (a GPU-node row)" if probe.returncode == 3 else \
        f"torch did not import: {probe.stderr.strip()[-200:]}"


def _ready() -> str | None:
    return _cuda() or project_imports("import aioflux.torch.dcp")


def plan(options: Options) -> Plan:
    gib = float(options.params.get("gib", 0.25 if options.quick else 4))
    count = options.get("count", 64)
    workers = [int(n) for n in options.params.get(
        "workers", "0,2" if options.quick else "0,4,8,16").split(",")]
    samples = options.get("samples", 64 if options.quick else 512)
    kept = [int(n) for n in options.params.get(
        "kept_workers", "2" if options.quick else "8").split(",") if n]
    part = options.params.get("part", "all")
    places = options.params.get("where", "shm").split(",")
    if not set(places) <= {"shm", "disk"} or not places:
        raise ValueError(f"gpu_node: where is shm, disk or both, not {places!r}")
    if part not in ("all", "cuda", "loader"):
        raise ValueError(f"gpu_node: part must be all, cuda or loader, not {part!r}")
    if part == "cuda":
        workers, kept = [], []
    state = ("--gib", str(gib), "--count", str(count))
    contenders: list[Contender] = []

    def add(name: str, *args: str, cuda: bool = True, note: str = "") -> None:
        contenders.append(Contender(name, "gpu_node.py", None, (*args, "--name", name),
                                    available=_ready if cuda else None, note=note))

    cuda_rows = part != "loader"
    shm = "shm" in places
    for row in _REFS if cuda_rows and shm else ():
        add(f"ref-{row}", "--row", row, *state, note=f"physical reference: {row}")
    for row in ("async-first", "async-pool") if cuda_rows and shm else ():
        add(f"aioflux-{row}", "--row", row, *state,
            note="CheckpointManager.save_async: seconds = blocking time, done_s = whole "
                 "save (the first's includes pinning the pool's buffers for the next)")
    for row in _PAIRS if cuda_rows and shm else ():
        for impl in ("torch", "aioflux"):
            add(f"{impl}-{row}", "--row", row, "--impl", impl, *state)
    disk = os.environ.get("AIOFLUX_PERF_DISK_DIR", "/var/tmp")
    for row in _DISK_PAIRS if cuda_rows and "disk" in places else ():
        for impl in ("torch", "aioflux"):
            add(f"{impl}-{row}-disk", "--row", row, "--impl", impl, *state, "--where", disk,
                "--disk", note=f"on the disk ({disk}): torch's save fsyncs the file and its "
                "folder, loads read files dropped from the page cache")
    bucket_state = ("--gib", str(options.params.get("bucket_gib", 0.25 if options.quick else 1)),
                    "--count", str(count))
    for staged in ("", "-unstaged") if cuda_rows and shm else ():
        add(f"aioflux-load-bucket{staged}", "--row", "load-bucket", *bucket_state,
            *(("--unstaged",) if staged else ()),
            note="Checkpoint.load(map_location='cuda') from the emulator's bucket"
                 + ("; torch copying each storage to the device as read (before the "
                    "pinned staging)" if staged else ", through the pinned staging"))
    if cuda_rows and shm:
        add("aioflux-dcp-save-t1", "--row", "dcp-save", "--impl", "aioflux", "--threads", "1",
            *state, note="DcpWriter(thread_count=1), torch's default: one file, one thread")
    for n in workers:
        for impl in ("aioflux", "plain", "noio"):
            add(f"loader-{impl}-w{n}", "--row", "loader", "--impl", impl, "--workers", str(n),
                "--samples", str(samples), cuda=False,
                note=f"DataLoader, {n} workers, 64 x {samples} samples of 16 KiB")
    if 8 in workers:
        # Beside loader-aioflux-w8 in the same run: whether its gap to the
        # plain loop follows the dataset's order in batches (one round a loan).
        add("loader-aioflux-b1-w8", "--row", "loader", "--impl", "aioflux", "--workers", "8",
            "--samples", str(samples), "--order", "1", cuda=False,
            note="the same, 8 workers, ShardDataset(batch_size=1): each worker takes "
                 "every 8th sample, not whole batches")
        # Whether the gap to the no-I/O ceiling is the workers' latency (a
        # deeper queue hides it) or the main process's cost a batch (it does not).
        add("loader-aioflux-p8-w8", "--row", "loader", "--impl", "aioflux", "--workers", "8",
            "--samples", str(samples), "--prefetch", "8", cuda=False,
            note="the same, 8 workers, prefetch_factor=8 (torch's default 2)")
        # Whether the gap to the no-I/O ceiling is any busy worker's: a
        # worker that holds its GIL as long as ShardDataset's does (about
        # 25 us a sample on the node's probe) keeps its queue's feeder and
        # the sharer of its batches' handles waiting for the GIL, while the
        # main process waits for that batch. If the first row is as slow as
        # aioflux's, the second (as much work, the GIL let go) is not, and
        # the third closes the gap, it is the GIL's hand-off.
        add("loader-noio-busy-w8", "--row", "loader", "--impl", "noio", "--workers", "8",
            "--samples", str(samples), "--busy-us", "25", cuda=False,
            note="no I/O, 8 workers, each sample after 25 us of Python work holding the GIL")
        add("loader-noio-busyfree-w8", "--row", "loader", "--impl", "noio", "--workers", "8",
            "--samples", str(samples), "--busy-us", "25", "--gil-free", cuda=False,
            note="no I/O, 8 workers, each sample after 25 us of work without the GIL "
                 "(a SHA-256)")
        add("loader-aioflux-si-w8", "--row", "loader", "--impl", "aioflux", "--workers", "8",
            "--samples", str(samples), "--switch-ms", "0.2", cuda=False,
            note="loader-aioflux-w8 with sys.setswitchinterval(0.0002) in the workers "
                 "(the interpreter's 0.005)")
    for n in kept:
        for impl in ("aioflux", "plain", "noio"):
            add(f"loader-{impl}-kept-w{n}", "--row", "loader", "--impl", impl, "--workers",
                str(n), "--samples", str(samples), "--heap", "kept", cuda=False,
                note=f"the same, {n} workers, the main process's heap kept (see workers)")
    targets = [Target(f"torch-{row}", 1.0, f"aioflux-{row}") for row in _PAIRS
               if cuda_rows and shm]
    # Loads from a bucket faster than before their staging (issue 61, item 2).
    targets += [Target("aioflux-load-bucket-unstaged", 1.0, "aioflux-load-bucket")] \
        if cuda_rows and shm else []
    targets += [Target(f"torch-{row}-disk", 1.0, f"aioflux-{row}-disk") for row in _DISK_PAIRS
                if cuda_rows and "disk" in places]
    targets += [Target(f"loader-plain-w{n}", 1.0, f"loader-aioflux-w{n}") for n in workers]
    targets += [Target(f"loader-noio-w{n}", 0.9, f"loader-aioflux-w{n}")
                for n in workers if n >= 8]
    targets += [Target(f"loader-{impl}-kept-w{n}", bar, f"loader-aioflux-kept-w{n}")
                for n in kept for impl, bar in (("plain", 1.0), ("noio", 0.9))]
    # Same bytes: throughput ratios are inverse time ratios (1 / 1.5).
    targets += [Target("ref-d2h-pinned", 1 / 1.5, "aioflux-async-pool"),
                Target("ref-d2h-fresh", 1.0, "aioflux-async-first")] if cuda_rows and shm else []
    return Plan(
        name="gpu_node",
        description=(f"A GPU node: {gib:g} GiB bf16 state on cuda:0, files on /dev/shm; "
                     "save_async blocking, save/load and DCP against torch's own, "
                     "DataLoader rows, with the physical references"),
        bucket="perf-gpu-node",
        objects=[],
        contenders=contenders,
        baseline="ref-d2h-pinned" if cuda_rows and shm else contenders[0].name,
        targets=targets,
        figures=[("gib_per_s", "GiB/s"), ("done_s", "done (s)"),
                 ("samples_per_s", "samples/s"), ("pinned_bytes", "pinned bytes"),
                 # The DataLoader rows' hand-off: where the main process waits.
                 ("first_batch_s", "first batch (s)"), ("waited_s", "waited (s)"),
                 ("wait_p50_ms", "wait p50 (ms)"), ("wait_p99_ms", "wait p99 (ms)"),
                 ("main_cpu_s", "main thread CPU (s)"),
                 # ...and the workers' side: their dataset's time to give a batch.
                 ("worker_batch_p50_ms", "worker batch p50 (ms)"),
                 ("worker_batch_p99_ms", "worker batch p99 (ms)"),
                 ("worker_batch_max_ms", "worker batch max (ms)")],
        notes=[
            "needs CUDA: without it the CUDA rows are skipped and the DataLoader rows run "
            "on the CPU (a check of the runner, not of the GPU targets), and the run is "
            "printed, not recorded",
            "save_async targets (issue 61): the pool's blocking <= 1.5x ref-d2h-pinned; the "
            "first save's <= ref-d2h-fresh",
        ],
        timeout_s=240.0,
        warm_read=False,
        # Its rows time different work (a copy, a save, an epoch): only the
        # targets' pairs are ratios.
        ratios=False,
        min_rounds=1,
        unrecorded=_cuda,
    )
