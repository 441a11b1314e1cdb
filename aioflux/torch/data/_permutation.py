"""Keyed pseudo-random permutations of ``[0, n)``, computed a position at a time.

A position's element is computed when it is asked for, from a 64-bit key
and ``n`` alone, so an order holds no memory per sample (an array of every
sample's number would take 8 bytes a sample in every process that iterates,
8 GB at 1e9 samples) and costs nothing to set up.

The permutation is a Feistel network over the ``k``-bit numbers, ``2**k``
the smallest power of two at least ``n`` (under ``2n``): the number is cut
into a high half of ``k // 2`` bits and a low half of the rest, and each
round XORs one half with a keyed hash of the other, in turn. Each round is
its own inverse whatever the hash, so the network is a bijection of the
``k``-bit numbers for any key; run backwards it is the inverse. A result at
``n`` or more is permuted again until it falls in ``[0, n)`` (*cycle
walking*): that follows the element's cycle to the next member inside the
domain, a bijection of ``[0, n)``, in fewer than 2 passes on average since
``2**k < 2n``. TensorFlow's ``index_shuffle`` (which Grain's global shuffle
uses) is built the same way.

Every function has a scalar twin on Python ints (one position in a few
microseconds, where numpy's per-call cost would take a hundred) and a
numpy twin over ``uint64`` arrays, with the domain and key given per element
or once (a block of 64K positions at a time, tens of millions a second).
The two compute the same numbers (``tests/torch/data/test_permutation.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias, overload

import numpy as np
import numpy.typing as npt

__all__ = ["BLOCK", "LazyOrder", "Permutation", "order_key", "pair_key", "pair_keys",
           "permute", "permute_one", "sub_key", "unit_key", "unit_keys"]

U64: TypeAlias = npt.NDArray[np.uint64]
I64: TypeAlias = npt.NDArray[np.int64]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_PAIR = 0xD6E8FEB86659FD93  # odd, unrelated to _GOLDEN
# The round hash's multipliers (murmur3's finaliser).
_M1, _M2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
# Rounds by the domain's bits: 4 (each half rewritten twice, Luby and
# Rackoff's bound for a strong pseudo-random permutation) from 13 bits up,
# more below, where a half of a few bits takes more rounds to reach every
# pair (pi(x), pi(y)) about as often. Chi-squared per degree of freedom of
# those pairs over 40,000 keys (1 is chance): 12 elements, 15 at 4 rounds,
# 1.6 at 6; 64 elements, 1.12 at 4 (5 sigma), 0.97 at 6; 5 elements, 58 at
# 6, 1.9 at 12.
_ROUNDS_BY_BITS = ((5, 12), (12, 6), (64, 4))
_MOST_ROUNDS = 12
_ROUND_KEYS = [((r + 1) * _GOLDEN) & _MASK for r in range(_MOST_ROUNDS)]
#: Positions computed at once by the numpy twins' callers (a few MiB of temporaries).
BLOCK = 1 << 16


def _mix(z: int) -> int:
    """splitmix64's finaliser: a 64-bit bijection whose every output bit
    depends on every input bit."""
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & _MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _mix_np(z: U64) -> U64:
    z = z ^ (z >> np.uint64(30))
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def order_key(label: str, seed: int, epoch: int) -> int:
    """The 64-bit key of an epoch's order: a hash of ``(label, seed, epoch)``."""
    digest = hashlib.sha256(f"{label}:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def sub_key(key: int, level: int) -> int:
    """An independent key for one level (shards, windows, reads) of an order."""
    return _mix((key ^ (level * 0xD1B54A32D192ED03)) & _MASK)


def unit_key(key: int, unit: int) -> int:
    """The key of one unit (a window, a shard, a read) under a level's key."""
    return _mix((key + unit * _GOLDEN) & _MASK)


def unit_keys(key: int, units: npt.NDArray[np.integer]) -> U64:
    """:func:`unit_key` of each of ``units``."""
    z = units.astype(np.uint64) * np.uint64(_GOLDEN)
    z += np.uint64(key)
    return _mix_np(z)


def pair_key(key: int, unit: int, sub: int) -> int:
    """The key of unit ``sub`` of unit ``unit`` (a shard's read) under a level's key."""
    return _mix((key + unit * _GOLDEN + sub * _PAIR) & _MASK)


def pair_keys(key: int, units: npt.NDArray[np.integer], subs: npt.NDArray[np.integer]) -> U64:
    """:func:`pair_key` of each of ``units`` and ``subs``, element by element."""
    z = units.astype(np.uint64) * np.uint64(_GOLDEN)
    z += subs.astype(np.uint64) * np.uint64(_PAIR)
    z += np.uint64(key)
    return _mix_np(z)


_ROUNDS_OF = [next(rounds for most, rounds in _ROUNDS_BY_BITS if bits <= most)
              for bits in range(65)]


def _halves(n: int) -> tuple[int, int, int]:
    """Bits of the high and the low half of the domain of ``[0, n)``, and its rounds."""
    bits = (n - 1).bit_length() if n > 1 else 0
    return bits // 2, bits - bits // 2, _ROUNDS_OF[bits]


# Per bits of the domain: the low half's bits, the halves' masks, the
# second multiplier cut to each half's bits (below), and the round keys in
# pairs, forward and inverse. A position's network looks its shape up once
# instead of working it out (and its loop's conditions) anew.
_Shape: TypeAlias = tuple[int, int, int, int, int, tuple[tuple[int, int], ...],
                          tuple[tuple[int, int], ...]]


def _shape(bits: int) -> _Shape:
    high, low, rounds = bits // 2, bits - bits // 2, _ROUNDS_OF[bits]
    forward = tuple((_ROUND_KEYS[r], _ROUND_KEYS[r + 1]) for r in range(0, rounds, 2))
    inverse = tuple((_ROUND_KEYS[r + 1], _ROUND_KEYS[r]) for r in range(rounds - 2, -1, -2))
    return (low, (1 << high) - 1, (1 << low) - 1, _M2 & ((1 << (32 + high)) - 1),
            _M2 & ((1 << (32 + low)) - 1), forward, inverse)


_SHAPES = [_shape(bits) for bits in range(65)]


def _network(x: int, shape: _Shape, key: int, inverse: bool) -> int:
    # Unrolled by pairs of rounds: a single position is Python arithmetic,
    # a few dozen nanoseconds an operation. A round's hash keeps bits 32 to
    # 32 + h of its second product (h, a half's bits, at most 32), which
    # depend only on the factors' bits below 32 + h: the product is not cut
    # to 64 bits, and the multiplier is cut to 32 + h (a smaller int, a
    # quicker product), and the bits kept are the same.
    low, mask_high, mask_low, m2_high, m2_low, forward, backward = shape
    left, right = x >> low, x & mask_low
    if inverse:
        for a, b in backward:
            z = ((left ^ key ^ a) * _M1) & _MASK
            right ^= (((z ^ (z >> 32)) * m2_low) >> 32) & mask_low
            z = ((right ^ key ^ b) * _M1) & _MASK
            left ^= (((z ^ (z >> 32)) * m2_high) >> 32) & mask_high
    else:
        for a, b in forward:
            z = ((right ^ key ^ a) * _M1) & _MASK
            left ^= (((z ^ (z >> 32)) * m2_high) >> 32) & mask_high
            z = ((left ^ key ^ b) * _M1) & _MASK
            right ^= (((z ^ (z >> 32)) * m2_low) >> 32) & mask_low
    return (left << low) | right


def permute_one(x: int, n: int, key: int, inverse: bool = False) -> int:
    """Where the permutation keyed by ``key`` takes ``0 <= x < n`` (or, with
    ``inverse``, what it takes there)."""
    if n <= 1:
        return x  # the one permutation of [0, 1): no network to run
    shape = _SHAPES[(n - 1).bit_length()]
    x = _network(x, shape, key, inverse)
    while x >= n:
        x = _network(x, shape, key, inverse)
    return x


def _network_np(x: U64, high: Any, low: Any, rounds: Any, key: Any, inverse: bool) -> U64:
    """The network over numpy: ``high``, ``low``, ``rounds`` and ``key`` each
    a ``uint64`` scalar or an array of one per element."""
    one = np.uint64(1)
    mask_high, mask_low = (one << high) - one, (one << low) - one
    left, right = x >> low, x & mask_low
    most = int(rounds.max()) if isinstance(rounds, np.ndarray) and rounds.size else int(rounds)
    for r in (range(most - 1, -1, -1) if inverse else range(most)):
        mask = mask_high if r % 2 == 0 else mask_low
        if isinstance(rounds, np.ndarray):
            # An element with fewer rounds than the most in the block skips this one.
            mask = np.where(rounds > r, mask, np.uint64(0))
        # A scalar key and round key fold into one scalar before the array op.
        z = (right if r % 2 == 0 else left) ^ (key ^ np.uint64(_ROUND_KEYS[r]))
        z *= np.uint64(_M1)
        z ^= z >> np.uint64(32)
        z *= np.uint64(_M2)
        z >>= np.uint64(32)
        z &= mask
        if r % 2 == 0:
            left ^= z
        else:
            right ^= z
    out: U64 = (left << low) | right
    return out


def _halves_np(n: U64) -> tuple[U64, U64, U64]:
    # Exact for n < 2**53 (a float's mantissa): counts of samples, reads, shards.
    bits = np.frexp((np.maximum(n, np.uint64(1)) - np.uint64(1)).astype(np.float64))[1]
    high = (bits // 2).astype(np.uint64)
    rounds = np.full(bits.shape, _ROUNDS_BY_BITS[-1][1], dtype=np.uint64)
    for most, count in reversed(_ROUNDS_BY_BITS[:-1]):
        rounds[bits <= most] = count
    return high, bits.astype(np.uint64) - high, rounds


def permute(x: npt.NDArray[np.integer], n: int | npt.NDArray[np.integer],
            key: int | U64, inverse: bool = False) -> I64:
    """:func:`permute_one` of each of ``x``, vectorised.

    Args:
        x: positions, each in ``[0, n)``.
        n: the domain: one, or one per position.
        key: the key: one, or one per position.
        inverse: the inverse permutation.

    Returns:
        The permuted positions (int64).
    """
    # Views, not copies: positions are never negative, and the network makes
    # new arrays (only its own output is written to).
    y = np.asarray(x).astype(np.int64, copy=False).view(np.uint64)
    shape: list[Any]
    if isinstance(n, np.ndarray) and n.size and n.min() == n.max():
        n = int(n.flat[0])  # one domain: its masks and rounds are scalars, no np.where
    if isinstance(n, np.ndarray):
        size = n.astype(np.uint64)
        shape = [size, *_halves_np(size)]
    else:
        shape = [np.uint64(n), *(np.uint64(v) for v in _halves(n))]
    shape.append(key if isinstance(key, np.ndarray) else np.uint64(key))
    y = _network_np(y, shape[1], shape[2], shape[3], shape[4], inverse)
    # Cycle walking: only the positions still outside [0, n) go round again.
    todo = np.flatnonzero(y >= shape[0])
    while todo.size:
        sub = [v[todo] if isinstance(v, np.ndarray) else v for v in shape]
        again = _network_np(y[todo], sub[1], sub[2], sub[3], sub[4], inverse)
        y[todo] = again
        todo = todo[again >= sub[0]]
    return y.view(np.int64)


class LazyOrder(Sequence[int]):
    """An order of ``len(self)`` numbers, each computed when asked for.

    Subclasses give :meth:`at` (a numpy block of positions) and :meth:`one`
    (one position, in pure Python); a slice or an iteration goes through
    :meth:`at` a block at a time.
    """

    _count: int

    def __len__(self) -> int:
        return self._count

    def at(self, positions: npt.NDArray[np.integer]) -> I64:
        """The numbers at ``positions`` (each in ``[0, len(self))``)."""
        raise NotImplementedError

    def one(self, position: int) -> int:
        """The number at ``0 <= position < len(self)``."""
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            picked = range(self._count)[i]
            out: list[int] = []
            for lo in range(0, len(picked), BLOCK):
                part = picked[lo:lo + BLOCK]
                out.extend(self.at(np.arange(part.start, part.stop, part.step)).tolist())
            return out
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(f"position {i} of an order of {self._count}")
        return self.one(i)

    def __iter__(self) -> Iterator[int]:
        for lo in range(0, self._count, BLOCK):
            yield from self.at(np.arange(lo, min(self._count, lo + BLOCK))).tolist()


class Permutation(LazyOrder):
    """``[0, count)`` permuted by ``key`` (None: in order).

    An order of at most :data:`BLOCK` numbers is computed whole the first
    time it is asked for, and kept (at most 512 KiB): a permutation of a few
    numbers takes the most rounds and cycle walks, which cost a numpy call
    each, and a small order is asked for a batch at a time.

    Args:
        count: the numbers.
        key: a 64-bit key (see :func:`order_key`), or None for ``0..count-1``.
    """

    def __init__(self, count: int, key: int | None) -> None:
        self._count, self.key = count, key
        self._table: I64 | None = None

    def at(self, positions: npt.NDArray[np.integer]) -> I64:
        if self.key is None:
            return np.asarray(positions).astype(np.int64)
        if self._count <= BLOCK:
            if self._table is None:
                self._table = permute(np.arange(self._count), self._count, self.key)
            picked: I64 = self._table[positions]
            return picked
        return permute(positions, self._count, self.key)

    def one(self, position: int) -> int:
        if self.key is None:
            return position
        if self._table is not None:
            return int(self._table[position])
        return permute_one(position, self._count, self.key)
