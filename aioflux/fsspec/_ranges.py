"""``cat_ranges``: byte ranges of objects, those of one object close together
read by one GET and sliced, as ``fsspec.parquet`` merges them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._core.concurrency.window import gather_bounded

__all__ = ["cat_ranges"]

# Ranges of one object closer than this are read as one, as fsspec.parquet
# merges them: a gap of 1 MiB read the skipped columns of a Parquet file too
# (perf scenario fsspec, op=ranges: 168 MB read for 101 MB of chunks).
_COALESCE_GAP = 64 * 1024

# A GET: the object's path, the range, and the indexes of the ranges asked
# for that it covers.
_Span = tuple[str, int, int | None, list[int]]


def _spans(paths: Sequence[str], starts: list[int], ends: list[int], gap: int) -> list[_Span]:
    """The GETs of the ranges: of one object, sorted, merged where they are
    close; a range with an open or negative bound alone."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(paths):
        groups.setdefault(p, []).append(i)
    spans: list[_Span] = []
    for path, idx in groups.items():
        if any(starts[i] is None or starts[i] < 0 or ends[i] is None or ends[i] < 0
               for i in idx):
            spans.extend((path, starts[i], ends[i], [i]) for i in idx)
            continue
        idx.sort(key=lambda i: starts[i])
        for i in idx:
            last = spans[-1] if spans else None
            if last is not None and last[0] == path and last[2] is not None \
                    and starts[i] <= last[2] + gap:
                spans[-1] = (path, last[1], max(last[2], ends[i]), [*last[3], i])
            else:
                spans.append((path, starts[i], ends[i], [i]))
    return spans


async def cat_ranges(cat_file: Callable[[str, int, int | None], Awaitable[bytes]],
                     paths: Sequence[str], starts: Sequence[int] | int,
                     ends: Sequence[int] | int, *, gap: int | None, limit: int,
                     on_error: str) -> list[Any]:
    """The bytes of each range (fsspec's ``cat_ranges``).

    Args:
        cat_file: reads one range of one object (fsspec's ``_cat_file``).
        paths: the objects' paths, protocols stripped.
        starts: where each range starts (one for all, or one each).
        ends: where each range ends.
        gap: ranges of one object at most this far apart are read as one;
            None: 64 KiB.
        limit: GETs at once.
        on_error: ``"return"``: a failed range's exception in its place;
            else it is raised.

    Returns:
        The bytes of each range, in order (or its exception).

    Raises:
        ValueError: paths, starts and ends differ in length.
    """
    count = len(paths)
    starts = [starts] * count if isinstance(starts, int) else list(starts)
    ends = [ends] * count if isinstance(ends, int) else list(ends)
    if len(starts) != count or len(ends) != count:
        raise ValueError("cat_ranges: paths, starts and ends differ in length")
    out: list[Any] = [None] * count

    async def one(span: _Span) -> None:
        path, lo, hi, idx = span
        try:
            data = await cat_file(path, lo, hi)
        except Exception as exc:
            if on_error != "return":
                raise
            for i in idx:
                out[i] = exc
            return
        if len(idx) == 1:  # the span is the range (its end may be None)
            out[idx[0]] = data
            return
        for i in idx:
            out[i] = data[starts[i] - lo:ends[i] - lo]

    spans = _spans(paths, starts, ends, _COALESCE_GAP if gap is None else gap)
    await gather_bounded((one(s) for s in spans), limit)
    return out
