"""What every page of a listing must be, whatever the server answered.

A store lists names in ascending order, each once, all under the prefix and
inside the offsets asked. The parallel lister splits key ranges on that
promise, and ``rm -r``, ``clean``, ``cp`` and the datasets act on what a
listing returns. A server or proxy that broke it would make a listing skip
or repeat names, or hand back names the caller never asked for (which
``aioflux rm -r s3://bucket/tmp/`` would then delete). So each page is
checked before anyone sees it, and a page that breaks the promise is a
:class:`ProtocolError` naming the listing, never a silently wrong listing.

A listing must also move forward: a server that answered every page with
a page token it had already given (or a marker that does not advance)
would keep a listing asking forever, its memory growing. A page token
seen twice in one listing, a part-number marker that does not rise, or
upload markers that go back or repeat, are a :class:`ProtocolError` too.
An empty page with a fresh token is legal (GCS documents them: a page may
end on a time limit before it found a name), but not without end: after
:data:`MOST_EMPTY_PAGES` of them in a row a listing is a
:class:`ProtocolError`, so a server answering only fresh tokens cannot keep
it asking forever.
"""

from __future__ import annotations

import operator
from itertools import islice
from typing import NoReturn

from ..errors import ProtocolError, describe
from ..records.types import ListPage

__all__ = ["MOST_EMPTY_PAGES", "ListingCheck", "PartListingCheck", "UploadListingCheck"]

# Names in messages are the server's: cut them short.
_SHOWN = 80

# S3 and GCS's XML API number parts 1..10000: a part-number marker that
# must rise ends any part listing within 10000 pages.
_MOST_PARTS = 10_000

#: Empty pages (no name, no prefix) a listing accepts in a row. GCS ends a
#: page on a time limit, so a listing can cross deleted or unmatched names
#: on empty pages; 10,000 of them (minutes of requests) is far past any seen.
MOST_EMPTY_PAGES = 10_000

_ONCE_IN_ORDER = ("a listing must name each object once, in order, under the prefix and "
                  "inside the range asked")
