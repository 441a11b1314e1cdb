"""What the checkpoint contenders share: the state dict and the RSS figures.

Not a contender itself. Imported as a sibling (like ``_contender``) by the
``ckpt_*`` scripts, under the project's python and under the peers' venvs,
so it needs only the standard library and torch.

Every contender builds the same state, untimed, before its stopwatch starts:
``count`` fp32 tensors of ``tensor_mib`` MiB from ``torch.manual_seed(0)``.
``kind="random"`` is plain ``randn`` (what a freshly initialised model looks
like to a compressor: next to nothing to gain); ``kind="half16"`` rounds
every other tensor through fp16 (13 low mantissa bits zero), a stand-in for
weights trained or stored in reduced precision, which zstd can shrink.

``Stopwatch`` notes RSS when the timed region starts, i.e. after the state
is built, and the harness's "RSS growth" column is peak minus that: the
saver's own memory beyond the state dict.
"""

from __future__ import annotations

import argparse
import gc
from typing import Any

import torch

__all__ = ["add_state_args", "build_state", "state_bytes"]


def add_state_args(parser: argparse.ArgumentParser) -> None:
    """The flags that say which state to build (the scenario passes them)."""
    parser.add_argument("--count", type=int, default=64, help="tensors")
    parser.add_argument("--tensor-mib", type=int, default=16, help="MiB per tensor")
    parser.add_argument("--kind", choices=["random", "half16"], default="random")


def build_state(args: argparse.Namespace) -> dict[str, Any]:
    """The state dict the scenario saves (same bytes in every contender)."""
    torch.manual_seed(0)
    numel = args.tensor_mib * 2**20 // 4
    state: dict[str, Any] = {}
    for i in range(args.count):
        tensor = torch.randn(numel, dtype=torch.float32)
        if args.kind == "half16" and i % 2:
            tensor = tensor.half().float()
        state[f"layer{i:03d}.weight"] = tensor
    state["step"] = 1
    # Temporaries of the fp16 round trip must not count as the saver's memory.
    gc.collect()
    return state


def state_bytes(state: dict[str, Any]) -> int:
    """Tensor bytes in ``state``."""
    return sum(t.numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))
