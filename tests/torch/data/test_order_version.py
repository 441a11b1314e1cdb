"""A position is a count of samples of one epoch order, so a state names its
order's version: one saved inside an epoch of another version is refused,
naming both, never resumed at another place; one at an epoch's start (or of
an order in list order, the same under every version) is taken."""

from __future__ import annotations

import pytest

from aioflux import InvalidArgument
from aioflux.torch import Order, ResumableBatchSampler
from aioflux.torch.data._order import ORDER_VERSION, epoch_order

COUNT, BATCH = 40, 4


def _sampler(shuffle: bool = True) -> ResumableBatchSampler:
    return ResumableBatchSampler(list(range(COUNT)),
                                 order=Order(batch_size=BATCH, seed=1, shuffle=shuffle, rank=0,
                                             world_size=1))


def _version_1(samples: int, epoch: int = 0, **more: object) -> dict[str, object]:
    # What aioflux saved before the order had versions: no "/order-v" in the
    # fingerprint ("<count>:" for a dataset known by its length).
    return {"epoch": epoch, "seed": 1, "samples": samples, "global_batch_size": BATCH,
            "fingerprint": f"{COUNT}:", **more}


def test_a_state_names_the_order_version_and_resumes_exactly() -> None:
    first = _sampler()
    batches = iter(first)
    seen = [i for _ in range(3) for i in next(batches)]
    state = first.state_dict()
    assert state["fingerprint"] == f"{COUNT}:/order-v{ORDER_VERSION}" and ORDER_VERSION == 2
    assert state["samples"] == 12
    resumed = _sampler()
    resumed.load_state_dict(state)
    rest = [i for batch in resumed for i in batch]
    assert seen + rest == list(epoch_order(COUNT, 1, 0, True))


@pytest.mark.parametrize("state", [
    _version_1(8),
    _version_1(0, worker={"id": 0, "num_workers": 2, "epoch": 0, "start": 0,
                          "next_batch": 3}),
    {**_version_1(8), "fingerprint": f"{COUNT}:/order-v3"},
])
def test_a_place_inside_an_epoch_of_another_order_is_refused(state: dict[str, object]) -> None:
    sampler = _sampler()
    version = str(state["fingerprint"]).rpartition("/order-v")[2] if "/order-v" in str(
        state["fingerprint"]) else "1"
    with pytest.raises(InvalidArgument, match=f"epoch order version {version}, and this "
                                              f"aioflux orders epochs by version 2"):
        sampler.load_state_dict(state)
    # Nothing was taken: the sampler still starts epoch 0 from its first sample.
    assert sampler.state_dict()["samples"] == 0 and len(sampler) == COUNT // BATCH


def test_an_epoch_s_start_of_another_order_is_taken() -> None:
    sampler = _sampler()
    sampler.load_state_dict(_version_1(0, epoch=3))
    assert sampler.epoch == 3
    got = [i for batch in sampler for i in batch]
    assert got == list(epoch_order(COUNT, 1, 3, True))


def test_an_order_in_list_order_is_the_same_under_every_version() -> None:
    sampler = _sampler(shuffle=False)
    sampler.load_state_dict(_version_1(8))
    assert [i for batch in sampler for i in batch] == list(range(8, COUNT))


def test_another_object_list_is_named_as_such_whatever_the_version() -> None:
    with pytest.raises(InvalidArgument, match="another object list"):
        _sampler().load_state_dict({**_version_1(8), "fingerprint": "41:"})
