"""order_bench: the epoch order at 1e9 samples, with no data (issue 49's targets).

``python -m perf.order_bench [--shards 100000] [--per-shard 10000]`` prints
one JSON line of figures, in one process (no emulator, no peer: an order
needs only the counts):

- ``setup_s``: a shard order's making (per epoch, per worker);
- ``held_b_per_shard``: what a made shard order holds (tracemalloc), per
  shard: every worker and rank holds one (issue 49's budget: 16);
- ``one_us``: one position's sample, the median over spread positions
  (target <= 20 us);
- ``rank_positions_per_s``: one rank of ``--world`` iterating its share of
  ``--batches`` global batches of ``--batch`` (target >= 1e6);
- ``objects_one_us`` / ``objects_positions_per_s``: the same for the
  per-object order (``IterableDataset``, the samplers);
- ``peak_mib``: tracemalloc's peak over the iteration (the order made whole
  took 8 bytes a sample: 7.6 GiB here);
- ``reference_us``: ``sum(range(1000))``, best of 5, in the same process:
  the machine's speed at the time (about 8 us on an idle x86 core under
  CPython 3.11; a shared machine's figures scale with it).

:func:`measure` is what a ``scale`` scenario calls; figures, not a timed
test (``tests/torch/data/test_shard_order_lazy.py`` checks the memory and work
proxies instead).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import timeit
import tracemalloc
from typing import Any

__all__ = ["measure"]


def _median_us(call: Any, positions: list[int]) -> float:
    times = []
    for p in positions:
        started = time.perf_counter()
        call(p)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def measure(shards: int = 100_000, per_shard: int = 10_000, samples_per_read: int = 64,
            shuffle_window: int = 8192, world: int = 8, batch: int = 256,
            batches: int = 2000) -> dict[str, Any]:
    """Figures of the shard and object orders at ``shards * per_shard`` samples."""
    from aioflux.torch.data._order import epoch_order
    from aioflux.torch.data._rank_batches import RankBatches
    from aioflux.torch.data._shard_order import ShardOrder

    def make() -> ShardOrder:
        return ShardOrder([per_shard] * shards, seed=1, epoch=1, shuffle=True,
                          samples_per_read=samples_per_read, shuffle_window=shuffle_window,
                          sequential=[False] * shards)

    total = shards * per_shard
    started = time.perf_counter()
    order = make()
    setup = time.perf_counter() - started
    del order
    # Made again under tracemalloc (which slows the making): what it keeps.
    tracemalloc.start()
    order = make()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    spread = [(k * 7_919_999_989) % total for k in range(2000)]
    order.one(spread[0])  # warm
    one = _median_us(order.one, spread)
    reference = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000
    out: dict[str, Any] = {"samples": total, "shards": shards, "setup_s": round(setup, 3),
                           "held_b_per_shard": round(held / shards, 2),
                           "one_us": round(one, 2), "reference_us": round(reference * 1e6, 1)}
    for name, lazy in (("", order), ("objects_", epoch_order(total, 1, 1, True))):
        if name:
            out["objects_one_us"] = round(_median_us(lazy.one, spread), 2)
        # A rank's share, from the middle of the epoch (a resumed job); timed
        # without tracemalloc (it traces each int a batch list holds).
        rank = RankBatches(lazy, total // 2 // (batch * world) * batch * world,
                           batch * world, world - 1, world)
        for traced in (False, True):
            if traced:
                tracemalloc.start()
            started = time.perf_counter()
            made = 0
            for share in rank:
                made += len(share)
                if made >= batches * batch:
                    break
            elapsed = time.perf_counter() - started
            if traced:
                out[f"{name}peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
                tracemalloc.stop()
            else:
                out[f"{name}rank_positions_per_s"] = round(made / elapsed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=100_000)
    parser.add_argument("--per-shard", type=int, default=10_000)
    parser.add_argument("--samples-per-read", type=int, default=64)
    parser.add_argument("--shuffle-window", type=int, default=8192)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(measure(args.shards, args.per_shard, args.samples_per_read,
                             args.shuffle_window, args.world, args.batch, args.batches)))


if __name__ == "__main__":
    main()
