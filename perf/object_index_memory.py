"""Memory an ObjectMapDataset's listing takes per object, per process and per node.

    python -m perf.object_index_memory [--count 1000000] [--dir DIR]

Lists ``count`` tiny files (made in a temporary directory and removed
afterwards, unless ``--dir`` names a folder of files to list) with
``ObjectMapDataset.from_prefix`` in this process, then reads one batch through
a DataLoader of 2 spawn workers. It prints, per object: the names' UTF-8
bytes, the bytes the columns hold, the listing's peak and held growth of
this process's resident memory, and for each worker the listing's pages
it maps, as shared and as private (copy-on-read would make them private).
The target (issue 49): at most 1.5x the name bytes plus 24 bytes an
object, per node. A figure, not a timed test.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time
from typing import Any


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


def _index_mapping() -> dict[str, int]:
    """This process's mapping of the index's memory file, from smaps (bytes)."""
    found: dict[str, int] = {}
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                inside = "aioflux-index" in line
            elif inside and head[0].rstrip(":") in ("Rss", "Pss", "Shared_Clean",
                                                    "Shared_Dirty", "Private_Clean",
                                                    "Private_Dirty"):
                key = head[0].rstrip(":")
                found[key] = found.get(key, 0) + int(head[1]) * 1024
    return found


def _touch(_: int) -> None:
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    assert info is not None
    index = info.dataset.objects  # type: ignore[attr-defined]
    total = sum(len(name) for name in index.names())  # every page read
    total += sum(index.size(i) for i in range(len(index)))
    mapped = _index_mapping()
    mib = 2**20
    shared = (mapped.get("Shared_Clean", 0) + mapped.get("Shared_Dirty", 0)) / mib
    private = (mapped.get("Private_Clean", 0) + mapped.get("Private_Dirty", 0)) / mib
    print(f"[worker {info.id}] read {total} name bytes and sizes; the listing's mapping: "
          f"rss {mapped.get('Rss', 0) / mib:.1f} MiB, shared {shared:.1f} MiB, "
          f"private {private:.1f} MiB", flush=True)


def _make(root: str, count: int) -> None:
    per = 1000
    for d in range((count + per - 1) // per):
        folder = f"{root}/d{d:04d}"
        os.makedirs(folder)
        for i in range(d * per, min(count, (d + 1) * per)):
            fd = os.open(f"{folder}/f{i:07d}.bin", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"x")
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    import torch.utils.data

    from aioflux.torch import ObjectMapDataset

    made = None
    root = args.dir
    if root is None:
        made = tempfile.mkdtemp(prefix="aioflux-index-memory-")
        root = f"{made}/data"
        _make(root, args.count)
    try:
        gc.collect()
        before = _status("VmRSS")
        started = time.perf_counter()
        ds: Any = ObjectMapDataset.from_prefix(f"file://{os.path.abspath(root)}")
        listed = time.perf_counter() - started
        peak = _status("VmHWM") - before
        gc.collect()
        held = _status("VmRSS") - before
        n = len(ds)
        names = sum(len(name.encode()) for name in ds.objects.names())
        nbytes = ds.objects.nbytes()
        print(f"{n} objects listed in {listed:.1f} s; shared: {ds.objects.shared}")
        print(f"per object: names {names / n:.1f} B, columns {nbytes / n:.1f} B "
              f"(target {1.5 * names / n + 24:.1f} B), this process held "
              f"{held / n:.1f} B, peak {peak / n:.1f} B (its high-water mark over "
              "its resident size before listing)")
        loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2,
                                             multiprocessing_context="spawn",
                                             worker_init_fn=_touch, collate_fn=list)
        next(iter(loader))
    finally:
        if made is not None:
            shutil.rmtree(made)


if __name__ == "__main__":
    main()
