"""A local checkpoint read straight onto its CUDA device.

``torch.load(map_location=...)`` reads each storage into fresh host memory
(its pages faulted in as the bytes land) before ``map_location`` sees it;
:class:`DeviceStager` then copies it into pinned memory for the transfer.
Here torch parses the checkpoint without its data (``map_location="meta"``:
the objects, each storage's size and where its bytes start), each storage
is made on the device, and its bytes are read from the file into the
stager's pinned buffers and sent on, in file order: one host copy a byte,
the transfers running while the next bytes are read, every byte held to
the file's crc32c as ever. The loaded tensors take the device's memory in
place (``torch.utils.swap_tensors``): the same objects, in the same
containers, as ``torch.load`` builds.

Only where that is sure: ``weights_only`` loads whose objects are
containers (dict, list, tuple), plain tensors and parameters, and values
without tensors (numbers, strings, ``torch.Size``...). Anything else, before
a byte of data is read, is left to the usual load.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from typing import Any

import torch

from ...local._reader import FileReader
from ._device_load import DeviceStager

__all__ = ["load_onto", "native_byte_order"]

# Values that hold no tensor: what a weights_only load may build besides
# containers and tensors.
_PLAIN = (int, float, complex, bool, str, bytes, type(None), torch.dtype, torch.device,
          torch.Size, slice, range)
_TENSORS = (torch.Tensor, torch.nn.Parameter)


def load_onto(reader: FileReader, stager: DeviceStager) -> tuple[Any] | None:
    """``torch.load(reader, weights_only=True)`` onto ``stager``'s device,
    each storage read straight through the stager (see the module).

    Args:
        reader: the checkpoint's reader, at its start.
        stager: the device's staging; its transfers may still run when
            this returns (the caller's :meth:`DeviceStager.finish`).

    Returns:
        ``(loaded,)``, or None where the checkpoint is not one this reads
        (nothing read but its directory and objects; ``reader`` rewound).

    Raises:
        ChecksumMismatch: the file's bytes are not its crc32c's.
    """
    meta = torch.load(reader, map_location="meta", weights_only=True)  # type: ignore[arg-type]
    tensors = _tensors(meta)
    if tensors is None or not tensors or not native_byte_order(reader):
        reader.seek(0)
        return None
    storages: dict[int, tuple[int, list[torch.Tensor]]] = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        offset = getattr(storage, "_checkpoint_offset", None)  # None from an older torch
        # Sizes past the file's end: nothing allocated for them here
        # (torch's own load says what is wrong with the file).
        if offset is None or offset + storage.nbytes() > reader.size:
            reader.seek(0)
            return None
        storages.setdefault(offset, (storage.nbytes(), []))[1].append(tensor)
    on_device = {offset: torch.empty(nbytes, dtype=torch.uint8, device=stager.device)
                 for offset, (nbytes, _) in storages.items()}
    try:
        for offset, (_, views) in storages.items():
            memory = on_device[offset].untyped_storage()
            for view in views:
                _take(view, memory)
    except (RuntimeError, TypeError):
        # A tensor torch.utils.swap_tensors refuses (one with a weak
        # reference, say): loaded the usual way, nothing read yet.
        reader.seek(0)
        return None
    for offset in sorted(on_device):  # the file front to back: one read stream
        reader.seek(offset)
        stager.read_into(on_device[offset], reader)
    reader.verify()  # the bytes between the storages, and the whole file's crc32c
    return (meta,)


def _take(view: torch.Tensor, memory: torch.UntypedStorage) -> None:
    """``view`` (a meta tensor) made the same tensor over ``memory``."""
    placed = torch.empty(0, dtype=view.dtype, device=memory.device).set_(
        memory, view.storage_offset(), view.size(), view.stride())
    if type(view) is torch.nn.Parameter:
        placed = torch.nn.Parameter(placed, requires_grad=view.requires_grad)
    else:
        placed.requires_grad_(view.requires_grad)
    placed.__dict__.update(view.__dict__)
    torch.utils.swap_tensors(view, placed)  # type: ignore[no-untyped-call]


def _tensors(loaded: Any) -> list[torch.Tensor] | None:
    """The tensors of ``loaded`` (each once), or None if something in it
    is not a container, a plain tensor or parameter, or a value without
    tensors."""
    found: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    for value in _walk(loaded, seen):
        if isinstance(value, torch.Tensor):
            if not _plain_tensor(value):
                return None
            found[id(value)] = value
        elif not isinstance(value, _PLAIN):
            return None
    return list(found.values())


def _walk(value: Any, seen: set[int]) -> Iterator[Any]:
    """Every leaf of ``value``'s containers (each container once)."""
    if isinstance(value, (dict, list, tuple)):  # OrderedDict and torch.Size too
        if id(value) in seen:
            return
        seen.add(id(value))
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        for item in items:
            yield from _walk(item, seen)
    else:
        yield value


def _plain_tensor(tensor: torch.Tensor) -> bool:
    return (type(tensor) in _TENSORS and tensor.device.type == "meta"
            and tensor.layout == torch.strided and not tensor.is_quantized
            and not tensor.is_conj() and not tensor.is_neg())


def native_byte_order(reader: FileReader | io.BytesIO) -> bool:
    """Whether the checkpoint's tensor bytes are in this machine's order
    (torch swaps them otherwise), from its start."""
    reader.seek(0)
    archive: Any = torch._C.PyTorchFileReader(reader)  # type: ignore[arg-type]
    # torch's default for a file without the mark: little-endian.
    order = archive.get_record("byteorder") if archive.has_record("byteorder") else b"little"
    return bool(order == sys.byteorder.encode())
