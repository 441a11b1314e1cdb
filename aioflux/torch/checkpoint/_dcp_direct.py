"""A DCP tensor item read straight into the tensor it loads.

torch's ``FileSystemReader`` ``torch.load``s each item into fresh memory
and copies that into the state dict's tensor: every byte is written twice,
and the fresh memory's pages are faulted in first. When an item is a whole tensor
and its destination a contiguous CPU tensor of its dtype and shape, the
item's data bytes are read into the destination's memory instead: from a
local file, or from the item's bytes fetched from a bucket
(:class:`HeldItem`). torch parses the item (``map_location="meta"``: its
dtype, shape and where its bytes start, no data read); the item's reader
checks the crc32c of every byte read as ever (a fetched item was checked
as it arrived). A destination on a CUDA device takes
the bytes through a :class:`DeviceStager`: read into its pinned buffers a
piece at a time, each piece's transfer running while the next is read
(torch's reader loads into fresh pageable memory and copies that to the
device synchronously).
"""

from __future__ import annotations

import io
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index

from ...local._reader import FileReader
from ._device_direct import native_byte_order
from ._device_load import DeviceStager

__all__ = ["HeldItem", "load_item", "staging_for"]


class HeldItem(io.BytesIO):
    """An item's bytes fetched from a bucket (and checked), read as a file
    of its own: ``size`` as a :class:`FileReader`'s."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.size = len(data)


def staging_for(target: torch.Tensor,
                stagers: dict[torch.device, DeviceStager]) -> DeviceStager | None:
    """The staging a destination on a CUDA device loads through (one per
    device in ``stagers``, made on first use), or None: a CPU destination
    is read into directly, another device's loaded as torch's reader does."""
    if target.device.type != "cuda":
        return None
    stager = stagers.get(target.device)
    if stager is None:
        stager = stagers[target.device] = DeviceStager(target.device)
    return stager


def load_item(item: FileReader | HeldItem, req: Any, target: torch.Tensor,
              stager: DeviceStager | None = None) -> bool:
    """Load the tensor item ``item`` (its whole bytes) into ``target``, as
    DCP's reader does.

    Args:
        item: the item's reader, at its start.
        req: DCP's ``ReadItem`` (which part of the saved tensor is loaded).
        target: where it goes (``planner.resolve_tensor(req)``, detached).
        stager: the staging of a destination on its device (else a CPU
            destination is read into directly); its transfers may still
            be running when this returns (:meth:`DeviceStager.order`,
            :meth:`DeviceStager.finish`).

    Returns:
        Whether the bytes went straight into ``target``'s memory (else
        they were loaded into fresh memory and copied).

    Raises:
        AssertionError: the loaded part is not ``target``'s size (DCP's own check).
    """
    if _readable_into(target, stager):
        meta = torch.load(item, map_location="meta", weights_only=True)  # type: ignore[arg-type]
        offset = _data_offset(item, meta, req, target)
        if offset is not None:
            item.seek(offset)
            # All of it: the item holds it (_data_offset), or the read raises.
            if stager is not None:
                stager.read_into(target, item)
            else:
                item.readinto(target.reshape(-1).view(torch.uint8).numpy().data)
            return True
        item.seek(0)
    tensor = torch.load(item, map_location="cpu", weights_only=True)  # type: ignore[arg-type]
    tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
    if target.size() != tensor.size():
        raise AssertionError(
            f"req {req.storage_index} mismatch sizes {target.size()} vs {tensor.size()}"
        )
    target.copy_(tensor)
    return False


def _readable_into(target: torch.Tensor, stager: DeviceStager | None) -> bool:
    """Whether ``target``'s memory can take a saved tensor's bytes as they
    are (on the CPU, or on ``stager``'s device through it)."""
    return (
        type(target) is torch.Tensor
        and target.device == (torch.device("cpu") if stager is None else stager.device)
        and target.layout == torch.strided
        and target.is_contiguous()
        and not target.is_quantized
        and not target.is_conj()
        and not target.is_neg()
    )


def _data_offset(item: FileReader | HeldItem, meta: Any, req: Any,
                 target: torch.Tensor) -> int | None:
    """Where in ``item`` the bytes of ``target`` start, if the item holds
    exactly them (else None: loaded the usual way)."""
    if not isinstance(meta, torch.Tensor):
        return None
    storage = meta.untyped_storage()
    offset = getattr(storage, "_checkpoint_offset", None)  # None from an older torch
    whole = list(req.storage_offsets) == [0] * meta.dim() and list(req.lengths) == list(meta.shape)
    if (
        offset is None
        or not whole
        or meta.dtype != target.dtype
        or meta.shape != target.shape
        or not meta.is_contiguous()
        # A conjugate (or negative) view saved: its bytes are the plain
        # tensor's, which torch.load then conjugates; read raw, they would
        # be the plain values, their crc32c holding all the same.
        or meta.is_conj()
        or meta.is_neg()
        or meta.storage_offset() != 0
        or storage.nbytes() != target.nbytes
        or offset + target.nbytes > item.size
    ):
        return None
    return offset if native_byte_order(item) else None
