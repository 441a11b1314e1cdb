"""gpu_node contender: one row of the GPU-node table (issue 61), in a process of its own.

``--row`` picks the work; every row builds its inputs untimed and times
only the work:

- references: ``d2h-pinned`` / ``d2h-pageable`` (a CUDA state into host
  buffers allocated before the timer, ``non_blocking`` into pinned ones,
  one synchronisation), ``d2h-fresh`` (``.to("cpu")``), ``h2d-pinned`` /
  ``h2d-pageable``;
- ``async-first`` / ``async-pool``: ``CheckpointManager.save_async``'s
  blocking time (until it returns), the first save of the process and the
  next one (the pool's pinned buffers); ``done_s`` is the whole save;
- ``save`` / ``load`` with ``--impl torch`` (``torch.save`` into an open
  file; ``torch.load(map_location="cuda")``) or ``aioflux``
  (``Checkpoint().save`` / ``.load(map_location="cuda")``);
- ``dcp-save`` / ``dcp-load``: ``FileSystemWriter`` / ``FileSystemReader``
  or ``DcpWriter`` / ``DcpReader``, the load into the state's CUDA tensors;
- ``dcp-async``: ``dcp.async_save`` twice with one writer (torch's with
  ``cache_staged_state_dict=True``, aioflux's with its default), the
  second save's blocking time;
- ``load-bucket``: ``Checkpoint.load(map_location="cuda")`` of the state
  saved (untimed) in the emulator's bucket; ``--unstaged``: with a
  ``map_location`` callable, torch copying each storage to the device as
  it is read (the load before its pinned staging);
- ``loader``: a DataLoader (``--workers``, batches of 64 pinned and moved
  to the GPU when there is one) over ``--impl aioflux`` (``ShardDataset``
  of tar shards, its order in the same batches of 64), ``plain`` (a
  ``tarfile`` loop, shards split by worker) or ``noio`` (the same samples
  made from memory: no I/O at all); where the main process waited, and
  each worker's time to get a batch's samples from the dataset.

The state: ``--gib`` GiB of bf16 in ``--count`` tensors on ``cuda:0``,
files under ``--where`` (``/dev/shm``). Rows that need CUDA exit with a
message where there is none (the scenario marks them unavailable first).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any

from _contender import Stopwatch, load, report
from ckpt_common import drop_cache, fsync_path

_ROWS = ("d2h-pinned", "d2h-pageable", "d2h-fresh", "h2d-pinned", "h2d-pageable",
         "async-first", "async-pool", "save", "load", "dcp-save", "dcp-load", "dcp-async",
         "load-bucket", "loader")


def _state(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    numel = int(args.gib * 2**30) // 2 // args.count
    gen = torch.Generator(device="cuda").manual_seed(0)
    return {f"layer{i}.weight": torch.randn(numel, device="cuda", generator=gen,
                                            dtype=torch.bfloat16) for i in range(args.count)}


def _nbytes(state: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k].cuda(), b[k]) for k in a)


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def _reference(row: str, state: dict[str, Any]) -> tuple[Stopwatch, int]:
    import torch

    pinned = row.endswith("pinned")
    if row.startswith("d2h"):
        host = None if row == "d2h-fresh" else {
            k: torch.empty(v.shape, dtype=v.dtype, pin_memory=pinned) for k, v in state.items()}
        if host is not None:  # touched once: a reused buffer's pages are mapped
            for k, v in state.items():
                host[k].copy_(v)
        _sync()
        with Stopwatch() as watch:
            if host is None:
                copies = {k: v.to("cpu") for k, v in state.items()}
            else:
                for k, v in state.items():
                    host[k].copy_(v, non_blocking=pinned)
                copies = host
            _sync()
        ok = all(torch.equal(copies[k], v.cpu()) for k, v in list(state.items())[:2])
        return watch, int(ok)
    host = {k: v.cpu() for k, v in state.items()}
    if pinned:
        host = {k: v.pin_memory() for k, v in host.items()}
    device = {k: torch.empty_like(v) for k, v in state.items()}
    _sync()
    with Stopwatch() as watch:
        for k, v in host.items():
            device[k].copy_(v, non_blocking=pinned)
        _sync()
    return watch, int(all(torch.equal(device[k], state[k]) for k in list(state)[:2]))


def _async(row: str, state: dict[str, Any], folder: str) -> tuple[Stopwatch, int, dict[str, Any]]:
    from aioflux.torch import CheckpointManager

    with CheckpointManager("file://" + folder) as manager:
        if row == "async-pool":
            manager.save_async(state, 1).result()  # untimed: fills the pool (pinned)
        started = time.perf_counter()
        with Stopwatch() as watch:
            future = manager.save_async(state, 2)
        future.result()
        done = time.perf_counter() - started
        pool = manager.buffers
        extra = {"done_s": round(done, 3),
                 "pool_bytes": 0 if pool is None else pool.nbytes,
                 "pinned_bytes": 0 if pool is None else pool.pinned_nbytes,
                 "pin_error": None if pool is None else pool.pin_error}
        ok = _same(manager.load(2), state)
    return watch, int(ok), extra


def _save_load(row: str, impl: str, state: dict[str, Any], folder: str,
               disk: bool = False) -> tuple[Stopwatch, int]:
    import torch

    path = os.path.join(folder, "state.pt")
    if row == "save":
        with Stopwatch() as watch:
            if impl == "torch":
                with open(path, "wb") as fh:
                    torch.save(state, fh)
                if disk:  # on a disk, as durable as aioflux's (it fsyncs, then renames)
                    fsync_path(path)
                    fsync_path(folder)
            else:
                from aioflux.torch import Checkpoint

                Checkpoint().save(state, "file://" + path)
        return watch, int(os.path.getsize(path) > _nbytes(state))
    if impl == "torch":
        torch.save(state, path)
    else:
        from aioflux.torch import Checkpoint

        Checkpoint().save(state, "file://" + path)
    if disk:
        drop_cache(folder)
    with Stopwatch() as watch:
        if impl == "torch":
            loaded = torch.load(path, map_location="cuda", weights_only=True)
        else:
            from aioflux.torch import Checkpoint

            loaded = Checkpoint().load("file://" + path, map_location="cuda")
        _sync()
    return watch, int(_same(loaded, state))


def _load_bucket(state: dict[str, Any], manifest: Any, name: str,
                 unstaged: bool) -> tuple[Stopwatch, int]:
    """``Checkpoint.load(map_location="cuda")`` from the emulator's bucket;
    ``unstaged``: each storage copied to the device by torch as it is read
    (a callable ``map_location``: what the load did before its staging)."""
    from aioflux import AsyncClient
    from aioflux.torch import Checkpoint

    checkpoint = Checkpoint(AsyncClient(endpoint=manifest.endpoint))
    url = f"gs://{manifest.bucket}/{name}/state.pt"
    checkpoint.save(state, url)
    where: Any = (lambda storage, location: storage.cuda()) if unstaged else "cuda"
    with Stopwatch() as watch:
        loaded = checkpoint.load(url, map_location=where)
        _sync()
    return watch, int(_same(loaded, state))


def _dcp(row: str, impl: str, state: dict[str, Any], folder: str,
         threads: int | None = None, disk: bool = False) -> tuple[Stopwatch, int, dict[str, Any]]:
    import torch
    import torch.distributed.checkpoint as dcp

    def writer(where: str, **kw: Any) -> Any:
        if impl == "torch":
            return dcp.FileSystemWriter(where, **kw)
        from aioflux.torch.dcp import DcpWriter

        if threads is not None:
            kw["thread_count"] = threads
        return DcpWriter("file://" + where, **kw)

    def reader(where: str) -> Any:
        if impl == "torch":
            return dcp.FileSystemReader(where)
        from aioflux.torch.dcp import DcpReader

        return DcpReader("file://" + where)

    extra: dict[str, Any] = {}
    if row == "dcp-save":
        with Stopwatch() as watch:
            dcp.save(state, storage_writer=writer(folder))
        return watch, int(os.path.exists(os.path.join(folder, ".metadata"))), extra
    if row == "dcp-async":
        kw = {"cache_staged_state_dict": True} if impl == "torch" else {}
        keep = writer(os.path.join(folder, "one"), **kw)
        first = time.perf_counter()
        dcp.async_save(state, storage_writer=keep).result()
        extra["first_done_s"] = round(time.perf_counter() - first, 3)
        started = time.perf_counter()
        with Stopwatch() as watch:
            future = dcp.async_save(state, storage_writer=keep,
                                    checkpoint_id=os.path.join(folder, "two")
                                    if impl == "torch" else "file://" + os.path.join(folder, "two"))
        future.result()
        extra["done_s"] = round(time.perf_counter() - started, 3)
        extra["staged_bytes"] = getattr(keep, "staged_nbytes", None)
        return watch, 1, extra
    dcp.save(state, storage_writer=writer(folder))
    if disk:
        drop_cache(folder)
    target = {k: torch.zeros_like(v) for k, v in state.items()}
    _sync()
    with Stopwatch() as watch:
        dcp.load(target, storage_reader=reader(folder))
        _sync()
    return watch, int(_same(target, state)), extra


_BATCH = 64  # a DataLoader batch, pinned and moved to the GPU


def _collate(batch: list[dict[str, bytes]]) -> Any:
    import numpy as np
    import torch

    return torch.from_numpy(np.stack([np.frombuffer(s["jpg"], np.uint8) for s in batch]))


def _loader(args: argparse.Namespace) -> tuple[Stopwatch, int, dict[str, Any]]:
    import torch
    import torch.utils.data
    from workers_probe import data_dir, make_probe, reader

    folder = data_dir(args.shards, args.samples, args.size)
    total = args.shards * args.samples
    if args.impl == "noio":
        samples: Any = _NoIO(total, args.size, args.busy_us, args.gil_free)
    else:
        # The dataset's order in the DataLoader's batches, as the docs ask
        # (guides/resuming.md): each worker reads whole batches of 64
        # (``--order 1``: every Nth sample, a worker's share without batches).
        dataset = reader("aioflux" if args.impl == "aioflux" else "plain", folder, args.order)
        samples, _ = make_probe("aioflux" if args.impl == "aioflux" else "plain", folder,
                                dataset)
    cuda = torch.cuda.is_available()
    more = {"prefetch_factor": args.prefetch} if args.prefetch and args.workers else {}
    times = tempfile.mkdtemp(prefix="aioflux-gpu-node-batches-")
    if args.switch_ms:
        # Forked workers inherit it: a thread waiting for a worker's GIL
        # (its queue's feeder, the sharer of its tensors' handles) gets it
        # after this long at most, not after the interpreter's 5 ms.
        sys.setswitchinterval(args.switch_ms / 1e3)
    loader = torch.utils.data.DataLoader(_BatchTimes(samples, times), batch_size=_BATCH,
                                         collate_fn=_collate, num_workers=args.workers,
                                         pin_memory=cuda, **more)
    got = 0
    # Where the main process waits: each batch's wait for the loader, its
    # first batch (the workers' start), and its own thread's CPU.
    waits: list[float] = []
    with Stopwatch() as watch:
        main_cpu = time.thread_time()
        batches = iter(loader)
        while True:
            asked = time.perf_counter()
            batch = next(batches, None)
            waits.append(time.perf_counter() - asked)
            if batch is None:
                break
            if cuda:
                batch = batch.to("cuda", non_blocking=True)
            got += batch.shape[0]
        if cuda:
            _sync()
        main_cpu = time.thread_time() - main_cpu
    ordered = sorted(waits[1:-1]) or [0.0]
    made = sorted(_BatchTimes.collect(times)) or [0.0]
    return watch, got, {"samples_per_s": round(got / watch.seconds), "expected": total,
                        # A batch's samples, as long as the dataset took to
                        # hand them to the worker (its latency, not the
                        # DataLoader's collate and hand-off).
                        "worker_batch_p50_ms": round(made[len(made) // 2] * 1e3, 3),
                        "worker_batch_p99_ms": round(made[len(made) * 99 // 100] * 1e3, 3),
                        "worker_batch_max_ms": round(made[-1] * 1e3, 3),
                        "workers": args.workers, "device": "cuda" if cuda else "cpu",
                        "first_batch_s": round(waits[0], 4),
                        "wait_p50_ms": round(ordered[len(ordered) // 2] * 1e3, 3),
                        "wait_p99_ms": round(ordered[len(ordered) * 99 // 100] * 1e3, 3),
                        "waited_s": round(sum(waits), 3),
                        "main_cpu_s": round(main_cpu, 3)}


class _BatchTimes:
    """The dataset each loader row iterates, timing in each worker how long
    its dataset took to give each batch's samples (written to ``folder`` at
    the end of the worker's share; an IterableDataset made lazily, as
    :class:`_NoIO`)."""

    def __new__(cls, inner: Any, folder: str) -> Any:
        import torch.utils.data

        class Timed(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
            def __iter__(self) -> Any:
                info = torch.utils.data.get_worker_info()
                spans: list[float] = []
                it = iter(inner)
                while True:
                    started = time.perf_counter()
                    batch = list(itertools.islice(it, _BATCH))
                    if not batch:
                        break
                    spans.append(time.perf_counter() - started)
                    yield from batch
                worker = 0 if info is None else info.id
                with open(os.path.join(folder, f"w{worker}.json"), "w") as fh:
                    json.dump(spans, fh)

        return Timed()

    @staticmethod
    def collect(folder: str) -> list[float]:
        """Every worker's batch times, the folder removed."""
        spans: list[float] = []
        for name in os.listdir(folder):
            with open(os.path.join(folder, name)) as fh:
                spans += json.load(fh)
        shutil.rmtree(folder, ignore_errors=True)
        return spans


