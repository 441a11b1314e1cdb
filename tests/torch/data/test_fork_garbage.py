"""An epoch of fork DataLoader workers while the parent holds aioflux
objects it dropped but has not collected yet: a writer left unclosed and a
listing left half-read, as earlier code in a long process leaves behind.

A worker's garbage collector finalizes its copies of them. They used to
hand work to the parent's event loop, which does not run in the child, and
wait forever: the epoch hung (see tests/api/test_fork_safety.py)."""

from __future__ import annotations

import gc
import time

import pytest
import torch.utils.data

import aioflux
from aioflux._engines.writer import UnclosedWriterWarning
from aioflux.torch import ObjectMapDataset
from tests._hang_report import dump_forked_children
from tests.torch._resume_util import seed_data, to_bytes
from tests.torch.conftest import Where


def _collect(worker_id: int) -> None:
    gc.collect()


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_an_epoch_of_fork_workers_beside_the_parents_garbage(where: Where) -> None:
    assert where.client is not None
    data = seed_data(where, 12)
    # The workers' copies of the writer say nothing (the data is the
    # parent's); the parent's own, collected when its cyclic GC next runs
    # (by the DataLoader's, or the last, collection), says what it discarded.
    with pytest.warns(UnclosedWriterWarning,
                      match=r"unclosed writer .*/dropped discarded the 11 bytes"):
        gc.disable()  # the objects below stay uncollected until the workers run
        try:
            writer = aioflux.open(where.url("dropped"), "wb", client=where.client)
            writer.write(b"unpublished")
            writer.cycle = writer  # type: ignore[attr-defined]  # only the cyclic GC frees it
            names = iter(where.client.list_objects(where.bucket))
            next(names)
            holder: list[object] = [names]
            holder.append(holder)
            del writer, names, holder
            ds = ObjectMapDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                              settings=where.settings())
            loader = torch.utils.data.DataLoader(
                ds, batch_size=4, num_workers=2, multiprocessing_context="fork",
                collate_fn=list, worker_init_fn=_collect, timeout=30)
            try:
                got = [sample for batch in loader for sample in batch]
            except RuntimeError:
                dump_forked_children()  # where a hung worker stands, in the report
                time.sleep(2)
                raise
        finally:
            # Collected before automatic collection is back on: while another
            # thread (the portal's loop) has a collection under way,
            # gc.collect() returns at once, and the writer's warning would
            # come after the block.
            gc.collect()
            gc.enable()
    assert sorted(got) == sorted(data.values())
    assert where.names() == sorted(data)  # the dropped writer published nothing
