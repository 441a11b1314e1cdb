"""The epoch order of a sharded dataset: a pure function of (seed, epoch) and the shards.

Samples are numbered across the shards in list order (shard ``i``'s sample
``k`` is ``starts[i] + k``). An epoch's order:

1. the shards, permuted;
2. each shard cut into *reads* of ``samples_per_read`` consecutive samples
   (the unit fetched with one ranged GET);
3. the reads permuted within windows of about ``shuffle_window`` samples,
   so a stretch of training mixes that many samples from several shards;
   a compressed shard's reads keep their ascending order (it is read front
   to back), taking the window positions its reads were given;
4. the samples of each read permuted among themselves.

The result is a permutation of every sample, so the global batches, rank
shares, padding and resume of :mod:`aioflux.torch._order` apply unchanged:
a position is a count of samples of this order, valid at any world size
and worker count. The shuffle costs no sample memory (reads are ranged);
the window bounds how many shards an epoch reads from at once.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Sequence

from .._engines.shards import Run, ShardIndex

__all__ = ["runs_of", "shard_epoch_order", "shards_fingerprint"]


def shard_epoch_order(counts: Sequence[int], *, seed: int, epoch: int, shuffle: bool,
                      samples_per_read: int, shuffle_window: int,
                      sequential: Sequence[bool]) -> list[int]:
    """The global order of an epoch (see the module).

    Args:
        counts: samples per shard, in list order.
        seed: base seed.
        epoch: epoch number.
        shuffle: permute (else every sample in list order).
        samples_per_read: samples per read.
        shuffle_window: samples per window of permuted reads.
        sequential: per shard, whether it must be read front to back.

    Returns:
        Sample numbers in epoch order.
    """
    starts = [0]
    for count in counts:
        starts.append(starts[-1] + count)
    if not shuffle:
        return list(range(starts[-1]))
    rng = random.Random(f"aioflux-shards:{seed}:{epoch}")
    shards = list(range(len(counts)))
    rng.shuffle(shards)
    reads = [(s, a) for s in shards for a in range(0, counts[s], samples_per_read)]
    per_window = max(1, shuffle_window // samples_per_read)
    for w0 in range(0, len(reads), per_window):
        chunk = reads[w0:w0 + per_window]
        rng.shuffle(chunk)
        _keep_ascending(chunk, sequential)
        reads[w0:w0 + per_window] = chunk
    order: list[int] = []
    for s, a in reads:
        ids = list(range(starts[s] + a, starts[s] + min(counts[s], a + samples_per_read)))
        rng.shuffle(ids)
        order.extend(ids)
    return order


def _keep_ascending(chunk: list[tuple[int, int]], sequential: Sequence[bool]) -> None:
    slots: dict[int, list[int]] = {}
    for pos, (s, _) in enumerate(chunk):
        if sequential[s]:
            slots.setdefault(s, []).append(pos)
    for s, positions in slots.items():
        firsts = sorted(chunk[p][1] for p in positions)
        for p, a in zip(positions, firsts, strict=True):
            chunk[p] = (s, a)


def runs_of(samples: Sequence[int], starts: Sequence[int], samples_per_read: int) -> list[Run]:
    """Cut a worker's samples into runs: consecutive samples of one read.

    Args:
        samples: sample numbers, in the order wanted.
        starts: each shard's first sample number (the total last).
        samples_per_read: samples per read.

    Returns:
        The runs, in order.
    """
    runs: list[Run] = []
    current: list[int] = []
    key: tuple[int, int] | None = None
    for sample in samples:
        shard = bisect.bisect_right(starts, sample) - 1
        local = sample - starts[shard]
        here = (shard, local // samples_per_read)
        if here != key and current:
            runs.append(Run(key[0], tuple(current)))  # type: ignore[index]
            current = []
        key = here
        current.append(local)
    if current:
        runs.append(Run(key[0], tuple(current)))  # type: ignore[index]
    return runs


def shards_fingerprint(urls: Sequence[str], indexes: Sequence[ShardIndex]) -> str:
    """``"<samples>:<16 hex digits>"`` over the shards' URLs and sample counts.

    A saved position only means something over the same shards in the same order.
    """
    digest = hashlib.sha256()
    for url, index in zip(urls, indexes, strict=True):
        digest.update(f"{url}\n{len(index)}\n".encode("utf-8", "surrogatepass"))
    return f"{sum(map(len, indexes))}:{digest.hexdigest()[:16]}"
