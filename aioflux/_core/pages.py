"""What every page of a listing must be, whatever the server answered.

A store lists names in ascending order, each once, all under the prefix and
inside the offsets asked. The parallel lister splits key ranges on that
promise, and ``rm -r``, ``clean``, ``cp`` and the datasets act on what a
listing returns. A server or proxy that broke it would make a listing skip
or repeat names, or hand back names the caller never asked for (which
``aioflux rm -r s3://bucket/tmp/`` would then delete). So each page is
checked before anyone sees it, and a page that breaks the promise is a
:class:`ProtocolError` naming the listing, never a silently wrong listing.
"""

from __future__ import annotations

import operator
from itertools import islice

from .errors import ProtocolError, describe
from .types import ListPage

__all__ = ["ListingCheck"]

# Names in messages are the server's: cut them short.
_SHOWN = 80


class ListingCheck:
    """Checks the pages of one listing call, in order.

    Args:
        scheme: the store's URL scheme, for messages.
        bucket: the bucket listed.
        prefix: every name and prefix must start with this.
        start_offset: no name below this.
        end_offset: no name at or past this.
        ordered: whether the store lists in name order (S3's directory
            buckets do not: there only the prefix and offsets are checked).
    """

    __slots__ = ("_bucket", "_end", "_last", "_ordered", "_prefix", "_scheme", "_start")

    def __init__(self, scheme: str, bucket: str, prefix: str, start_offset: str | None,
                 end_offset: str | None, *, ordered: bool = True) -> None:
        self._scheme = scheme
        self._ordered = ordered
        self._bucket = bucket
        self._prefix = prefix
        self._start = start_offset
        self._end = end_offset
        self._last: str | None = None  # the last name of the pages so far

    def page(self, page: ListPage) -> ListPage:
        """``page``, once its names keep the promise.

        Raises:
            ProtocolError: a name out of order or repeated, outside the
                prefix, or outside the offsets; a prefix outside the prefix.
        """
        names = [o.name for o in page.objects]
        if names and not self._ordered:
            for name in names:
                self._inside(name, name)
        elif names:
            first, last = names[0], names[-1]
            if self._last is not None and first <= self._last:
                self._fail(f"listed {_show(first)} after {_show(self._last)}")
            # One C-level pass: this runs on every page of a 100k listing.
            if not all(map(operator.lt, names, islice(names, 1, None))):
                bad = next(i for i in range(1, len(names)) if names[i] <= names[i - 1])
                self._fail(f"listed {_show(names[bad])} after {_show(names[bad - 1])}")
            # In order, the first and last name bound all others: every
            # string between two that start with the prefix starts with it.
            self._inside(first, last)
            self._last = last
        for prefix in page.prefixes:
            if not prefix.startswith(self._prefix):
                self._fail(f"listed the prefix {_show(prefix)}, which is not under the prefix")
        return page

    def _inside(self, low: str, high: str) -> None:
        """Check that names from ``low`` to ``high`` lie under the prefix and
        inside the offsets."""
        for name in (low, high):
            if not name.startswith(self._prefix):
                self._fail(f"listed {_show(name)}, which is not under the prefix")
        if self._start is not None and low < self._start:
            self._fail(f"listed {_show(low)}, below the start offset {_show(self._start)}")
        if self._end is not None and high >= self._end:
            self._fail(f"listed {_show(high)}, at or past the end offset {_show(self._end)}")

    def _fail(self, what: str) -> None:
        where = describe("list", self._bucket, self._prefix, self._scheme)
        raise ProtocolError(f"{where} failed: the server {what}; a listing must name each "
                            "object once, in order, under the prefix and inside the range "
                            "asked", operation="list", bucket=self._bucket, name=self._prefix)


def _show(name: str) -> str:
    return repr(name if len(name) <= _SHOWN else name[:_SHOWN] + "...")
