"""dcp_save: ``torch.distributed.checkpoint.save`` of a 1 GiB state dict.

ckpt_save's state (64 fp32 tensors of 16 MiB, built untimed inside each
contender) saved by DCP in one process, no process group: aioflux's
``GcsStorageWriter`` against torch's own ``FsspecWriter`` over gcsfs (the
way to a bucket torch ships), at its defaults and with as many writer
threads as aioflux has parts in flight. The table's MB/s is the state's
tensor bytes per second. Parameters: ``count`` (64; 8 with --quick), ``tensor_mib`` (16).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan
from perf.scenarios.ckpt_save import _IN_FLIGHT

__all__ = ["dcp_ready", "dcp_state", "plan"]


def dcp_ready() -> str | None:
    """Why aioflux's DCP face cannot run here, or None."""
    return project_imports("import aioflux.torch.dcp")


def dcp_state(options: Options) -> tuple[int, int, tuple[str, ...]]:
    """The state's tensors, their MiB, and the contender flags that build it
    (dcp_save's and dcp_load's)."""
    count = options.get("count", 8 if options.quick else 64)
    tensor_mib = options.get("tensor_mib", 16)
    return count, tensor_mib, ("--count", str(count), "--tensor-mib", str(tensor_mib),
                               "--kind", "random")


def plan(options: Options) -> Plan:
    count, tensor_mib, state = dcp_state(options)
    return Plan(
        name="dcp_save",
        description=f"dcp.save of a {count * tensor_mib} MiB state dict ({count} fp32 tensors "
                    f"x {tensor_mib} MiB) in one process",
        bucket="perf-dcp-save",
        objects=[],
        contenders=[
            Contender("aioflux", "dcp_save.py", None, (*state, "--writer", "aioflux"),
                      note="GcsStorageWriter('gs://...'): one data file streamed by the "
                           "multipart writer (library defaults), items' crc32c recorded, no "
                           "zip CRC32",
                      available=dcp_ready),
            Contender("fsspec-gcsfs", "dcp_save.py", "gcsfs", (*state, "--writer", "fsspec"),
                      note="torch's FsspecWriter('gs://...', token='anon', endpoint_url=...) "
                           "over gcsfs at its defaults, sync_files=False"),
            Contender(f"fsspec-gcsfs-t{_IN_FLIGHT}", "dcp_save.py", "gcsfs",
                      (*state, "--writer", "fsspec", "--threads", str(_IN_FLIGHT)),
                      note=f"the same with thread_count={_IN_FLIGHT} ({_IN_FLIGHT} data files "
                           "written at once): aioflux's parts in flight"),
        ],
        baseline="aioflux",
        targets=[],
        notes=["state built inside each contender before the timed region; 'RSS growth' is "
               "the saver's memory beyond the state dict"],
        timeout_s=900.0,
        expect_items=1,
        warm_read=False,
        warm_rounds=2,
    )