class _NoIO:
    """``total`` samples of ``size`` bytes from memory, split by worker
    (an IterableDataset made lazily: torch imported in ``main``), each
    after ``busy_us`` of work (0: none): Python holding the GIL, or with
    ``gil_free`` as long a SHA-256 of a buffer, which runs without it."""

    def __new__(cls, total: int, size: int, busy_us: float = 0.0,
                gil_free: bool = False) -> Any:
        import hashlib

        import torch.utils.data

        busy_s = busy_us / 1e6

        class NoIO(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
            def __iter__(self) -> Any:
                info = torch.utils.data.get_worker_info()
                worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
                payload = os.urandom(size)
                clock = time.perf_counter
                hashed = memoryview(b"")
                if busy_s and gil_free:
                    # hashlib lets the GIL go over 2 KiB: the buffer the
                    # hash of which takes busy_us on this core (best of 5).
                    probe = os.urandom(1 << 20)
                    best = min(_timed(hashlib.sha256, probe) for _ in range(5))
                    hashed = memoryview(probe)[:max(4096, int(len(probe) * busy_s / best))]
                for _ in range(worker, total, workers):
                    if hashed:
                        hashlib.sha256(hashed)
                    elif busy_s:
                        until = clock() + busy_s
                        while clock() < until:
                            pass
                    yield {"jpg": payload, "cls": b"0"}

        return NoIO()


def _timed(work: Any, data: bytes) -> float:
    started = time.perf_counter()
    work(data)
    return time.perf_counter() - started


def main() -> None:
    warnings.filterwarnings("ignore", "torch.distributed is disabled")
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--row", choices=_ROWS, required=True)
    parser.add_argument("--impl", choices=["torch", "aioflux", "plain", "noio"], default="aioflux")
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--where", default="/dev/shm")
    parser.add_argument("--name", required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--heap", choices=("default", "kept"), default="default")
    parser.add_argument("--order", type=int, default=_BATCH,
                        help="ShardDataset's Order(batch_size=...) in the loader rows")
    parser.add_argument("--prefetch", type=int, default=None,
                        help="the loader rows' DataLoader prefetch_factor (default: torch's)")
    parser.add_argument("--busy-us", type=float, default=0.0,
                        help="loader rows, --impl noio: Python work a sample, in us")
    parser.add_argument("--gil-free", action="store_true",
                        help="--busy-us: the work a SHA-256, which lets the GIL go")
    parser.add_argument("--switch-ms", type=float, default=None,
                        help="loader rows: sys.setswitchinterval in the workers, in ms")
    parser.add_argument("--unstaged", action="store_true",
                        help="load-bucket: torch's copy to the device, storage by storage")
    parser.add_argument("--disk", action="store_true",
                        help="--where is a disk: torch's save fsyncs, loads read a dropped file")
    parser.add_argument("--threads", type=int, default=None,
                        help="DcpWriter's thread_count (default: its own)")
    args = parser.parse_args(rest)
    if args.heap == "kept":
        from workers_probe import keep_heap

        keep_heap()
    import torch

    if args.row == "loader":
        watch, items, extra = _loader(args)
        report(watch, nbytes=items * args.size, items=items, **extra)
        return
    if not torch.cuda.is_available():
        sys.exit(f"gpu_node --row {args.row}: needs CUDA (torch {torch.__version__} sees none)")
    base = os.path.join(args.where, "aioflux-perf-gpu-node", args.name)
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    try:
        state = _state(args)
        _sync()
        extra: dict[str, Any] = {"device": torch.cuda.get_device_name(0)}
        if args.row.startswith(("d2h", "h2d")):
            watch, ok = _reference(args.row, state)
        elif args.row.startswith("async"):
            watch, ok, more = _async(args.row, state, base)
            extra.update(more)
        elif args.row == "load-bucket":
            watch, ok = _load_bucket(state, manifest, args.name, args.unstaged)
        elif args.row in ("save", "load"):
            watch, ok = _save_load(args.row, args.impl, state, base, args.disk)
        else:
            watch, ok, more = _dcp(args.row, args.impl, state, base, args.threads, args.disk)
            extra.update(more)
        nbytes = _nbytes(state)
        report(watch, nbytes=nbytes, items=ok, gib_per_s=round(nbytes / 2**30 / watch.seconds, 2),
               **extra)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