_FORWARD = "a listing's pages must move forward"
_ONCE = "a listing must name each object once"


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
        once: without an order, still hold each name to once in its page
            and the page before (Azure lists in an order of its own: UTF-16
            code units, or a hierarchical namespace's paths, ``a/x`` before
            ``a-b``): a page repeated or overlapping its neighbour is caught,
            in the memory of two pages (a set of every name listed grew with
            the container: 10 M blobs held ~1 GB).
    """

    __slots__ = ("_bucket", "_empty", "_end", "_last", "_ordered", "_prefix", "_scheme",
                 "_seen", "_start", "_tokens")

    def __init__(self, scheme: str, bucket: str, prefix: str, start_offset: str | None,
                 end_offset: str | None, *, ordered: bool = True, once: bool = False) -> None:
        self._scheme = scheme
        self._ordered = ordered
        self._seen: set[str] | None = set() if once and not ordered else None
        self._bucket = bucket
        self._prefix = prefix
        self._start = start_offset
        self._end = end_offset
        self._last: str | None = None  # the last name of the pages so far
        # Tokens are opaque: only a repeat proves a loop (a page of a
        # 100k listing holds 1000 names, so this set stays ~100 strings).
        self._tokens: set[str] = set()
        self._empty = 0  # empty pages in a row

    def page(self, page: ListPage) -> ListPage:
        """``page``, once its names keep the promise and its next page token
        (``page.next_page_token``, None on the last page) is a new one.

        Raises:
            ProtocolError: a name out of order or repeated, outside the
                prefix, or outside the offsets; a prefix outside the prefix;
                a next page token already given in this listing; more than
                :data:`MOST_EMPTY_PAGES` empty pages in a row.
        """
        token = page.next_page_token
        if token is not None:
            if token in self._tokens:
                # Never the token itself in the message: it is opaque server data.
                self._fail("answered a page token it had already given in this listing",
                           _FORWARD)
            self._tokens.add(token)
        if page.objects or page.prefixes or token is None:
            self._empty = 0
        else:
            self._empty += 1
            if self._empty > MOST_EMPTY_PAGES:
                self._fail(f"answered {self._empty} empty pages in a row", _FORWARD)
        names = [o.name for o in page.objects]
        if names and not self._ordered:
            seen = self._seen
            current: set[str] = set()
            for name in names:
                self._inside(name, name)
                if seen is not None:
                    if name in seen or name in current:
                        self._fail(f"listed {_show(name)} twice", _ONCE)
                    current.add(name)
            if seen is not None:
                self._seen = current
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

    def _fail(self, what: str, rule: str = _ONCE_IN_ORDER) -> NoReturn:
        _refuse(self._scheme, "list", self._bucket, self._prefix, what, rule)


class PartListingCheck:
    """Checks the pages of one ListParts listing (S3's, GCS's XML API's), in
    order: part numbers rise across the pages, each past the marker sent,
    and each truncated page's ``NextPartNumberMarker`` rises.

    Args:
        scheme: the store's URL scheme, for messages.
        bucket: the bucket.
        name: the object the upload writes.
    """

    __slots__ = ("_bucket", "_last", "_marker", "_name", "_scheme")

    def __init__(self, scheme: str, bucket: str, name: str) -> None:
        self._scheme = scheme
        self._bucket = bucket
        self._name = name
        self._marker = 0  # the marker the page being read was asked after
        self._last = 0  # the highest part number listed, or the marker

    def part(self, value: str) -> int:
        """The part number ``value`` of the next listed part.

        Raises:
            ProtocolError: not a part number, or not above the part listed
                before it (or the marker sent).
        """
        number = self._number(value, "part number")
        if number <= self._last:
            self._fail(f"listed part {number} after part {self._last}",
                       "a part listing must name each part once, in ascending order")
        self._last = number
        return number

    def next_marker(self, value: str) -> str:
        """The ``part-number-marker`` to send for the next page, from a
        truncated page's ``NextPartNumberMarker``.

        Raises:
            ProtocolError: not a part number (none: the rest could not be
                asked for, the listing would end short), or not above the
                marker of the page it ends.
        """
        marker = self._number(value, "part number marker")
        if marker <= self._marker:
            self._fail(f"answered the next part number marker {marker} after the marker "
                       f"{self._marker}", _FORWARD)
        self._marker = marker
        self._last = max(self._last, marker)
        return str(marker)

    def _number(self, value: str, what: str) -> int:
        value = value.strip()
        # isdigit alone would pass "²", int alone "1_0" and "+1".
        if not (value.isascii() and value.isdigit()) or not 0 < int(value) <= _MOST_PARTS:
            self._fail(f"answered the {what} {_show(value)}",
                       f"part numbers are 1 to {_MOST_PARTS}")
        return int(value)

    def _fail(self, what: str, rule: str) -> NoReturn:
        _refuse(self._scheme, "list parts", self._bucket, self._name, what, rule)


class UploadListingCheck:
    """Checks the pages of one ListMultipartUploads listing (S3's, GCS's XML
    API's), in order: every key under the prefix, no upload listed twice,
    no key below the key marker a page was asked after, and each truncated
    page's markers going forward, never back to a pair already given.

    Keys within a page are not held to an order: AWS lists a key's uploads
    by start time (their ids in no order) and moto lists uploads in the
    order they were started, whatever their keys.

    Args:
        scheme: the store's URL scheme, for messages.
        bucket: the bucket.
        prefix: every key must start with this.
    """

    __slots__ = ("_bucket", "_marker", "_markers", "_prefix", "_scheme", "_seen")

    def __init__(self, scheme: str, bucket: str, prefix: str) -> None:
        self._scheme = scheme
        self._bucket = bucket
        self._prefix = prefix
        self._marker = ""  # the key marker the page being read was asked after
        # Both hold what the caller keeps anyway (the uploads listed) or less.
        self._seen: set[tuple[str, str]] = set()
        self._markers: set[tuple[str, str]] = set()

    def upload(self, key: str, upload_id: str) -> None:
        """Check the next listed upload, ``upload_id`` of ``key``.

        Raises:
            ProtocolError: ``key`` is not under the prefix or is below the
                key marker sent, or this upload was listed already.
        """
        if not key.startswith(self._prefix):
            self._fail(f"listed an upload of {_show(key)}, which is not under the prefix",
                       "an upload listing must name only keys under the prefix asked")
        if key < self._marker:
            self._fail(f"listed an upload of {_show(key)} after the key marker "
                       f"{_show(self._marker)}", _FORWARD)
        if (key, upload_id) in self._seen:
            # Upload ids are the server's handles: never in a message.
            self._fail(f"listed an upload of {_show(key)} twice",
                       "an upload listing must name each upload once")
        self._seen.add((key, upload_id))

    def next_markers(self, key_marker: str, upload_id_marker: str) -> None:
        """Check a truncated page's ``NextKeyMarker`` and ``NextUploadIdMarker``.

        Raises:
            ProtocolError: no key marker (the rest could not be asked for:
                the listing would end short), the key marker is below the
                one before it, or the pair was given already.
        """
        if not key_marker:
            self._fail("said more uploads follow but named no key marker", _FORWARD)
        if key_marker < self._marker:
            self._fail(f"answered the next key marker {_show(key_marker)} after "
                       f"{_show(self._marker)}", _FORWARD)
        if (key_marker, upload_id_marker) in self._markers:
            self._fail(f"answered the next markers (key {_show(key_marker)}) twice", _FORWARD)
        self._markers.add((key_marker, upload_id_marker))
        self._marker = key_marker

    def _fail(self, what: str, rule: str) -> NoReturn:
        _refuse(self._scheme, "list multipart uploads", self._bucket, self._prefix, what, rule)


def _refuse(scheme: str, operation: str, bucket: str, name: str, what: str,
            rule: str) -> NoReturn:
    where = describe(operation, bucket, name, scheme)
    raise ProtocolError(f"{where} failed: the server {what}; {rule}", operation=operation,
                        bucket=bucket, name=name)


def _show(name: str) -> str:
    return repr(name if len(name) <= _SHOWN else name[:_SHOWN] + "...")
