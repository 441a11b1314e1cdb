"""workers contenders: what a DataLoader worker spends a sample, and its threads.

``--reader aioflux``: ``ShardDataset.from_prefix(file://DIR/, order=Order(batch_size=B))``
over tar shards (its indexes cached before the timer, in a folder of the
data set's); ``--reader plain``: a ``tarfile`` loop over the shards split
by worker (``shards[id::workers]``), grouping members by key as webdataset
does. The data set (``--shards`` tar shards of ``--samples`` samples, each
``KEY.jpg`` of ``--size`` random bytes and ``KEY.cls``) is made once into
``$AIOFLUX_PERF_WORKERS_DIR`` (default ``/dev/shm/aioflux-perf-workers``),
keyed by its shape, untimed.

``--reader map``: ``ObjectMapDataset.from_prefix(file://DIR/)`` over one file a
sample (``--shards`` x ``--samples`` files of ``--size`` random bytes, made
once beside the shards), a worker's share read ``--batch`` indices a call
(``__getitems__``), every Nth batch as a DataLoader hands them out;
``--reader mapplain``: the same files, each read by ``open().read()``.
``--reader none`` (loader mode): no I/O, each sample a fresh copy of
``--size`` bytes of one buffer, the DataLoader's own ceiling. ``--reader
copy`` (probe): no I/O either, each sample ``--size`` bytes copied out of
a 64 MiB buffer the workers share and their crc32c (``Copies``): what the
cores allow such work as workers are added.

``--mode probe``: a DataLoader of ``--workers`` forked workers over a probe
dataset whose worker iterates its share of the reader and yields one
record: its CPU (``getrusage``: every thread of the worker), its
samples, bytes, the reader's bytes read, and its threads by name
(``threading.enumerate()``, and ``/proc/self/task`` for threads Python did
not start), so no sample crosses to the main process. ``--mode loader``:
the same readers through ``DataLoader(batch_size=B, collate_fn=list)``,
every sample carried to the main process; the workers' CPU then comes from
this process's reaped children. ``--heap kept``: glibc told first to serve
batches from the heap and keep what is freed there (the datasets guide's
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``), so every
reader's main process receives its batches alike, whatever it did before.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import resource
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from _contender import Stopwatch, report

HERE = Path(__file__).resolve().parent


def data_dir(shards: int, samples: int, size: int) -> Path:
    """The data set's folder, made once (untimed)."""
    root = Path(os.environ.get("AIOFLUX_PERF_WORKERS_DIR", "/dev/shm/aioflux-perf-workers"))
    folder = root / f"tar-{shards}-{samples}-{size}"
    if (folder / "done").exists():
        return folder / "data"
    sys.path.insert(0, str(HERE.parent.parent))
    from perf.seed import ShardSet, _pool

    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    shape = ShardSet("shard-", shards, samples, size)
    pool = _pool()
    for i, name in enumerate(shape.names()):
        with open(data / name, "wb") as fh:
            for piece in shape._data(i, pool):
                fh.write(piece)
            fh.write(b"\0" * (2 * tarfile.BLOCKSIZE))  # the archive's end
    (folder / "done").write_text("")
    return data


def map_dir(count: int, size: int) -> Path:
    """A folder of ``count`` files of ``size`` random bytes, made once (untimed)."""
    root = Path(os.environ.get("AIOFLUX_PERF_WORKERS_DIR", "/dev/shm/aioflux-perf-workers"))
    folder = root / f"map-{count}-{size}"
    if (folder / "done").exists():
        return folder / "data"
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    pool = os.urandom(size + 4096)
    for i in range(count):
        at = (i * 64) % 4096
        (data / f"{i:07d}.jpg").write_bytes(pool[at:at + size])
    (folder / "done").write_text("")
    return data


def threads() -> dict[str, int]:
    """This process's threads by name (a pool's numbered threads counted together)."""
    names = collections.Counter(re.sub(r"_\d+$", "", t.name) for t in threading.enumerate())
    names["(not Python's)"] = len(os.listdir("/proc/self/task")) - sum(names.values())
    return {name: n for name, n in names.items() if n}


def plain_samples(folder: str, worker: int, workers: int) -> Any:
    """Samples of this worker's shards, members grouped by key (webdataset's rule)."""
    for path in sorted(glob.glob(f"{folder}/*.tar"))[worker::workers]:
        with tarfile.open(path) as archive:
            key, sample = None, dict[str, bytes]()
            for member in archive:
                stem, _, field = member.name.partition(".")
                data = archive.extractfile(member).read()  # type: ignore[union-attr]
                if stem != key and sample:
                    yield sample
                    sample = {}
                key = stem
                sample[field] = data
            if sample:
                yield sample


