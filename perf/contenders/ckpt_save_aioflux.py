"""ckpt_save contender: ``torch.save`` through aioflux.

``--mode open``: ``torch.save(state, aioflux.open(url, "wb"))``, the
streaming multipart writer (``--compression zstd`` wraps it in the
multithreaded zstd writer). ``--mode checkpoint``:
``Checkpoint(client).save(state, url)``, the same writer without torch's
zip CRC32 (``aioflux/torch/checkpoint/_zip_crc.py``). ``--mode manager``: ``CheckpointManager.save``
(blocking: writer + manifest + history + retention). ``--mode async``:
``CheckpointManager.save_async``; the timed region is only the blocking
part (snapshot to host memory), the total until the future resolves is
reported as ``total_s``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from _contender import Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state

import aioflux
from aioflux import AsyncClient, WriterOptions
from aioflux.torch import Checkpoint, CheckpointManager

if __name__ == "__main__":
    import torch

    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    parser.add_argument("--mode", choices=["open", "checkpoint", "manager", "async"],
                        default="open")
    parser.add_argument("--compression", choices=["none", "zstd"], default="none")
    parser.add_argument("--part-mib", type=int, default=WriterOptions().part_size // 2**20)
    parser.add_argument("--in-flight", type=int, default=WriterOptions().max_in_flight)
    parser.add_argument("--zstd-threads", type=int, default=None,
                        help="zstd worker threads (default: the library's)")
    parser.add_argument("--zstd-level", type=int, default=None)
    args = parser.parse_args(rest)
    compression = None if args.compression == "none" else args.compression
    if compression and args.mode == "checkpoint":
        parser.error("--mode checkpoint measures the uncompressed save")
    client = AsyncClient(endpoint=manifest.endpoint)
    state = build_state(args)
    options = WriterOptions(part_size=args.part_mib * 2**20, max_in_flight=args.in_flight)
    extra: dict[str, object] = {"rss_state_mb": round(rss_mb(), 1)}
    if args.mode in ("open", "checkpoint"):
        url = (f"gs://{manifest.bucket}/ckpt_save/aioflux-{args.mode}"
               f"{'-zstd' if compression else ''}.pt")
        tuned_zstd = compression and (args.zstd_threads is not None or args.zstd_level)
        with Stopwatch() as watch:
            if args.mode == "checkpoint":
                serialized = Checkpoint(client, writer=options).save(state, url).size
            else:
                if tuned_zstd:
                    from aioflux._engines.writer import ObjectWriter
                    from aioflux._engines.zstd import DEFAULT_LEVEL, compress_writer

                    raw = ObjectWriter(client, manifest.bucket, url.split("/", 3)[3],
                                       options=options)
                    f = compress_writer(raw, level=args.zstd_level or DEFAULT_LEVEL,
                                        threads=-1 if args.zstd_threads is None
                                        else args.zstd_threads)
                else:
                    f = aioflux.open(url, "wb", client=client, writer=options,
                                     compression=compression)
                with f:
                    torch.save(state, f)
                    serialized = f.tell()
        with aioflux.Client(endpoint=manifest.endpoint) as sync:
            stored = sync.stat(manifest.bucket, url.split("/", 3)[3]).size
        extra.update(serialized_bytes=serialized, stored_bytes=stored)
        nbytes = serialized
    else:
        folder = f"ckpt_save/mgr-{args.mode}"
        # Each process starts from an empty folder: the async mode saves
        # steps 1 then 2, and keep_last refuses a step below one a previous
        # round (or the warm-up) left behind.
        with aioflux.Client(endpoint=manifest.endpoint) as sync:
            for old in list(sync.list_objects(manifest.bucket, f"{folder}/")):
                sync.delete(manifest.bucket, old.name, missing_ok=True)
        manager = CheckpointManager(f"gs://{manifest.bucket}/{folder}",
                                    keep_last=1, client=client, compression=compression,
                                    writer=options)
        if args.mode == "manager":
            with Stopwatch() as watch:
                info = manager.save(state, step=1, overwrite=True)
        else:
            # Steady state of a training run: the first save pays for fresh
            # host buffers (reported, untimed); the timed one is the next
            # save, after training touched the tensors, reusing them.
            t0 = time.perf_counter()
            manager.save_async(state, step=1, overwrite=True).result()
            extra["first_blocking_s"] = round(manager.history()[-1].blocking_seconds, 3)
            for value in state.values():
                if hasattr(value, "add_"):
                    value.add_(1.0)
            t0 = time.perf_counter()
            with Stopwatch() as watch:
                future = manager.save_async(state, step=2, overwrite=True)
            info = future.result()
            extra["total_s"] = round(time.perf_counter() - t0, 3)
        manager.close()
        record = manager.history()[-1]
        extra.update(serialized_bytes=record.bytes, stored_bytes=info.size,
                     blocking_s=round(record.blocking_seconds, 3),
                     total_recorded_s=round(record.total_seconds, 3))
        nbytes = record.bytes
    # The table shows only time and RSS; sizes go to the run's log too.
    print(json.dumps({"sizes": extra}), file=sys.stderr)
    report(watch, nbytes=nbytes, items=1, mode=args.mode, part_mib=args.part_mib,
           in_flight=args.in_flight, compression=args.compression,
           zstd_threads=args.zstd_threads, zstd_level=args.zstd_level, **extra)
