"""Brace patterns expand as webdataset expands them (its ``braceexpand``), so a
``wds.WebDataset(urls)`` pattern names the same shards in ``ShardDataset``.

The expected lists are what braceexpand 0.1.7 returns for each pattern."""

from __future__ import annotations

import pytest

from aioflux import InvalidArgument
from aioflux._engines.shards import expand_braces
from aioflux._engines.shards._build import MAX_BRACE_NAMES, _count

CASES = [
    ("gs://b/train-{000000..000003}.tar",
     [f"gs://b/train-{n:06d}.tar" for n in range(4)]),
    ("s-{0..3}.tar", ["s-0.tar", "s-1.tar", "s-2.tar", "s-3.tar"]),
    # Padding: either end written with a leading zero pads both to the longer.
    ("s-{0..012}.tar", [f"s-{n:03d}.tar" for n in range(13)]),
    ("s-{1..010}.tar", [f"s-{n:03d}.tar" for n in range(1, 11)]),
    ("s-{09..11}.tar", ["s-09.tar", "s-10.tar", "s-11.tar"]),
    ("s-{3..0}", ["s-3", "s-2", "s-1", "s-0"]),
    ("s-{2..-1}", ["s-2", "s-1", "s-0", "s--1"]),
    ("s-{000..100..50}.tar", ["s-000.tar", "s-050.tar", "s-100.tar"]),
    ("s-{a..c}", ["s-a", "s-b", "s-c"]),
    ("s-{a..g..3}", ["s-a", "s-d", "s-g"]),
    ("{a,b}/{0..1}", ["a/0", "a/1", "b/0", "b/1"]),
    # Nested: each name once, in order (the innermost first gave s-a twice).
    ("s-{a,{b,c}}.tar", ["s-a.tar", "s-b.tar", "s-c.tar"]),
    ("py{2.{5..6},3.{2,3}}", ["py2.5", "py2.6", "py3.2", "py3.3"]),
    ("x{,.bak}", ["x", "x.bak"]),
    # Not an expression: the braces stay, what is inside still expands.
    ("d-{train}.tar", ["d-{train}.tar"]),
    ("d-{}.tar", ["d-{}.tar"]),
    ("d-{x{1,2}}", ["d-{x1}", "d-{x2}"]),
    # A backslash escapes the next character and is dropped.
    (r"d-\{a,b\}.tar", ["d-{a,b}.tar"]),
    (r"{a\,b,c}", ["a,b", "c"]),
    ("plain.tar", ["plain.tar"]),
]


@pytest.mark.parametrize(("pattern", "names"), CASES)
def test_patterns_expand_as_braceexpand_expands_them(pattern: str, names: list[str]) -> None:
    assert expand_braces(pattern) == names


@pytest.mark.parametrize("pattern", ["s-{0..3.tar", "s-0..3}.tar", "a{b{c,d}"])
def test_unbalanced_braces_name_one_object_as_written(pattern: str) -> None:
    # braceexpand raises; a name may hold a lone brace, so it is taken as written.
    assert expand_braces(pattern) == [pattern]


def test_a_name_without_braces_is_taken_as_written() -> None:
    assert expand_braces(r"/data/a\b.tar") == [r"/data/a\b.tar"]


@pytest.mark.parametrize(("pattern", "names"), CASES)
def test_a_pattern_is_counted_as_it_expands(pattern: str, names: list[str]) -> None:
    assert _count(pattern) == len(names)


@pytest.mark.parametrize("pattern", ["gs://b/t-{000..999999999}.tar",
                                     "t-{0..9999}-{0..9999}.tar", "t-{a,{0..99999999}}"])
def test_a_pattern_naming_too_many_shards_is_refused_before_any_is_made(pattern: str) -> None:
    # A typo of {000..999}: the list of a billion names took every GiB of
    # the machine (the kernel killed the process) before a request went out.
    with pytest.raises(InvalidArgument, match=r"the braces name [\d,]+ shards, more than"):
        expand_braces(pattern)
    assert _count(f"t-{{1..{MAX_BRACE_NAMES}}}") == MAX_BRACE_NAMES  # the most taken
