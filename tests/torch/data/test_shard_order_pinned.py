"""The shard epoch order (version 2) pinned to what it gave when it held 36
bytes a shard: saved positions resume on it, so holding less must not move
a sample. And what an order holds per shard, bounded."""

from __future__ import annotations

import hashlib
import tracemalloc

import numpy as np
import pytest

from aioflux.torch.data._shard_order import ShardOrder


def _counts(seed: int, shards: int, most: int) -> list[int]:
    # Spread sizes below ``most`` (one shard in ten empty), with no RNG
    # whose stream a numpy release could change.
    return [0 if (k * 31 + seed) % 10 == 0 else (k * 2_654_435_761 + seed * 97) % 1_000_003 % most
            for k in range(shards)]


def _digest(numbers: object) -> str:
    return hashlib.sha256(np.asarray(numbers, dtype="<i8").tobytes()).hexdigest()[:16]


# seed, epoch, shards, largest shard, samples per read, window, every n-th
# shard compressed (0: none); samples, then digests of the whole order and of
# each shard's last position, from the order before it held less.
PINNED = [
    (1, 0, 1, 1000, 10, 40, 0, 97, "e6e82403e1838e45", "a3fd08764e225228"),
    (2, 1, 50, 300, 7, 100, 0, 7625, "72a9d2f77d6a7f3a", "4baa6dc6aa21b036"),
    (3, 2, 200, 120, 16, 64, 3, 10547, "5aeef8f05ac79eff", "7f5bb1224dd9e719"),
    (4, 0, 1000, 50, 64, 8192, 0, 22100, "42e31a6fbcf374dd", "bec3dc574538ce7e"),
    (5, 3, 5000, 40, 8, 200, 7, 87653, "dbfd1728f04f3347", "85cdc094dc94e140"),
    (6, 1, 300, 5, 10, 40, 2, 536, "5b8fbc971c2c12b9", "72bb156ad61927eb"),
    (7, 7, 2000, 700, 64, 8192, 10, 629263, "22900c6ab9396576", "6830b31fb8adb4fb"),
    (8, 0, 100, 3000, 1, 5, 0, 140753, "60fa46e6bfceb3d4", "fb60ff79ecea076a"),
    (9, 4, 3000, 30, 3, 1, 1, 39148, "a6207b09f6c7f616", "3e3f37b4844a419f"),
    (10, 2, 24, 90_000, 64, 8192, 5, 918645, "bd20005bd424d1dc", "22355afdac09de94"),
]


@pytest.mark.parametrize(("seed", "epoch", "shards", "most", "read", "window", "every",
                          "samples", "order_digest", "ends_digest"), PINNED)
def test_the_order_is_the_one_it_was(seed: int, epoch: int, shards: int, most: int, read: int,
                                     window: int, every: int, samples: int, order_digest: str,
                                     ends_digest: str) -> None:
    order = ShardOrder(_counts(seed, shards, most), seed=seed, epoch=epoch, shuffle=True,
                       samples_per_read=read, shuffle_window=window,
                       sequential=[every > 0 and k % every == 0 for k in range(shards)])
    assert len(order) == samples
    got = order.at(np.arange(samples))
    assert _digest(got) == order_digest
    assert _digest(order.ends(range(shards))) == ends_digest
    # Positions asked for out of order (searched each in its own run), and one at a time.
    picks = np.arange(samples)[::max(1, samples // 500)][::-1].copy()
    np.random.default_rng(seed).shuffle(picks)
    assert order.at(picks).tolist() == got[picks].tolist()
    assert [order.one(int(p)) for p in picks[:40]] == got[picks[:40]].tolist()


def test_shards_of_billions_of_samples_keep_their_order() -> None:
    # Running sums past 2**32 within a few shards: held as int64.
    counts = [5_000_000_000, 0, 3, 4_300_000_000, 70, 2**32 + 5] + [1000] * 100
    order = ShardOrder(counts, seed=11, epoch=2, shuffle=True, samples_per_read=64,
                       shuffle_window=8192,
                       sequential=[k in (2, 4, 7) for k in range(len(counts))])
    assert len(order) == 13_595_067_374
    positions = [0, 1, 13_595_067_373, 4_531_689_124, 6_797_533_687, 5_000_000_000,
                 9_300_000_070, 9_300_000_072, 13_594_967_366]
    expected = [13_594_999_561, 13_594_999_541, 13_594_993_370, 231_651_576, 2_497_491_577,
                699_962_598, 4_999_964_587, 4_999_964_588, 13_594_879_912]
    assert [order.one(p) for p in positions] == expected
    assert order.at(np.array(positions)).tolist() == expected
    assert order.ends(range(8)) == [9_300_043_210, -1, 17_066, 4_300_022_482, 9_300_060_280,
                                    13_595_061_749, 9_300_060_480, 9_300_085_816]


@pytest.mark.parametrize("most", [1000, 20_000, 400_000])
def test_an_order_holds_at_most_16_bytes_a_shard(most: int) -> None:
    # Every DataLoader worker and rank makes one at each epoch start: at 1e6
    # shards, 36 bytes a shard were 36 MB a process, 2.3 GB on a node of 64.
    shards = 100_000
    counts = _counts(3, shards, most)
    sequential = [k % 10 == 0 for k in range(shards)]
    tracemalloc.start()
    try:
        order = ShardOrder(counts, seed=1, epoch=0, shuffle=True, samples_per_read=64,
                           shuffle_window=8192, sequential=sequential)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held <= 16 * shards + (64 << 10), held / shards
    assert order.one(len(order) - 1) == order.at(np.array([len(order) - 1]))[0]
