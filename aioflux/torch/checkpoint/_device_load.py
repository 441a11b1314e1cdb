"""Loads onto a CUDA device through pinned staging buffers.

``torch.load(map_location="cuda")`` copies each storage to the device as
soon as it is read, from pageable memory: a synchronous copy, during which
nothing is read. :class:`DeviceStager`, given to ``torch.load`` as its
``map_location``, copies each storage torch has read into a ring of
pinned buffers, a piece at a time, and queues the piece's transfer to the
device on a side stream (``non_blocking``): the transfers run while torch
reads the next storage's bytes. A buffer is refilled only once its
transfer is done (an event per buffer), and :meth:`DeviceStager.finish`
waits for the last one before the load returns.

The copies between host buffers run on the calling thread alone, not on
torch's intra-op threads: after a parallel ``copy_`` those threads spin
for about 10 ms, and a load from disk waits that long for its next bytes
again and again, so every core of a node would spin through the load.

The same class stages into host memory for the CPU (pageable buffers,
plain copies): the path the tests run on a machine without CUDA.
"""

from __future__ import annotations

from typing import Any

import numpy
import torch

__all__ = ["DeviceStager", "cuda_target"]

# A staging buffer's size: large enough for a transfer at full speed, and
# for a read of a file on a memory filesystem straight into it
# (:meth:`DeviceStager.read_into`) to be split over threads
# (``local/_reader.py``); two of them pinned, 32 MiB.
_PIECE = 16 * 1024 * 1024
_BUFFERS = 2


def cuda_target(map_location: Any) -> torch.device | None:
    """The CUDA device ``map_location`` names, if it names one this process
    has (a string or ``torch.device``; a dict or a callable stays torch's
    business, and so does a device it has not: torch.load's RuntimeError
    says to map elsewhere, where the staging buffers' allocation failed
    with CUDA's own assertion)."""
    if isinstance(map_location, str):
        try:
            map_location = torch.device(map_location)
        except RuntimeError:
            return None
    if not isinstance(map_location, torch.device) or map_location.type != "cuda" \
            or not torch.cuda.is_available():
        return None
    if map_location.index is not None and map_location.index >= torch.cuda.device_count():
        return None
    return map_location


def _host_copy(into: torch.Tensor, source: torch.Tensor) -> None:
    """``into[:] = source`` for host byte tensors, on this thread (numpy's
    copy, without the GIL)."""
    numpy.copyto(into.numpy(), source.numpy())


class DeviceStager:
    """``torch.load``'s ``map_location``: storages to ``device`` through
    pinned staging buffers (see the module).

    Args:
        device: where the loaded storages go.
        piece: bytes per staging buffer.
    """

    def __init__(self, device: torch.device, *, piece: int = _PIECE) -> None:
        self.device = device
        self.piece = piece
        self._cuda = device.type == "cuda"
        self._buffers: list[torch.Tensor] = []
        self._events: list[Any] = []
        self._next = 0
        self._stream: Any = None
        #: Why the staging buffers are pageable (pinning failed), or None.
        self.pin_error: str | None = None
        #: Bytes staged so far.
        self.nbytes = 0

    def __call__(self, storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage:
        """The storage torch read, copied to :attr:`device`."""
        source = torch.empty(0, dtype=torch.uint8).set_(storage)
        size = source.numel()
        out = torch.empty(size, dtype=torch.uint8, device=self.device)
        self._after_current()
        for start in range(0, size, self.piece):
            end = min(start + self.piece, size)
            slot = self._slot()
            staged = self._buffers[slot][:end - start]
            _host_copy(staged, source[start:end])
            self._send(staged, out[start:end], slot)
        self.nbytes += size
        return out.untyped_storage()

    def read_into(self, target: torch.Tensor, source: Any) -> None:
        """Read ``target``'s bytes from ``source`` into ``target`` (a
        contiguous tensor on :attr:`device`): each piece read into a staging
        buffer, whose transfer then runs while the next piece is read.

        Args:
            target: where the bytes go.
            source: a reader whose ``readinto`` fills the buffer it is
                given or raises (an aioflux ``FileReader``), at the bytes'
                start.
        """
        out = target.reshape(-1).view(torch.uint8)
        size = out.numel()
        self._after_current()
        for start in range(0, size, self.piece):
            end = min(start + self.piece, size)
            slot = self._slot()
            staged = self._buffers[slot][:end - start]
            source.readinto(staged.numpy())
            self._send(staged, out[start:end], slot)
        self.nbytes += size

    def order(self) -> None:
        """Have work queued from now on the current stream wait for the
        transfers queued so far (on the GPU: this thread does not wait)."""
        if self._stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)

    def _after_current(self) -> None:
        # The destination's memory is the current stream's: it may be a
        # block freed there (another thread's) that queued work still reads.
        if self._stream is not None:
            self._stream.wait_stream(torch.cuda.current_stream(self.device))

    def _send(self, staged: torch.Tensor, out: torch.Tensor, slot: int) -> None:
        """``staged``'s bytes to ``out``: queued on the side stream for
        CUDA (the slot's event marks when its buffer is free again)."""
        if self._cuda:
            with torch.cuda.stream(self._stream):
                out.copy_(staged, non_blocking=staged.is_pinned())
                self._events[slot].record(self._stream)
        else:
            _host_copy(out, staged)

    def _slot(self) -> int:
        """The next staging buffer, once its last transfer is done."""
        if not self._buffers:
            self._start()
        slot = self._next
        self._next = (slot + 1) % len(self._buffers)
        if self._cuda:
            self._events[slot].synchronize()
        return slot

    def _start(self) -> None:
        for _ in range(_BUFFERS):
            self._buffers.append(self._buffer())
        if self._cuda:
            self._stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
            # The device's memory the storages go to is the current stream's.
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
            self._events = [torch.cuda.Event()  # type: ignore[no-untyped-call]
                            for _ in self._buffers]

    def _buffer(self) -> torch.Tensor:
        if self._cuda and self.pin_error is None:
            try:
                return torch.empty(self.piece, dtype=torch.uint8, pin_memory=True)
            except RuntimeError as exc:
                self.pin_error = str(exc)
        return torch.empty(self.piece, dtype=torch.uint8)

    def finish(self) -> None:
        """Wait for every transfer; the loaded tensors are then complete
        for any stream. Releases the staging buffers."""
        if self._stream is not None:
            self._stream.synchronize()
            self._stream = None
        self._buffers, self._events, self._next = [], [], 0
