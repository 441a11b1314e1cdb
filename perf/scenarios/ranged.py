"""ranged: 8 x 256 MiB objects, parallel ranged chunks vs one stream each.

Against obstore: ``get_ranges_async`` over the same chunks (object_store
coalesces contiguous ranges, so one GET per object) and ``get_range_async``
per chunk, gathered (parallel, like aioflux's Downloader).

``extra_mb`` in the contender's JSON line is the peak RSS during a
download (VmHWM, reset per object) beyond the RSS before it plus the
object's bytes: what reading costs on top of the destination buffer.
Parameters: ``count`` (8;
2 with --quick), ``size`` (256 MiB; 32 MiB with --quick), ``chunk``
(16 MiB, aioflux's DownloadOptions.range_size).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]


def _ready() -> str | None:
    return project_imports("import aioflux; aioflux.Downloader")


def plan(options: Options) -> Plan:
    count = options.get("count", 2 if options.quick else 8)
    size = options.get("size", (32 if options.quick else 256) * 1024 * 1024)
    chunk = str(options.get("chunk", 16 * 1024 * 1024))
    return Plan(
        name="ranged",
        description=f"{count} x {size / 2**20:g} MiB read one after another",
        bucket="perf-ranged",
        objects=[ObjectSet("ranged/obj-", count, size)],
        contenders=[
            Contender("aioflux-ranged", "ranged_aioflux.py", None,
                      ("--mode", "ranged", "--chunk", chunk),
                      note=f"Downloader: {chunk}-byte ranges into one bytearray, crc32c "
                           "checked against the listing", available=_ready),
            Contender("aioflux-ranged-nolean", "ranged_aioflux.py", None,
                      ("--mode", "ranged", "--chunk", chunk, "--no-lean"),
                      note="as aioflux-ranged with ClientConfig(lean_reads=False)",
                      available=_ready),
            Contender("aioflux-single", "ranged_aioflux.py", None, ("--mode", "single"),
                      note="AsyncClient.read of the whole object: one stream",
                      available=_ready),
            Contender("obstore-ranges", "ranged_obstore.py", "obstore",
                      ("--mode", "ranges", "--chunk", chunk),
                      note=f"obstore.get_ranges_async(starts, lengths) of {chunk}-byte ranges "
                           "at its default coalesce (1 MiB): contiguous ranges merge into one "
                           "GET"),
            Contender("obstore-gather", "ranged_obstore.py", "obstore",
                      ("--mode", "gather", "--chunk", chunk),
                      note=f"one obstore.get_range_async per {chunk}-byte chunk, an object's "
                           "chunks gathered at once"),
        ],
        baseline="aioflux-ranged",
        targets=[Target("aioflux-single", 4.0), Target("obstore-ranges", 1.5),
                 Target("obstore-gather", 1.0)],
        notes=["RSS growth includes the destination buffers (256 MiB per object); the "
               "memory beyond them is extra_mb in each contender's JSON line"],
        timeout_s=900.0,
    )
