"""Settings of the streaming writer and reader, one record each.

``aioflux.open``, ``Checkpoint``, ``CheckpointManager``, the DCP and
Lightning integrations and the engines take ``writer=WriterOptions(...)``
and ``reader=ReaderOptions(...)`` instead of repeating their fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks.arguments import check_int

__all__ = ["ReaderOptions", "WriterOptions"]

# perf ckpt_save (1 GiB torch.save, GCS-like emulator profile: 20 ms to
# first byte, 100 MB/s per connection; shared 2-core machine), through the S3
# face, 2 saves each: 16 MiB parts x 8 in flight 2.47-2.49 s, 16 x 12
# 2.07-2.10 s, 16 x 16 1.86-1.87 s, 8 x 16 1.87-1.91 s. A connection carries
# ~100 MB/s, so parts in flight set the speed; 8 MiB x 16 is as fast as
# 16 x 16 at half the buffers (~part_size x 17 = 136 MiB, as 16 MiB x 8).
# The price: a streamed object holds at most 10,000 parts, 83 GB at 8 MiB
# (the writer says so at the 10,000th part); larger objects need a larger
# part_size (WriterOptions(part_size=32 * 2**20) reaches 335 GB).
WRITE_PART_SIZE = 8 * 1024 * 1024
WRITE_PARTS_IN_FLIGHT = 16
# A checkpoint read (1 GiB object, same profile, 3 reads each, gs:// and
# s3:// alike): 8 MiB x 16 in flight 1.00-1.12 s, 16 x 16 0.91-0.94 s,
# 4 x 32 0.71-0.74 s, 2 x 64 0.63-0.72 s, 4 x 48 0.61-0.70 s. A connection
# carries ~100 MB/s, so the count in flight sets the speed; 4 MiB x 32 keeps
# the reader's buffers at 128 MiB (as 8 MiB x 16 would) for 30% less time.
READ_BLOCK_SIZE = 4 * 1024 * 1024
READ_BLOCKS_AHEAD = 32


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """How a streaming upload cuts and sends the stream.

    The writer holds at most ``part_size * (max_in_flight + 1)`` bytes.

    Attributes:
        part_size: bytes per part (GCS: >= 5 MiB and a multiple of 256 KiB;
            the store checks its own rule when the writer opens).
        max_in_flight: parts uploading at once; the producer waits beyond.

    Raises:
        InvalidArgument: a value that is not an int >= 1.
    """

    part_size: int = WRITE_PART_SIZE
    max_in_flight: int = WRITE_PARTS_IN_FLIGHT

    def __post_init__(self) -> None:
        check_int("WriterOptions", "part_size", self.part_size, minimum=1)
        check_int("WriterOptions", "max_in_flight", self.max_in_flight, minimum=1)


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    """How a streaming reader fetches ahead of the position.

    The reader holds at most ``block_size * read_ahead`` bytes.

    Attributes:
        block_size: bytes per ranged GET.
        read_ahead: blocks in flight ahead of the position.

    Raises:
        InvalidArgument: a value that is not an int >= 1.
    """

    block_size: int = READ_BLOCK_SIZE
    read_ahead: int = READ_BLOCKS_AHEAD

    def __post_init__(self) -> None:
        check_int("ReaderOptions", "block_size", self.block_size, minimum=1)
        check_int("ReaderOptions", "read_ahead", self.read_ahead, minimum=1)
