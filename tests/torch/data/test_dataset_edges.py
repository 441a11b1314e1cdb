"""ObjectMapDataset / ObjectIterableDataset at their edges, as a training loop meets them:
a transform that raises mid-batch, then a save and a resume; the downloads
an error leaves behind; settings named in their errors.

They run on our emulator and the local filesystem (``where``).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import AsyncIterator
from typing import Any

import pytest
import torch.utils.data

from aioflux import InvalidArgument, ObjectInfo
from aioflux.torch import (
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
    ResumableBatchSampler,
    ResumableSampler,
)
from tests.torch.conftest import Where

COUNT = 10


def seed(where: Where) -> dict[str, bytes]:
    data = {f"d/{i:02d}": bytes([i]) * 16 + os.urandom(8) for i in range(COUNT)}
    for name, body in data.items():
        where.put(name, body)
    return data


def stream_of(where: Where, order: Order | None = None,
              **kwargs: Any) -> ObjectIterableDataset[Any]:
    return ObjectIterableDataset.from_prefix(where.url("d/"), order=order or Order(shuffle=False),
                                             settings=where.settings(), **kwargs)


class Refuses:
    """A transform that raises on its ``bad``-th call; ``bytes`` otherwise."""

    def __init__(self, bad: int) -> None:
        self.bad, self.calls = bad, 0

    def __call__(self, data: bytes | bytearray) -> bytes:
        self.calls += 1
        if self.calls == self.bad:
            raise ValueError(f"bad sample at call {self.calls}")
        return bytes(data)


def test_a_transform_error_mid_batch_is_not_counted_and_the_resume_trains_it(
        where: Where) -> None:
    data = seed(where)
    want = [data[f"d/{i:02d}"] for i in range(COUNT)]
    # The 4th sample (the last of batch 2) fails: only batch 1 reached the loop.
    ds = stream_of(where, order=Order(shuffle=False, batch_size=2), transform=Refuses(4))
    loader = torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=list)
    trained: list[bytes] = []
    with pytest.raises(ValueError, match="bad sample at call 4"):
        for batch in loader:
            trained += batch
    assert trained == want[:2]
    state = ds.state_dict()  # as a save in an ``except`` would take it
    assert state["samples"] == 2  # batch 2 was never handed to the loop
    resumed = stream_of(where, order=Order(shuffle=False, batch_size=2), transform=bytes)
    resumed.load_state_dict(state)
    rest = [s for batch in torch.utils.data.DataLoader(resumed, batch_size=2, collate_fn=list)
            for s in batch]
    assert trained + rest == want  # every sample once: none skipped


def test_an_error_stops_the_downloads_before_it_reaches_the_caller(where: Where) -> None:
    seed(where)
    ds = stream_of(where, order=Order(shuffle=False, batch_size=1), prefetch=2,
                   transform=Refuses(2))
    downloader = ds._source.downloader
    plain = downloader.stream
    closed: list[int] = []

    def watched(objects: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async def run() -> AsyncIterator[Any]:
            try:
                async for item in plain(objects, **kwargs):
                    yield item
            finally:
                closed.append(len(objects))  # the download stream ended (closed)
        return run()

    downloader.stream = watched  # type: ignore[method-assign,assignment]
    with pytest.raises(ValueError, match="bad sample") as caught:
        list(ds)
    # The exception (its traceback, and through it the iterator's frame) is
    # still held here: the downloads in flight were stopped all the same.
    assert caught.value is not None
    assert closed == [COUNT]


def test_a_rank_outside_the_world_names_the_dataset() -> None:
    objects = [ObjectInfo("bucket", "x", 1, 1, scheme="file")]
    with pytest.raises(InvalidArgument,
                       match=r"^ObjectIterableDataset: rank 2 outside world size 2"):
        ObjectIterableDataset(objects, order=Order(rank=2, world_size=2))


# torchdata 0.11 touches torch.set_vital at import, which torch 2.13 deprecates.
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_a_workers_state_at_another_global_batch_size_is_refused(where: Where) -> None:
    # StatefulDataLoader hands each worker its own saved place, counted in
    # global batches of the size it was saved at; on one rank instead of two
    # (half the global batch) that count pointed into another part of the
    # order, and the workers repeated samples in silence.
    from torchdata.stateful_dataloader import StatefulDataLoader

    seed(where)

    def loader(world: int) -> StatefulDataLoader[Any]:
        ds = stream_of(where, order=Order(shuffle=False, batch_size=2, rank=0, world_size=world),
                       transform=bytes)
        return StatefulDataLoader(ds, batch_size=2, num_workers=2, collate_fn=list,
                                  multiprocessing_context="fork")

    first = loader(2)
    it = iter(first)
    taken = [next(it) for _ in range(2)]
    saved = first.state_dict()
    del it
    assert len(taken) == 2
    same = loader(2)
    same.load_state_dict(saved)
    assert len(list(same)) == 1  # 3 global batches of 4 (10 + 2 padding): 1 left
    other = loader(1)
    other.load_state_dict(saved)
    with pytest.raises(InvalidArgument, match="global batch size 4, and this one's is 2"):
        list(other)


def _map_loader(where: Where, kind: str, transform: Any) -> tuple[Any, Any]:
    ds = ObjectMapDataset.from_prefix(where.url("d/"), transform=transform,
                                      settings=where.settings())
    if kind == "batch_sampler":
        owner: Any = ResumableBatchSampler(ds, order=Order(batch_size=2, shuffle=False))
        return owner, torch.utils.data.DataLoader(ds, batch_sampler=owner, collate_fn=list)
    owner = ResumableSampler(ds, order=Order(batch_size=2, shuffle=False))
    return owner, torch.utils.data.DataLoader(ds, sampler=owner, batch_size=2, collate_fn=list)


@pytest.mark.parametrize("kind", ["batch_sampler", "sampler"])
def test_a_batch_whose_read_failed_is_not_counted_by_the_sampler(where: Where,
                                                                 kind: str) -> None:
    # With num_workers=0 the sampler counted a batch as consumed when it
    # handed out its indices; the DataLoader then read it, and a transform
    # (or a download) that failed there left the batch counted: a state
    # saved in an ``except`` pointed past it, and the resume skipped it.
    data = seed(where)
    want = [data[f"d/{i:02d}"] for i in range(COUNT)]
    owner, loader = _map_loader(where, kind, Refuses(4))  # the last sample of batch 2
    trained: list[bytes] = []
    with pytest.raises(ValueError, match="bad sample at call 4"):
        for batch in loader:
            trained += batch
    assert trained == want[:2]
    state = owner.state_dict()
    assert state["samples"] == 2  # batch 2 never reached the loop
    resumed, again = _map_loader(where, kind, bytes)
    resumed.load_state_dict(state)
    rest = [s for batch in again for s in batch]
    assert trained + rest == want  # every sample once: none skipped
    # A loop that skips a batch it could not read and goes on counts it
    # once it takes the next: a resume then repeats nothing.
    owner, loader = _map_loader(where, kind, Refuses(4))
    it = iter(loader)
    assert next(it) == want[:2]
    with pytest.raises(ValueError, match="bad sample"):
        next(it)
    assert owner.state_dict()["samples"] == 2
    assert next(it) == want[4:6]
    assert owner.state_dict()["samples"] == 6


@pytest.mark.parametrize("how", ["item", "batch", "stream", "worker"])
def test_a_transform_error_names_the_object_it_was_given(where: Where, how: str) -> None:
    # A decoder's own error ("cannot identify image file <_io.BytesIO ...>")
    # names no object: among a million, the one to look at was unknown.
    seed(where)
    bad = f"{where.url('d/03')}"

    def refuses_03(data: bytes | bytearray) -> bytes:
        if data[0] == 3:
            raise ValueError("not an image")
        return bytes(data)

    if how == "item":
        ds: Any = ObjectMapDataset.from_prefix(where.url("d/"), transform=refuses_03,
                                               settings=where.settings())
        run = lambda: ds[3]  # noqa: E731
    elif how == "batch":
        ds = ObjectMapDataset.from_prefix(where.url("d/"), transform=refuses_03,
                                          settings=where.settings())
        run = lambda: ds.__getitems__([1, 2, 3, 4])  # noqa: E731
    else:
        ds = stream_of(where, transform=refuses_03)
        loader = torch.utils.data.DataLoader(ds, batch_size=1, collate_fn=list,
                                             num_workers=1 if how == "worker" else 0,
                                             multiprocessing_context="fork"
                                             if how == "worker" else None)
        run = lambda: list(loader)  # noqa: E731
    with pytest.raises(ValueError) as caught:
        run()
    # The transform's own exception (its type, for an ``except`` of it), noted.
    text = "".join(traceback.format_exception(caught.value))
    assert "not an image" in text
    assert f"the transform raised this on {bad}" in text, text
