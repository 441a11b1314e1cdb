"""Per-batch latency of both datasets (``dataset.stats``), and hedged reads
through a dataset: against the emulator's heavy-tail knob, every sample
arrives once, with its bytes, and slow GETs are overtaken."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch.utils.data

from aioflux import DownloadOptions, InvalidArgument
from aioflux.testing import Emulator, EmulatorProfile, running_emulator
from aioflux.torch import DatasetSettings, ObjectIterableDataset, ObjectMapDataset, Order

COUNT = 96
SIZE = 40 * 1024  # above the compose threshold: direct reads, the hedged kind


def _body(i: int) -> bytes:
    return i.to_bytes(4, "big") * (SIZE // 4)


@pytest.fixture
def emu() -> Iterator[Emulator]:
    # Its own emulator: the tail knob must not reach other tests.
    with running_emulator() as emulator:
        emulator.create_bucket("batches")
        for i in range(COUNT):
            emulator.store.put("batches", f"d/{i:03d}", _body(i))
        yield emulator


def _keep(batch: list[bytes]) -> list[bytes]:
    return batch


def test_map_dataset_records_each_batch(emu: Emulator) -> None:
    emu.profile = EmulatorProfile(ttfb=0.01)
    ds = ObjectMapDataset.from_prefix("gs://batches/d",
                                      settings=DatasetSettings(endpoint=emu.endpoint))
    loader = torch.utils.data.DataLoader(ds, batch_size=32, collate_fn=_keep)
    got = [b for batch in loader for b in batch]
    assert got == [_body(i) for i in range(COUNT)]
    summary = ds.stats.summary()
    assert summary["batches"] == 3 and summary["samples"] == COUNT
    # Each batch waited for at least one 10 ms first byte.
    assert 0.01 <= summary["p50"] <= summary["p95"] <= summary["p99"] < 5.0
    ds.close()


def test_iterable_dataset_records_its_hand_offs(emu: Emulator) -> None:
    ds = ObjectIterableDataset.from_prefix("gs://batches/d",
                                           settings=DatasetSettings(endpoint=emu.endpoint),
                                           order=Order(shuffle=False), prefetch=16)
    assert sorted(bytes(b) for b in ds) == sorted(_body(i) for i in range(COUNT))
    summary = ds.stats.summary()
    # Hand-offs of min(64, prefetch) = 16 samples each.
    assert summary["batches"] == math.ceil(COUNT / 16) and summary["samples"] == COUNT
    ds.close()


def test_hedged_map_dataset_overtakes_the_tail_and_counts_once(emu: Emulator) -> None:
    emu.profile = EmulatorProfile(ttfb=0.005, tail_fraction=0.05, tail_delay=(1.5, 1.5),
                                  tail_seed=3)
    options = DownloadOptions(hedge_after=0.1, hedge_budget=0.5)
    ds = ObjectMapDataset.from_prefix(
        "gs://batches/d",
        settings=DatasetSettings(endpoint=emu.endpoint, download_options=options))
    loader = torch.utils.data.DataLoader(ds, batch_size=32, collate_fn=_keep)
    got = [b for batch in loader for b in batch]
    assert got == [_body(i) for i in range(COUNT)]  # every sample once, bytes intact
    stats = ds.download_stats
    assert stats.direct == COUNT and stats.bytes == COUNT * SIZE
    assert stats.hedge.sent >= 1 and stats.hedge.won >= 1
    # Each read reached the server once, and each hedge that won; a hedge
    # cancelled on its way there (its read answered first) never did: 98
    # GETs for 96 reads and 12 hedges, 2 of which won, on a busy machine.
    assert COUNT + stats.hedge.won <= emu.stats["get_media"] <= COUNT + stats.hedge.sent
    assert ds.stats.samples == COUNT
    ds.close()


def test_hedge_after_keyword_on_both_datasets(emu: Emulator) -> None:
    # The datasets' own keyword: the default 5% budget of 96 reads allows a
    # few duplicates, enough to overtake the tail's 1.5 s reads.
    emu.profile = EmulatorProfile(ttfb=0.005, tail_fraction=0.03, tail_delay=(1.5, 1.5),
                                  tail_seed=3)
    ds = ObjectMapDataset.from_prefix("gs://batches/d",
                                      settings=DatasetSettings(endpoint=emu.endpoint,
                                                               hedge_after=0.1))
    loader = torch.utils.data.DataLoader(ds, batch_size=32, collate_fn=_keep)
    assert [b for batch in loader for b in batch] == [_body(i) for i in range(COUNT)]
    assert ds.download_stats.hedge.sent >= 1
    ds.close()
    it = ObjectIterableDataset.from_prefix("gs://batches/d",
                                           settings=DatasetSettings(endpoint=emu.endpoint,
                                                                    hedge_after="auto"),
                                           order=Order(shuffle=False))
    assert sorted(bytes(b) for b in it) == sorted(_body(i) for i in range(COUNT))
    it.close()
    for bad in (0, -1.0, "fast", float("nan")):
        with pytest.raises(InvalidArgument, match="hedge_after"):
            ObjectMapDataset([],
                             settings=DatasetSettings(hedge_after=bad))  # type: ignore[arg-type]
