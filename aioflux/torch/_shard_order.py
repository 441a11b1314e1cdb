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

The samples are permuted with numpy (one sort over the epoch), not one
Python call per sample: at 100,000 samples ``random.shuffle`` alone took
a third of a warm epoch's CPU in the main process.
"""

from __future__ import annotations

import array
import hashlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from .._engines.shards import Run, ShardIndex, ShardsDone

if TYPE_CHECKING:
    import numpy as np

__all__ = ["iter_runs", "last_positions", "runs_of", "shard_epoch_order", "shards_fingerprint"]


def shard_epoch_order(counts: Sequence[int], *, seed: int, epoch: int, shuffle: bool,
                      samples_per_read: int, shuffle_window: int,
                      sequential: Sequence[bool]) -> array.array[int]:
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
        Sample numbers in epoch order, 8 bytes each (a list took about 36 a
        sample, in every DataLoader worker).
    """
    starts = [0]
    for count in counts:
        starts.append(starts[-1] + count)
    total = starts[-1]
    order = array.array("q")
    if not shuffle:
        order.extend(range(total))
        return order
    import numpy as np  # imported where used: aioflux.torch imports without it

    rng = _rng(seed, epoch)
    shards = rng.permutation(len(counts)).tolist()
    reads = [(s, a) for s in shards for a in range(0, counts[s], samples_per_read)]
    per_window = max(1, shuffle_window // samples_per_read)
    for w0 in range(0, len(reads), per_window):
        chunk = reads[w0:w0 + per_window]
        chunk = [chunk[i] for i in rng.permutation(len(chunk)).tolist()]
        _keep_ascending(chunk, sequential)
        reads[w0:w0 + per_window] = chunk
    if not reads:
        return order
    firsts = np.array([starts[s] + a for s, a in reads], dtype=np.int64)
    sizes = np.array([min(counts[s] - a, samples_per_read) for s, a in reads], dtype=np.int64)
    # Sample j of the epoch belongs to read read_of[j]; within a read the
    # samples are ordered by a random key, so each read is permuted alone.
    read_of = np.repeat(np.arange(len(reads)), sizes)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    ids = np.repeat(firsts, sizes) + offsets
    order.frombytes(ids[np.lexsort((rng.random(total), read_of))].data.cast("B"))
    return order


def _rng(seed: int, epoch: int) -> np.random.Generator:
    import numpy as np

    digest = hashlib.sha256(f"aioflux-shards:{seed}:{epoch}".encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "little")))


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
    """Cut samples into runs: consecutive samples of one read.

    Args:
        samples: sample numbers, in the order wanted.
        starts: each shard's first sample number (the total last).
        samples_per_read: samples per read.

    Returns:
        The runs, in order.
    """
    return [run for run in iter_runs([samples], starts, samples_per_read)
            if isinstance(run, Run)]  # no markers among plain samples


def iter_runs(chunks: Iterable[Sequence[int] | ShardsDone], starts: Sequence[int],
              samples_per_read: int) -> Iterator[Run | ShardsDone]:
    """:func:`runs_of` over ``chunks`` joined, cut a chunk at a time.

    A worker's samples of an epoch, made whole before its first read, took
    90 to 190 bytes a sample in every DataLoader worker (a list of ints,
    its runs' tuples); a chunk at a time they take a chunk's. A run that
    goes on past the end of a chunk is held until the next one shows
    whether it goes on there, so the runs are the very same.

    Args:
        chunks: sample numbers, in the order wanted, a few at a time, and
            :class:`ShardsDone` markers between them (passed on after the
            runs before them).
        starts: each shard's first sample number (the total last).
        samples_per_read: samples per read.

    Yields:
        The runs, in order, and the markers.
    """
    import numpy as np

    firsts = np.asarray(starts, dtype=np.int64)
    held: tuple[int, int, list[int]] | None = None  # shard, read, samples of the open run
    for chunk in chunks:
        if isinstance(chunk, ShardsDone):
            # A run held open is of a shard with samples to come, or it ends here.
            if held is not None and held[0] in chunk.shards:
                yield Run(held[0], tuple(held[2]))
                held = None
            yield chunk
            continue
        if not len(chunk):
            continue
        numbers = np.asarray(chunk, dtype=np.int64)
        shard = np.searchsorted(firsts, numbers, side="right") - 1
        local = numbers - firsts[shard]
        read = local // samples_per_read
        cuts = np.flatnonzero((shard[1:] != shard[:-1]) | (read[1:] != read[:-1])) + 1
        bounds = [0, *cuts.tolist(), len(numbers)]
        shards, locals_, reads = shard.tolist(), local.tolist(), read.tolist()
        for a, b in itertools.pairwise(bounds):
            if held is not None and held[:2] == (shards[a], reads[a]):
                held[2].extend(locals_[a:b])  # the open run goes on in this chunk
                continue
            if held is not None:
                yield Run(held[0], tuple(held[2]))
            held = (shards[a], reads[a], locals_[a:b])
    if held is not None:
        yield Run(held[0], tuple(held[2]))


def last_positions(order: array.array[int], starts: Sequence[int]) -> list[int]:
    """Where each shard's last sample is in ``order`` (-1: a shard with none).

    Args:
        order: an epoch order (sample numbers).
        starts: each shard's first sample number (the total last).

    Returns:
        Per shard, a position in ``order``.
    """
    import numpy as np

    firsts = np.asarray(starts, dtype=np.int64)
    last = np.full(len(starts) - 1, -1, dtype=np.int64)
    numbers = np.frombuffer(order, dtype=np.int64) if len(order) else np.empty(0, np.int64)
    step = 1 << 20  # a piece at a time: the positions of a whole epoch took 8 bytes a sample
    for at in range(0, len(numbers), step):
        shard = np.searchsorted(firsts, numbers[at:at + step], side="right") - 1
        # The last occurrence of each shard in this piece (later pieces overwrite).
        found, first_from_end = np.unique(shard[::-1], return_index=True)
        last[found] = at + len(shard) - 1 - first_from_end
    return [int(x) for x in last.tolist()]


def shards_fingerprint(urls: Sequence[str], indexes: Sequence[ShardIndex]) -> str:
    """``"<samples>:<16 hex digits>"`` over the shards' URLs and sample counts.

    A saved position only means something over the same shards in the same order.
    """
    digest = hashlib.sha256()
    for url, index in zip(urls, indexes, strict=True):
        digest.update(f"{url}\n{len(index)}\n".encode("utf-8", "surrogatepass"))
    return f"{sum(map(len, indexes))}:{digest.hexdigest()[:16]}"
