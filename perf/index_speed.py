"""index_speed: cold indexing of a tar and a lines shard, in us a sample (issue 49's targets).

``python -m perf.index_speed [--samples 100000] [--jpg 100] [--lines 1000000]
[--line 9] [--rounds 5]`` prints one JSON line of figures, in one process (no
emulator, no peer):

- ``tar_us`` / ``lines_us``: the format's index pass alone (every check it
  makes: headers, sizes, naming, per-sample crc32c) over the shard's data
  in 4 MiB chunks, as the reader hands them over (targets: tar <= 5 us,
  lines <= 0.5 us a sample);
- ``tar_file_us`` / ``lines_file_us``: ``stream_index`` of the same shard
  as a ``file://`` object: the ranged reads and the whole-object crc32c
  check too;
- ``*_cpu_us``: the same in the process's CPU time, which moves less
  with a shared machine's load than wall time does.

Each figure is the best of ``--rounds``. The tar shard is laid out as
webdataset's ``TarWriter`` and ``ShardWriter`` lay it out: per sample
``KEY.jpg`` (``--jpg`` random bytes) then ``KEY.cls`` (three digits), a
ustar header each. The lines shard holds ``--lines`` lines of ``--line``
bytes with their newline. :func:`measure` is what a ``scale`` scenario
calls; figures, not a timed test (``tests/engines/shards/test_shard_index_fast.py``
checks the fast paths against simple references instead).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["best_of", "lines_shard", "measure", "tar_shard"]

_CHUNK = 4 * 1024 * 1024  # the reader's block (aioflux's READ_BLOCK_SIZE)


def tar_shard(samples: int, jpg: int) -> bytes:
    """A tar of ``samples`` samples of ``KEY.jpg`` and ``KEY.cls``."""
    rng = random.Random(1)
    pool = rng.randbytes(jpg + 4096)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for j in range(samples):
            for field, data in (("jpg", pool[j % 4096:j % 4096 + jpg]),
                                ("cls", b"%03d" % (j % 1000))):
                member = tarfile.TarInfo(f"{j:09d}.{field}")
                member.size, member.mtime, member.mode = len(data), 1_700_000_000, 0o444
                tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def lines_shard(lines: int, size: int) -> bytes:
    """``lines`` lines of ``size`` bytes, their newline included."""
    width = size - 1
    return b"".join(b"%0*d\n" % (width, j % 10**width) for j in range(lines))


def best_of(rounds: int, work: Callable[[], object]) -> tuple[float, float]:
    """Best wall and CPU seconds of ``rounds`` runs of ``work`` (its result is dropped)."""
    wall = cpu = float("inf")
    for _ in range(rounds):
        started, cpu_started = time.perf_counter(), time.process_time()
        work()
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - cpu_started)
    return wall, cpu


def _figures(name: str, fmt: Any, data: bytes, count: int, rounds: int,
             folder: Path) -> dict[str, float]:
    from aioflux._engines.shards import stream_index
    from aioflux.local import LocalStore

    chunks = [data[i:i + _CHUNK] for i in range(0, len(data), _CHUNK)]

    def index() -> int:
        found = fmt.index(chunks, name)
        assert len(found[0]) == count, (len(found[0]), count)
        return count

    path = folder / f"shard.{name}"
    path.write_bytes(data)
    store = LocalStore()
    bucket, _, key = str(path).lstrip("/").partition("/")
    from aioflux._core.concurrency.portal import get_portal

    info = get_portal().call(store.stat(bucket, key))

    def streamed() -> int:
        found = stream_index(store, info, fmt)
        assert len(found) == count
        return count

    wall, cpu = best_of(rounds, index)
    file_wall, file_cpu = best_of(rounds, streamed)
    us = 1e6 / count
    return {f"{name}_us": round(wall * us, 3), f"{name}_cpu_us": round(cpu * us, 3),
            f"{name}_file_us": round(file_wall * us, 3),
            f"{name}_file_cpu_us": round(file_cpu * us, 3)}


def measure(samples: int = 100_000, jpg: int = 100, lines: int = 1_000_000, line: int = 9,
            rounds: int = 5) -> dict[str, Any]:
    """Figures of the tar and lines index passes (see the module)."""
    from aioflux._engines.shards import FORMATS

    out: dict[str, Any] = {"tar_samples": samples, "jpg_bytes": jpg, "lines": lines,
                           "line_bytes": line, "rounds": rounds}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as folder:
        out.update(_figures("tar", FORMATS["tar"], tar_shard(samples, jpg), samples, rounds,
                            Path(folder)))
        out.update(_figures("lines", FORMATS["lines"], lines_shard(lines, line), lines, rounds,
                            Path(folder)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000, help="tar samples")
    parser.add_argument("--jpg", type=int, default=100, help="bytes of each jpg field")
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--line", type=int, default=9, help="bytes a line, its newline included")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.samples, args.jpg, args.lines, args.line, args.rounds)))


if __name__ == "__main__":
    main()
