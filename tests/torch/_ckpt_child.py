"""Child process of the SIGKILL test: saves steps START..20 under ROOT.

Started from a forkserver that preloaded torch, so each run costs a fork,
not a torch import; reports ``saved N`` on a pipe after each save.
"""

from __future__ import annotations

import os
from multiprocessing.connection import Connection

import torch

from aioflux import WriterOptions

PART = 5 * 1024 * 1024
LAST_STEP = 20
KEEP_LAST = 3


def state_for(step: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(1000 + step)
    # ~11 MiB: three 5 MiB parts, so kills land between parts too.
    return {"w": torch.randn(2_900_000, generator=g), "step": step,
            "extra": [torch.full((7,), float(step))]}


def run(endpoint: str, root: str, start: int, conn: Connection) -> None:
    """Save steps ``start``..20, reporting each on ``conn``."""
    # gs:// roots: our emulator; s3:// roots: moto; az:// roots: Azurite's
    # connection string (the forkserver may have started before the test
    # set it); file:// roots need none.
    if endpoint:
        os.environ["AWS_ENDPOINT_URL_S3" if root.startswith("s3://") else
                   "AZURE_STORAGE_CONNECTION_STRING" if root.startswith("az://")
                   else "STORAGE_EMULATOR_HOST"] = endpoint
    from aioflux.torch import CheckpointManager

    mgr = CheckpointManager(root, keep_last=KEEP_LAST,
                            writer=WriterOptions(part_size=PART, max_in_flight=2))
    conn.send("ready")
    for step in range(start, LAST_STEP + 1):
        if step % 2:
            mgr.save(state_for(step), step)
        else:
            mgr.save_async(state_for(step), step).result()
        conn.send(step)
    mgr.close()
