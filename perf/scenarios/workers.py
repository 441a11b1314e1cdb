"""workers: a DataLoader worker's CPU a sample and its threads, by worker count (issue 61).

No emulator traffic: ``file://`` tar shards (64 x 1,024 samples of a
16 KiB ``KEY.jpg`` and a ``KEY.cls``, 1.1 GiB) made once into
``$AIOFLUX_PERF_WORKERS_DIR`` (default ``/dev/shm/aioflux-perf-workers``;
remove it when done) with aioflux's indexes cached beside them, untimed.

Probe rows (``<reader>-w<N>``): a DataLoader of N forked workers over a
probe dataset: each worker iterates its share of the reader and yields one
record (its CPU, samples, bytes read, threads), so the DataLoader's own
transport costs nothing; with it, a worker's CPU to its first sample
(the code's pages written after the fork, its first indexes, the first
chunk of its order: paid once a worker and epoch, it weighs more the fewer
samples each of N workers gets). Readers: aioflux's ``ShardDataset`` (its default
``batch_size=1``: each worker takes every Nth sample of the epoch order,
as with ``DataLoader(batch_size=None)``) and a plain ``tarfile`` loop over
the shards split by worker. ``copy-w<N>``, a physical reference: the
probe over samples made with no I/O, each 16 KiB copied out of a buffer
the workers share and its crc32c: how much a worker's CPU a sample for
such work grows with the workers on this machine's cores (shared caches,
memory bandwidth, hyperthreads, clocks). ``aioflux-b64-w<N>``: the probe over
``ShardDataset(batch_size=64)``, whose worker takes whole batches. Loader
rows (``<reader>-loader-w<N>``): the same readers through
``DataLoader(batch_size=64, collate_fn=list)`` (``ShardDataset(batch_size=64)``),
every sample carried to the main process; CPU there is the main
process's and its workers'. ``none-loader-w<N>``: the same DataLoader
over samples made in the worker with no I/O (a fresh copy of 16 KiB of
one buffer each), its ceiling.

Kept-heap rows (``<reader>-loader-kept-w<N>``): the loader rows with the
main process's glibc heap kept (``--heap kept``): whether a batch's
receive buffer reuses heap memory or faults in fresh pages depends on what
the main process allocated before (aioflux's datasets raise glibc's
threshold where they are made; the plain loops' processes keep theirs),
~8 us a 16 KiB sample of the one thread every batch crosses; these compare
the readers alike.

MapDataset rows: ``map-w<N>`` (probe) and ``map-loader-w<N>`` read one
file a sample (as many 16 KiB files as the shards' samples, made once
beside them) through ``MapDataset.from_prefix(file://...)``, 64 indices a
``__getitems__``; ``mapplain-*``: the same files, ``open().read()`` one by
one.

Parameters: ``workers`` (``2,8,16``), ``loader_workers`` (``8,16``; empty
for none), ``kept_workers`` (``8``; empty for none), ``shards`` (64),
``samples`` (1,024 a shard), ``size`` (16,384). ``--quick``: 8 shards.
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Limit, Options, Plan, Target

__all__ = ["plan"]


def _ready() -> str | None:
    return project_imports("import aioflux.torch; aioflux.torch.ShardDataset")


def plan(options: Options) -> Plan:
    workers = [int(w) for w in options.params.get("workers", "2,8,16").split(",")]
    loader_workers = [int(w) for w in options.params.get("loader_workers", "8,16").split(",")
                      if w]
    kept_workers = [int(w) for w in options.params.get("kept_workers", "8").split(",") if w]
    shards = options.get("shards", 8 if options.quick else 64)
    samples = options.get("samples", 1024)
    size = options.get("size", 16384)
    shape = ("--shards", str(shards), "--samples", str(samples), "--size", str(size))
    contenders: list[Contender] = []
    for n in workers:
        contenders += [
            Contender(f"aioflux-w{n}", "workers_probe.py", None,
                      ("--reader", "aioflux", "--workers", str(n), *shape), available=_ready,
                      note=f"ShardDataset.from_prefix(file://DIR/, format='tar', "
                           "reads=ShardReads(index_dir=its cache, filled before the timer)); "
                           f"{n} forked workers, each "
                           "iterating its share in the worker (probe)"),
            Contender(f"plain-w{n}", "workers_probe.py", None,
                      ("--reader", "plain", "--workers", str(n), *shape), available=_ready,
                      note=f"tarfile.open over shards[id::{n}], members grouped by key; "
                           "the same probe"),
        ]
    for n in workers:
        contenders.append(Contender(
            f"copy-w{n}", "workers_probe.py", None,
            ("--reader", "copy", "--workers", str(n), *shape), available=_ready,
            note="physical reference: no I/O, each sample 16 KiB copied out of a 64 MiB "
                 "buffer the workers share and its crc32c; the same probe"))
    for n in workers:
        contenders.append(Contender(
            f"aioflux-b64-w{n}", "workers_probe.py", None,
            ("--reader", "aioflux", "--batch", "64", "--workers", str(n), *shape),
            available=_ready,
            note="the same probe over ShardDataset(batch_size=64): a worker's share is "
                 "whole batches of 64 consecutive positions (about one read unit each), "
                 "not every Nth sample"))
    for n in workers:
        contenders += [
            Contender(f"map-w{n}", "workers_probe.py", None,
                      ("--reader", "map", "--batch", "64", "--workers", str(n), *shape),
                      available=_ready,
                      note=f"MapDataset.from_prefix(file://DIR/) over one 16 KiB file a "
                           f"sample; {n} forked workers, each reading its share 64 "
                           "indices a __getitems__ (every Nth batch, as a DataLoader hands "
                           "them out) in the worker (probe)"),
            Contender(f"mapplain-w{n}", "workers_probe.py", None,
                      ("--reader", "mapplain", "--batch", "64", "--workers", str(n),
                       *shape), available=_ready,
                      note="the same files and share, each open().read() one by one; "
                           "the same probe"),
        ]
    for n in loader_workers:
        contenders += [
            Contender(f"aioflux-loader-w{n}", "workers_probe.py", None,
                      ("--reader", "aioflux", "--mode", "loader", "--workers", str(n),
                       "--batch", "64", *shape), available=_ready,
                      note=f"ShardDataset(batch_size=64) through DataLoader(batch_size=64, "
                           f"collate_fn=list, num_workers={n})"),
            Contender(f"plain-loader-w{n}", "workers_probe.py", None,
                      ("--reader", "plain", "--mode", "loader", "--workers", str(n),
                       "--batch", "64", *shape), available=_ready,
                      note=f"the tarfile loop through the same DataLoader, num_workers={n}"),
            Contender(f"none-loader-w{n}", "workers_probe.py", None,
                      ("--reader", "none", "--mode", "loader", "--workers", str(n),
                       "--batch", "64", *shape), available=_ready,
                      note=f"no I/O: each worker yields its share of samples, each a fresh "
                           f"copy of 16 KiB of one buffer; the same DataLoader, "
                           f"num_workers={n} (the ceiling)"),
            Contender(f"map-loader-w{n}", "workers_probe.py", None,
                      ("--reader", "map", "--mode", "loader", "--workers", str(n),
                       "--batch", "64", *shape), available=_ready,
                      note=f"MapDataset through DataLoader(batch_size=64, collate_fn=list, "
                           f"num_workers={n}): __getitems__ a batch"),
            Contender(f"mapplain-loader-w{n}", "workers_probe.py", None,
                      ("--reader", "mapplain", "--mode", "loader", "--workers", str(n),
                       "--batch", "64", *shape), available=_ready,
                      note=f"open().read() a file a sample through the same DataLoader, "
                           f"num_workers={n}"),
        ]
    for n in kept_workers:
        for reader, what in (("aioflux", "ShardDataset"), ("plain", "the tarfile loop"),
                             ("none", "no I/O"), ("map", "MapDataset"),
                             ("mapplain", "the open() loop")):
            contenders.append(Contender(
                f"{reader}-loader-kept-w{n}", "workers_probe.py", None,
                ("--reader", reader, "--mode", "loader", "--workers", str(n), "--batch", "64",
                 "--heap", "kept", *shape), available=_ready,
                note=f"{what} through the same DataLoader, num_workers={n}, its main "
                     "process's heap kept (mallopt: batches up to 8 MiB from the heap, "
                     "64 MiB freed kept there)"))
    limits: list[Limit] = []
    for n in workers:
        limits.append(Limit(f"aioflux-w{n}", "threads_per_worker", "<=", 8.0, "threads",
                            "threads a worker"))
    # The bars. The CPU a sample flat in the worker count: the most
    # workers within 1.2x the fewest, for each of aioflux's readers.
    few, most = min(workers), max(workers)
    if most > few:
        limits += [Limit(f"{reader}-w{most}", "cpu_us_per_sample", "<=", 1.2, "us",
                         "CPU a sample", of=f"{reader}-w{few}")
                   for reader in ("aioflux", "aioflux-b64", "map")]
    # Samples/s >= 1.2x the plain loop in the probe at 8 workers and more;
    # through a DataLoader, >= the plain loop and >= 0.9 of no I/O at all.
    targets = [Target(f"plain-w{n}", 1.2, f"aioflux-w{n}") for n in workers if n >= 8]
    for n in loader_workers:
        targets += [Target(f"plain-loader-w{n}", 1.0, f"aioflux-loader-w{n}"),
                    Target(f"none-loader-w{n}", 0.9, f"aioflux-loader-w{n}"),
                    Target(f"mapplain-loader-w{n}", 1.0, f"map-loader-w{n}")]
    for n in kept_workers:
        targets += [Target(f"plain-loader-kept-w{n}", 1.0, f"aioflux-loader-kept-w{n}"),
                    Target(f"none-loader-kept-w{n}", 0.9, f"aioflux-loader-kept-w{n}"),
                    Target(f"mapplain-loader-kept-w{n}", 1.0, f"map-loader-kept-w{n}")]
    items = shards * samples
    return Plan(
        name="workers",
        description=f"a DataLoader worker's CPU a sample and threads at "
                    f"{', '.join(map(str, workers))} workers: ShardDataset against a plain "
                    f"tarfile loop, file:// tar, {shards} x {samples} x {size // 1024} KiB; "
                    f"MapDataset against open() a file, as many files; DataLoader rows "
                    f"against a no-I/O ceiling",
        bucket="perf-workers",
        objects=[],
        contenders=contenders,
        baseline=f"aioflux-w{workers[0]}",
        targets=targets,
        notes=["probe rows: CPU a sample is every thread of every worker (getrusage in the "
               "worker, over its iteration) over the samples; threads are the most any "
               "worker held at its end, by name; read B/sample is the bytes the reader "
               "read (aioflux: its store's bytes_received) over the samples it yielded",
               "the issue's bars, set for a 16-core node (the machine line says this "
               "run's cores): CPU a sample at "
               "16 workers <= 1.2x at 2 workers; probe samples/s >= 1.2x the plain loop's "
               "at 8 and 16 workers; through the DataLoader >= the plain loop's and >= 0.9 "
               "of the no-I/O ceiling",
               "where the machine has fewer cores than workers, they oversubscribe them, "
               "for both readers; wall times move with its load (load1 in each row)"],
        timeout_s=600.0,
        expect_items=items,
        warm_read=False,
        limits=limits,
        # Its pairs are the bars (targets): the baseline's wall time
        # against every other row (16 workers, a loader) would pair unlike things.
        ratios=False,
        figures=[("cpu_us_per_sample", "CPU us/sample"), ("sys_us_per_sample", "sys us/sample"),
                 ("first_sample_ms", "CPU to a worker's first sample, ms (most)"),
                 ("faults_per_sample", "faults/sample"), ("read_per_sample", "read B/sample"),
                 ("threads_per_worker", "threads/worker"), ("samples_per_s", "samples/s")],
    )
