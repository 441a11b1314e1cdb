"""dcp_load: ``torch.distributed.checkpoint.load`` of a 1 GiB state dict from a bucket.

dcp_save's state (64 fp32 tensors of 16 MiB) loaded by DCP in one process,
no process group, into a state of zeros built untimed (a resumed model's
own tensors): aioflux's ``DcpReader`` against torch's own
``FsspecReader`` over gcsfs (the way to a bucket torch ships). Each side
loads a checkpoint its own writer saved (untimed, once a run); every load
is checked bit for bit against the saved state (items 0 if not). The
table's MB/s is the state's tensor bytes per second. Parameters:
``count`` (64; 8 with --quick), ``tensor_mib`` (16).
"""

from __future__ import annotations

from perf.harness import Contender, Options, Plan, Target
from perf.scenarios.dcp_save import dcp_ready, dcp_state

__all__ = ["plan"]


def plan(options: Options) -> Plan:
    count, tensor_mib, state = dcp_state(options)
    return Plan(
        name="dcp_load",
        description=f"dcp.load of a {count * tensor_mib} MiB state dict ({count} fp32 tensors "
                    f"x {tensor_mib} MiB) from a bucket in one process",
        bucket="perf-dcp-load",
        objects=[],
        contenders=[
            Contender("aioflux", "dcp_load.py", None, (*state, "--reader", "aioflux"),
                      note="DcpReader('gs://...') (library defaults): items fetched ahead, "
                           "each checked against the crc32c its writer recorded and copied "
                           "straight into its tensor",
                      available=dcp_ready),
            Contender("fsspec-gcsfs", "dcp_load.py", "gcsfs", (*state, "--reader", "fsspec"),
                      note="torch's FsspecReader('gs://...', token='anon', endpoint_url=...) "
                           "over gcsfs at its defaults"),
        ],
        baseline="aioflux",
        targets=[Target("fsspec-gcsfs", 1.0, "aioflux")],
        notes=["the state and its zeros are built inside each contender before the timed "
               "region; each side's checkpoint is saved by its own writer once a run, untimed"],
        timeout_s=900.0,
        expect_items=1,
        warm_read=False,
    )