class Copies:
    """A sample's memory work alone, no syscall: ``size`` bytes copied out
    of a buffer the workers share (made before the fork, as the page cache
    is shared), and their crc32c. Its CPU a sample at 16 workers against 2
    is what the machine's cores allow a reader that copies and checks each
    sample (shared caches, memory bandwidth, hyperthreads, clocks)."""

    def __init__(self, total: int, size: int) -> None:
        self.total, self.size = total, size
        self.pool = os.urandom(64 << 20)

    def __call__(self, worker: int, workers: int) -> Any:
        import google_crc32c

        span = len(self.pool) - self.size
        for i in range(worker, self.total, workers):
            at = i * self.size % span
            data = self.pool[at:at + self.size]
            yield {"jpg": data, "cls": google_crc32c.value(data).to_bytes(4, "big")}


def reader(kind: str, folder: Path, batch: int) -> Any:
    if kind in ("plain", "mapplain", "none", "copy"):
        return None
    if kind == "map":
        from aioflux.torch import ObjectMapDataset

        return ObjectMapDataset.from_prefix(f"file://{folder}/")
    from aioflux.torch import Order, ShardDataset, ShardReads

    return ShardDataset.from_prefix(f"file://{folder}/", format="tar",
                                    order=Order(batch_size=batch),
                                    reads=ShardReads(index_dir=str(folder.parent / "index")))


def map_batches(total: int, batch: int, worker: int, workers: int) -> Any:
    """The batches of indices a DataLoader hands worker ``worker`` (a
    sequential sampler: batch ``j`` to worker ``j % workers``)."""
    for start in range(worker * batch, total, workers * batch):
        yield list(range(start, min(total, start + batch)))


class PlainFiles:
    """``open().read()`` of each file, one at a time: the plain map-style loop."""

    def __init__(self, folder: Path, total: int) -> None:
        self.paths = [str(folder / f"{i:07d}.jpg") for i in range(total)]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> bytes:
        with open(self.paths[i], "rb") as fh:
            return fh.read()


class NoIO:
    """A worker's share of ``total`` samples, each a fresh copy of ``size``
    bytes: what the DataLoader alone costs."""

    def __init__(self, total: int, size: int) -> None:
        self.total, self.size = total, size

    def __call__(self, worker: int, workers: int) -> Any:
        pool = os.urandom(self.size + 4096)
        for i in range(worker, self.total, workers):
            at = (i * 64) % 4096
            yield {"jpg": pool[at:at + self.size], "cls": b"7"}


