"""The keyed permutations under every epoch order: bijections of [0, n), the
scalar and numpy twins the same numbers, the inverse the inverse."""

from __future__ import annotations

import collections

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aioflux.torch.data._permutation import (
    Permutation,
    order_key,
    permute,
    permute_one,
    sub_key,
    unit_keys,
)

KEYS = st.integers(min_value=0, max_value=(1 << 64) - 1)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=0, max_value=3000), key=KEYS)
def test_a_permutation_of_the_domain_its_twins_and_its_inverse(n: int, key: int) -> None:
    xs = np.arange(n)
    ys = permute(xs, n, key)
    assert sorted(ys.tolist()) == list(range(n))
    assert [permute_one(x, n, key) for x in range(0, n, max(1, n // 50))] == \
        ys[::max(1, n // 50)].tolist()
    assert permute(ys, n, key, inverse=True).tolist() == xs.tolist()
    if n:
        assert permute_one(int(ys[-1]), n, key, inverse=True) == n - 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=1, max_value=1 << 40), KEYS,
                          st.integers(min_value=0, max_value=(1 << 62))),
                min_size=1, max_size=40))
def test_a_domain_and_key_per_element_are_each_element_alone(
        cases: list[tuple[int, int, int]]) -> None:
    # The shard order permutes each window's reads and each read's samples
    # in one call, each with its own domain, key and rounds.
    ns = np.array([n for n, _, _ in cases], dtype=np.int64)
    keys = np.array([k for _, k, _ in cases], dtype=np.uint64)
    xs = np.array([x % n for n, _, x in cases], dtype=np.int64)
    got = permute(xs, ns, keys)
    alone = [permute_one(int(x), int(n), int(k)) for x, n, k in zip(xs, ns, keys, strict=True)]
    assert got.tolist() == alone
    assert permute(got, ns, keys, inverse=True).tolist() == xs.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=1, max_value=(1 << 52) - 1), KEYS,
                          st.integers(min_value=0, max_value=(1 << 62))),
                min_size=1, max_size=40))
def test_one_position_s_inverse_is_the_numpy_inverse(cases: list[tuple[int, int, int]]) -> None:
    # Halves of every width (a few bits to 26: the scalar network cuts its
    # multiplier to each half's bits), run backwards.
    ns = np.array([n for n, _, _ in cases], dtype=np.int64)
    keys = np.array([k for _, k, _ in cases], dtype=np.uint64)
    xs = np.array([x % n for n, _, x in cases], dtype=np.int64)
    got = [permute_one(int(x), int(n), int(k), inverse=True)
           for x, n, k in zip(xs, ns, keys, strict=True)]
    assert got == permute(xs, ns, keys, inverse=True).tolist()
    assert [permute_one(y, int(n), int(k)) for y, n, k in zip(got, ns, keys, strict=True)] == \
        xs.tolist()


def test_one_position_is_the_versioned_order_s() -> None:
    # What permute_one gave before its network was reworked: orders are
    # versioned, and a saved position must resume on the same one.
    key = 0x0123456789ABCDEF
    cases = [(5, 64, False), (5, 64, True), (999, 1000, False), (123_456_789, 10**9, False),
             (123_456_789, 10**9, True), (0, 1, False), (0, 1, True)]
    assert [permute_one(x, n, key, inverse) for x, n, inverse in cases] == \
        [4, 33, 73, 593_338_140, 266_698_200, 0, 0]


def test_keys_differ_by_seed_epoch_level_and_unit() -> None:
    base = order_key("t", 1, 0)
    assert len({base, order_key("t", 1, 1), order_key("t", 2, 0), order_key("u", 1, 0)}) == 4
    assert len({sub_key(base, level) for level in range(8)}) == 8
    units = unit_keys(sub_key(base, 1), np.arange(10_000))
    assert len(set(units.tolist())) == 10_000


def test_small_domains_reach_every_pair_about_equally() -> None:
    # A few-bit Feistel network takes more rounds to mix: with 4 a 12-element
    # domain's pairs (pi(0), pi(1)) were far from even.
    for n in (3, 5, 12, 33):
        keys = unit_keys(7, np.arange(12_000))
        first = permute(np.zeros(len(keys), dtype=np.int64), n, keys)
        second = permute(np.ones(len(keys), dtype=np.int64), n, keys)
        counts = collections.Counter(zip(first.tolist(), second.tolist(), strict=True))
        cells = n * (n - 1)
        expected = len(keys) / cells
        chi2 = sum((counts.get((a, b), 0) - expected) ** 2 / expected
                   for a in range(n) for b in range(n) if a != b)
        assert len(counts) == cells
        assert chi2 / (cells - 1) < 3, (n, chi2 / (cells - 1))


def test_a_large_order_is_not_its_neighbour_s_order() -> None:
    n = 1_000_000
    order = Permutation(n, order_key("t", 0, 0))
    ys = order.at(np.arange(n))
    assert abs(np.corrcoef(np.arange(n), ys)[0, 1]) < 0.01
    # Neighbours in the order land far apart (as often as chance says).
    assert np.mean(np.abs(np.diff(ys)) < 1000) < 3 * 2 * 1000 / n
    assert Permutation(5, None).at(np.arange(5)).tolist() == [0, 1, 2, 3, 4]
