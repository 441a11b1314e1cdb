"""CI: the installed wheel at work, from outside the checkout (.ci/run).

Run with the wheel's own virtual environment, from an empty directory: a
write and a read through the client, the same object through the
``aioflux`` command, and a checkpoint saved and loaded by aioflux.torch,
all against the bundled emulator.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aioflux
from aioflux import Client
from aioflux.testing import running_emulator


def main() -> None:
    where = Path(aioflux.__file__).resolve()
    assert where.is_relative_to(Path(sys.prefix).resolve()), f"aioflux imported from {where}"
    data = os.urandom(3 << 20)
    with running_emulator() as emu:
        emu.create_bucket("smoke")
        with Client(endpoint=emu.endpoint) as client:
            client.write("smoke", "blob.bin", data)
            assert client.read("smoke", "blob.bin") == data
        os.environ["STORAGE_EMULATOR_HOST"] = emu.endpoint
        out = subprocess.run(["aioflux", "cat", "gs://smoke/blob.bin"], capture_output=True,
                             check=True).stdout
        assert out == data, f"aioflux cat gave {len(out)} bytes"

        import torch

        from aioflux.torch import CheckpointManager

        state = {"w": torch.arange(1 << 20, dtype=torch.float32)}
        with CheckpointManager("gs://smoke/run", keep_last=1) as manager:
            manager.save_async(state, 1).result()
            latest = manager.latest()
            assert latest is not None and latest.step == 1, latest
            assert torch.equal(manager.load()["w"], state["w"])
    print(f"wheel smoke: aioflux {aioflux.__version__} from {where.parent}: "
          f"write, read, cat and a checkpoint round trip on the emulator")


if __name__ == "__main__":
    main()
