"""Child process of the SIGKILL test: saves steps START..20 under ROOT.

Run as ``python _ckpt_child.py ENDPOINT ROOT START``; prints ``ready`` once
imported, then ``saved N`` after each save.
"""

from __future__ import annotations

import os
import sys

import torch

PART = 5 * 1024 * 1024
LAST_STEP = 20


def state_for(step: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(1000 + step)
    # ~11 MiB: three 5 MiB parts, so kills land between parts too.
    return {"w": torch.randn(2_900_000, generator=g), "step": step,
            "extra": [torch.full((7,), float(step))]}


def main() -> None:
    endpoint, root, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    from aioflux.torch import CheckpointManager

    mgr = CheckpointManager(root, keep_last=3, part_size=PART, max_in_flight=2)
    print("ready", flush=True)
    for step in range(start, LAST_STEP + 1):
        if step % 2:
            mgr.save(state_for(step), step)
        else:
            mgr.save_async(state_for(step), step).result()
        print(f"saved {step}", flush=True)
    mgr.close()


if __name__ == "__main__":
    main()