def make_map_probe(kind: str, folder: Path, dataset: Any, total: int, batch: int) -> Any:
    import torch.utils.data

    files = dataset if dataset is not None else PlainFiles(folder, total)

    class Probe(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        """Reads a worker's share of the objects in the worker; yields one record of it."""

        def __iter__(self) -> Any:
            info = torch.utils.data.get_worker_info()
            worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            count = nbytes = 0
            first = before
            for indices in map_batches(total, batch, worker, workers):
                got = dataset.__getitems__(indices) if dataset is not None else \
                    [files[i] for i in indices]
                if not count:
                    first = resource.getrusage(resource.RUSAGE_SELF)
                count += len(got)
                nbytes += sum(map(len, got))
            after = resource.getrusage(resource.RUSAGE_SELF)
            read = nbytes if dataset is None else \
                dataset._source.downloader.client.stats.bytes_received
            yield {"samples": count, "bytes": nbytes, "read": read,
                   "seconds": time.perf_counter() - started,
                   "user": after.ru_utime - before.ru_utime,
                   "system": after.ru_stime - before.ru_stime,
                   "faults": after.ru_minflt - before.ru_minflt,
                   # its first batch here (a map dataset's first call)
                   "first": _cpu_between(before, first),
                   "threads": threads()}

    return files, Probe()


def make_probe(kind: str, folder: Path, dataset: Any, copies: Copies | None = None) -> Any:
    import torch.utils.data

    class Samples(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        """A worker's share of the reader's samples."""

        def __iter__(self) -> Any:
            info = torch.utils.data.get_worker_info()
            worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
            if copies is not None:
                return copies(worker, workers)
            return iter(dataset) if dataset is not None else \
                plain_samples(str(folder), worker, workers)

    class Probe(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        """Iterates a worker's share in the worker; yields one record of it."""

        def __iter__(self) -> Any:
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            count = nbytes = 0
            first = before
            for sample in Samples():
                count += 1
                nbytes += len(sample["jpg"]) + len(sample["cls"])
                if count == 1:
                    first = resource.getrusage(resource.RUSAGE_SELF)
            after = resource.getrusage(resource.RUSAGE_SELF)
            read = nbytes if dataset is None else \
                dataset._shards.source.downloader.client.stats.bytes_received
            yield {"samples": count, "bytes": nbytes, "read": read,
                   "seconds": time.perf_counter() - started,
                   "user": after.ru_utime - before.ru_utime,
                   "system": after.ru_stime - before.ru_stime,
                   "faults": after.ru_minflt - before.ru_minflt,
                   "first": _cpu_between(before, first),
                   "threads": threads()}

    return Samples(), Probe()


def _cpu_between(before: Any, after: Any) -> float:
    return float(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def keep_heap() -> None:
    """glibc's allocations up to 8 MiB from the heap, and up to 64 MiB freed
    kept there (what ``MALLOC_MMAP_THRESHOLD_=8388608`` and
    ``MALLOC_TRIM_THRESHOLD_=67108864`` set); forked workers inherit it."""
    import ctypes
    import ctypes.util

    mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    if not (mallopt(m_mmap_threshold, 8 << 20) and mallopt(m_trim_threshold, 64 << 20)):
        raise SystemExit("mallopt refused the thresholds (not glibc?)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("manifest")
    parser.add_argument("--reader", required=True,
                        choices=("aioflux", "plain", "map", "mapplain", "none", "copy"))
    parser.add_argument("--mode", choices=("probe", "loader"), default="probe")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heap", choices=("default", "kept"), default="default")
    args = parser.parse_args()
    if args.heap == "kept":
        keep_heap()

    import torch.utils.data

    total = args.shards * args.samples
    mapped = args.reader in ("map", "mapplain")
    folder = map_dir(total, args.size) if mapped else \
        data_dir(args.shards, args.samples, args.size)
    dataset = reader(args.reader, folder, args.batch)  # indexes made here, untimed
    if mapped:
        samples, probe = make_map_probe(args.reader, folder, dataset, total, args.batch)
    else:
        copies = Copies(total, args.size) if args.reader == "copy" else None
        samples, probe = make_probe(args.reader, folder, dataset, copies)
    if args.reader == "none":
        noio = NoIO(total, args.size)

        class Ceiling(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
            def __iter__(self) -> Any:
                info = torch.utils.data.get_worker_info()
                return noio(*((0, 1) if info is None else (info.id, info.num_workers)))

        samples = Ceiling()
    if args.mode == "probe":
        loader = torch.utils.data.DataLoader(probe, batch_size=None, num_workers=args.workers)
        with Stopwatch() as watch:
            records = list(loader)
        got = sum(r["samples"] for r in records)
        nbytes = sum(r["bytes"] for r in records)
        cpu = sum(r["user"] + r["system"] for r in records)
        per = max(1, got)
        report(watch, nbytes=nbytes, items=got,
               cpu_us_per_sample=round(cpu / per * 1e6, 1),
               sys_us_per_sample=round(sum(r["system"] for r in records) / per * 1e6, 1),
               faults_per_sample=round(sum(r["faults"] for r in records) / per, 2),
               # A worker's CPU to its first sample: the code's pages written
               # after the fork, its first indexes, the first chunk of its order.
               first_sample_ms=round(max(r["first"] for r in records) * 1e3, 2),
               read_per_sample=round(sum(r["read"] for r in records) / per),
               threads_per_worker=max(sum(r["threads"].values()) for r in records),
               threads=", ".join(f"{name} {n}" for name, n in max(
                   (r["threads"] for r in records), key=lambda t: sum(t.values())).items()),
               samples_per_s=round(got / watch.seconds), worker_samples_per_s=round(
                   sum(r["samples"] / r["seconds"] for r in records)),
               load1=round(os.getloadavg()[0], 2), expected=total)
        return
    loader = torch.utils.data.DataLoader(samples, batch_size=args.batch, collate_fn=list,
                                         num_workers=args.workers)
    with Stopwatch() as watch:
        got = nbytes = 0
        for batch in loader:
            got += len(batch)
            nbytes += sum(len(s) if not isinstance(s, dict) else len(s["jpg"]) + len(s["cls"])
                          for s in batch)
    cpu = watch.cpu_user_s + watch.cpu_sys_s
    report(watch, nbytes=nbytes, items=got,
           cpu_us_per_sample=round(cpu / max(1, got) * 1e6, 1),
           samples_per_s=round(got / watch.seconds), load1=round(os.getloadavg()[0], 2),
           expected=total)


if __name__ == "__main__":
    main()
