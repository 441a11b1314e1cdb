"""A DCP load's staging ring on the CPU: the path a CUDA destination takes
(each piece read into a staging buffer and sent on while the next is
read), run with pageable buffers and plain copies where there is no CUDA."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from aioflux.torch import dcp as aioflux_dcp
from aioflux.torch.checkpoint._device_load import DeviceStager

__all__ = ["cpu_ring"]


def cpu_ring(monkeypatch: pytest.MonkeyPatch) -> list[DeviceStager]:
    """Have every DCP load take its tensors through one CPU stager of
    64 KiB pieces; the list holds it once a load made it."""
    made: list[DeviceStager] = []

    def staging_for(target: torch.Tensor, stagers: dict[Any, DeviceStager]) -> DeviceStager:
        if not stagers:
            made.append(DeviceStager(torch.device("cpu"), piece=64 * 1024))
            stagers[target.device] = made[0]
        return stagers[target.device]

    monkeypatch.setattr(aioflux_dcp, "staging_for", staging_for)
    return made
