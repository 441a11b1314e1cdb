"""Loading safetensors files (the Hub's weights) through a checked reader.

The format: an 8-byte little-endian header length, that many bytes of JSON
(each tensor's ``dtype``, ``shape`` and ``data_offsets`` into the data that
follows; ``__metadata__`` beside them), then the tensors' bytes, back to
back, to the end of the file. Read front to back: each tensor into memory
of its own that the tensor then shares (no second copy).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Protocol

import torch

from ..._core.errors import ChecksumMismatch, InvalidArgument

__all__ = ["load_safetensors"]

#: the largest header the format's reference implementation accepts
_MAX_HEADER = 100 * 2**20

_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "U16": torch.uint16,
    "U32": torch.uint32,
    "U64": torch.uint64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


class _Reader(Protocol):
    def seek(self, offset: int, whence: int = 0, /) -> int: ...
    def read(self, size: int = -1, /) -> bytes: ...
    def readinto(self, buffer: bytearray | memoryview, /) -> int: ...


def _bad(where: str, bucket: str, name: str, why: str) -> ChecksumMismatch:
    return ChecksumMismatch(
        f"load {where}: not a whole safetensors file ({why})",
        operation="load",
        bucket=bucket,
        name=name,
    )


def _entries(
    header: dict[str, Any], data: int, where: str, bucket: str, name: str
) -> list[tuple[str, torch.dtype, list[int], int, int]]:
    """The header's tensors in file order, each checked against the data's
    ``data`` bytes: offsets in order with no gap or overlap, covering them
    all, each span its shape times its dtype's size."""
    out = []
    for key, spec in header.items():
        if key == "__metadata__":
            continue
        try:
            code, shape, (start, end) = spec["dtype"], spec["shape"], spec["data_offsets"]
            shape = [int(d) for d in shape]
            start, end = int(start), int(end)
        except (KeyError, TypeError, ValueError):
            raise _bad(where, bucket, name, f"tensor {key!r}: {spec!r}") from None
        dtype = _DTYPES.get(code)
        if dtype is None:
            raise InvalidArgument(
                f"load {where}: tensor {key!r} has dtype {code}, which "
                f"this torch cannot hold (known: {', '.join(_DTYPES)})"
            )
        want = math.prod(shape) * dtype.itemsize
        if min(shape, default=0) < 0 or end - start != want:
            raise _bad(
                where,
                bucket,
                name,
                f"tensor {key!r} spans bytes {start}-{end}, not the {want} of {code}{shape}",
            )
        out.append((key, dtype, shape, start, end))
    out.sort(key=lambda e: e[3])
    at = 0
    for key, _, _, start, end in out:
        if start != at:
            raise _bad(where, bucket, name, f"tensor {key!r} starts at {start}, not {at}")
        at = end
    if at != data:
        raise _bad(where, bucket, name, f"the tensors end at {at} of {data} data bytes")
    return out


def load_safetensors(
    reader: _Reader, where: str, bucket: str, name: str, map_location: Any = None
) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``reader`` reads, by name, in file
    order; moved to ``map_location`` (a device or its name).

    Raises:
        ChecksumMismatch: the header does not parse, or does not describe
            the file's bytes to its end.
        InvalidArgument: a dtype torch has no type for; a ``map_location``
            that names no device.
        StorageError: a read failed.
    """
    if map_location is not None and not isinstance(map_location, (str, torch.device)):
        raise InvalidArgument(
            f"load {where}: a safetensors file's map_location is a device "
            f"or its name, not {type(map_location).__name__}"
        )
    device = None if map_location is None else torch.device(map_location)
    if sys.byteorder != "little":
        raise InvalidArgument(f"load {where}: safetensors is little-endian; this machine is not")
    size = reader.seek(0, 2)
    reader.seek(0)
    length = int.from_bytes(reader.read(8), "little")
    if size < 8 or not 2 <= length <= min(_MAX_HEADER, size - 8):
        raise _bad(where, bucket, name, f"{size} bytes, a header length of {length}")
    raw = reader.read(length)
    if len(raw) != length:
        raise _bad(where, bucket, name, f"a {length}-byte header, {len(raw)} bytes there")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(where, bucket, name, f"the header does not parse: {exc}") from None
    if not isinstance(header, dict):
        raise _bad(where, bucket, name, "the header is no JSON object")
    tensors: dict[str, torch.Tensor] = {}
    for key, dtype, shape, start, end in _entries(header, size - 8 - length, where, bucket, name):
        memory = bytearray(end - start)
        got = reader.readinto(memory) if memory else 0
        while 0 < got < len(memory):  # a file reader may stop at a block's end
            more = reader.readinto(memoryview(memory)[got:])
            if not more:
                break
            got += more
        if got != len(memory):
            raise _bad(where, bucket, name, f"tensor {key!r}: {got} of {len(memory)} bytes")
        tensor = (
            torch.frombuffer(memory, dtype=dtype) if memory else torch.empty(0, dtype=dtype)
        ).reshape(shape)
        tensors[key] = tensor if device is None else tensor.to(device)
    return tensors
