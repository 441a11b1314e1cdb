"""An ObjectMapDataset's listing, shared by its DataLoader workers (fork and spawn)
instead of copied to each, and a pickled dataset that does not grow with
its objects."""

from __future__ import annotations

import multiprocessing.context
import multiprocessing.popen_spawn_posix
import os
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from aioflux._core.memory import shared_columns
from aioflux._core.memory.object_index import ObjectIndex
from aioflux._core.records.types import ObjectInfo
from aioflux.torch import ObjectMapDataset
from tests.torch._forkserver import forkserver


def to_bytes(data: bytes | bytearray) -> bytes:
    return bytes(data)


def shared_in_worker(_: int) -> None:
    """A worker's dataset reads the listing its parent made, not a copy."""
    info = torch.utils.data.get_worker_info()
    assert info is not None
    index = info.dataset.objects  # type: ignore[attr-defined]
    assert isinstance(index, ObjectIndex) and index.shared
    link = os.readlink(f"/proc/self/fd/{index._block.fd}")
    if link != "/memfd:aioflux-index (deleted)":
        raise AssertionError(f"the worker's listing is {link}")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads Linux's /proc")
@pytest.mark.timeout(240)
@pytest.mark.parametrize("context", ["fork", "forkserver"])  # forkserver: pickled, as spawn
def test_workers_read_through_the_shared_listing(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 context: str) -> None:
    monkeypatch.setattr(shared_columns, "SHARE_MIN", 0)  # shared however small
    data = {f"{i:03d}": os.urandom(50 + i) for i in range(30)}
    for name, body in data.items():
        (tmp_path / name).write_bytes(body)
    ds = ObjectMapDataset.from_prefix(f"file://{tmp_path}", transform=to_bytes)
    assert isinstance(ds.objects, ObjectIndex) and ds.objects.shared
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=list,
                                         multiprocessing_context=(
                                             forkserver() if context == "forkserver" else context),
                                         worker_init_fn=shared_in_worker)
    assert [sample for batch in loader for sample in batch] == list(data.values())


def pickled_for_spawn(obj: Any) -> int:
    """The bytes ForkingPickler makes of ``obj`` when a spawn starts a worker."""
    class Popen:
        DupFd = multiprocessing.popen_spawn_posix._DupFd

        def duplicate_for_child(self, fd: int) -> int:
            return fd

    multiprocessing.context.set_spawning_popen(Popen())  # type: ignore[arg-type]
    try:
        return len(ForkingPickler.dumps(obj))
    finally:
        multiprocessing.context.set_spawning_popen(None)


def test_a_pickled_dataset_does_not_grow_with_its_objects() -> None:
    # 1e5 objects make a 2.4 MB listing: shared from 1 MiB on (SHARE_MIN).
    sizes = {}
    for count in (50_000, 100_000):
        objects = [ObjectInfo("b", f"train/{i:09d}.jpg", 1000 + i, 1_700_000_000 + i)
                   for i in range(count)]
        index = ObjectIndex(objects)
        ds: ObjectMapDataset[bytes] = ObjectMapDataset(index)
        assert ds.objects is index and index.nbytes() > shared_columns.SHARE_MIN
        sizes[count] = pickled_for_spawn(ds)
    # The same few hundred bytes, but for the digits of a count or a length.
    assert abs(sizes[50_000] - sizes[100_000]) <= 16 and sizes[100_000] < 8 * 1024, sizes


def test_a_listing_goes_into_columns_a_page_at_a_time(tmp_path: Path) -> None:
    # The listing became a list of records (~640 bytes an object at its
    # peak, with the columns made from it), then columns grown in a
    # bytearray and arrays (~100 at the peak, copies as they grew); now the
    # columns once, in mappings tracemalloc does not see (growing.mapped).
    import gc
    import tracemalloc

    from aioflux._core.memory import growing

    count = 20_000
    for d in range(20):
        (tmp_path / f"{d:02d}").mkdir()
        for i in range(count // 20):
            os.close(os.open(tmp_path / f"{d:02d}" / f"{i:04d}", os.O_CREAT | os.O_WRONLY))
    gc.collect()
    tracemalloc.start()
    try:
        growing.reset_mapped()
        ds = ObjectMapDataset.from_prefix(f"file://{tmp_path}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ds) == count and ds.objects[-1].name.endswith("19/0999")
    # Each name past the listed folder ("00/0000"), a 32-bit end and a
    # generation: 19 bytes an object (the folder's path once).
    assert ds.objects.nbytes() <= 19 * count + 64
    # The columns as they grow (19 bytes an object), the block they are
    # copied to (as much, in the heap below 1 MiB), and the few pages of
    # records the listing holds at once (~2 MiB).
    assert growing.mapped()[1] <= 19 * count + 64
    assert peak < 2 * 19 * count + (3 << 20), peak / count
