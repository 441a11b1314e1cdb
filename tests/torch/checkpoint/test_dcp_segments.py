"""The DCP writer's per-item crc32c, from the checksums the writer computes
of its part buffers (every byte once, in place), equal a fresh crc32c of
the same bytes, wherever the marks fall against the parts."""

from __future__ import annotations

import itertools
import random

import pytest

from aioflux import WriterOptions
from aioflux._core.concurrency.portal import call
from aioflux._core.integrity.crc import crc32c
from aioflux.testing import MemoryStore
from aioflux.torch.checkpoint._dcp_crc import RecordingWriter

MiB = 1024 * 1024
SIZES = [0, 1, 100, 70_000, MiB - 1, MiB, MiB + 1, 2 * MiB + 3]


@pytest.mark.parametrize("seed", range(8))
def test_every_range_between_tells_has_its_bytes_crc32c(seed: int) -> None:
    rng = random.Random(seed)
    store = MemoryStore(buckets=["bkt"])
    part_size = rng.choice([MiB + 5, 2 * MiB, 3 * MiB - 1])
    writer = RecordingWriter(store, "bkt", "f",
                             options=WriterOptions(part_size=part_size, max_in_flight=2))
    data = bytearray()
    marks = [writer.tell()]
    for _ in range(rng.randint(4, 14)):
        chunk = rng.randbytes(rng.choice(SIZES))
        writer.write(memoryview(chunk).toreadonly())  # read-only, as torch hands them
        data += chunk
        if rng.random() < 0.6:
            marks.append(writer.tell())
    writer.close()
    marks = sorted({*marks, len(data)})
    pairs = list(itertools.pairwise(marks))
    pairs += [tuple(sorted(rng.sample(marks, 2))) for _ in range(5) if len(marks) > 1]
    for start, end in pairs:
        assert writer.segments.item_crc32c(start, end - start) == crc32c(bytes(data[start:end]))
    if len(data) > 2:  # a range that does not end at a mark has none
        inside = next((m + 1 for m in marks if m + 1 not in marks and m + 1 < len(data)), None)
        if inside is not None:
            assert writer.segments.item_crc32c(0, inside) is None
    stored = call(store.stat("bkt", "f"))
    assert (stored.size, stored.crc32c) == (len(data), crc32c(bytes(data)))
