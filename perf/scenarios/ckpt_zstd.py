"""ckpt_zstd: the same ``torch.save`` through aioflux with and without zstd.

The state is 1 GiB of fp32 tensors (64 x 16 MiB from ``randn``) of which
every other one is rounded through fp16 (``kind=half16``, see
``contenders/ckpt_common.py``): the low 13 mantissa bits of half the data
are zero, a stand-in for reduced-precision weights that zstd can shrink
(pure ``randn`` fp32 barely compresses). Each contender reports
``serialized_bytes`` and ``stored_bytes`` in its JSON line; the table's
MB/s is serialized bytes per second, so it compares like with like.

Parameters: ``count`` (64; 8 with --quick), ``tensor_mib`` (16), ``kind``
(half16).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan

__all__ = ["plan"]


def _zstd_ready() -> str | None:
    return project_imports("import aioflux._engines.zstd")


def plan(options: Options) -> Plan:
    count = options.get("count", 8 if options.quick else 64)
    tensor_mib = options.get("tensor_mib", 16)
    kind = options.params.get("kind", "half16")
    state = ("--count", str(count), "--tensor-mib", str(tensor_mib), "--kind", kind)
    contenders = [
        Contender(
            "aioflux",
            "ckpt_save_aioflux.py",
            None,
            (*state, "--mode", "open"),
            note="torch.save(state, aioflux.open(url, 'wb')), no compression",
        ),
        Contender(
            "aioflux-zstd",
            "ckpt_save_aioflux.py",
            None,
            (*state, "--mode", "open", "--compression", "zstd"),
            note=(
                "aioflux.open(url, 'wb', compression='zstd'): library defaults (level and "
                "threads as in aioflux/_engines/zstd.py)"
            ),
            available=_zstd_ready,
        ),
        Contender(
            "aioflux-zstd-1thread",
            "ckpt_save_aioflux.py",
            None,
            (*state, "--mode", "open", "--compression", "zstd", "--zstd-threads", "0"),
            note=(
                "the same at the library's level with zstandard threads=0 (compression on "
                "the calling thread, as in the rough in-process check that saw 1.93x)"
            ),
            available=_zstd_ready,
        ),
    ]
    return Plan(
        name="ckpt_zstd",
        description=(
            f"torch.save of a {count * tensor_mib} MiB state ({count} fp32 tensors x "
            f"{tensor_mib} MiB, {kind}) through aioflux with zstd off and on."
        ),
        bucket="perf-ckpt-zstd",
        objects=[],
        contenders=contenders,
        baseline="aioflux",
        notes=[
            "stored sizes (compressed) are in each contender's JSON line as stored_bytes",
            (
                "the seed documents report +9% time for 22% smaller checkpoints with "
                "multithreaded zstd on a many-core VM; here compression competes with the "
                "emulator and torch.save for 2 cores"
            ),
        ],
        timeout_s=900.0,
        expect_items=1,
        warm_read=False,
        warm_rounds=1,
    )
