"""A Hub repo's listing in name order, from its tree API.

The tree API answers one folder at a time (``recursive=false``), a page
of entries after another (each next page named by a ``Link: <...>;
rel="next"`` header). The walk reads a folder's pages, sorts its entries
by the name a listing gives them (a folder ``d`` as ``d/``: every name
under it sorts where ``d/`` does, after ``d.txt`` and before ``d0``), and
goes into a folder only when its turn comes and names under it are asked
for; with the ``/`` delimiter a folder is a prefix and is never opened.
So a listing never rests on the order the Hub answers in, and it holds
one folder's entries per level at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from .._core.checks.stated_counts import count_of
from .._core.errors import NotFound, ProtocolError, describe
from .._net.failures import Op
from .._net.web import Pin, generation_of

__all__ = ["Entry", "TreeListing", "etag_generation"]

#: One page of a folder's entries and the URL of the next (or None).
FetchPage = Callable[[str], Awaitable[tuple[list[object], str | None]]]


def etag_generation(etag: str) -> int:
    """The generation a Hub ETag stands for: the content's id, quoted or
    not, weak or not (``W/"..."``), is one version (0: none)."""
    text = etag.strip().removeprefix("W/").strip().strip('"')
    return generation_of(Pin(f'"{text}"', None)) if text else 0


@dataclass(frozen=True, slots=True)
class Entry:
    """A tree entry: a file (with its size and generation) or a folder."""

    path: str
    folder: bool
    size: int = 0
    generation: int = 0

    @property
    def key(self) -> str:
        """Where it sorts among a listing's names."""
        return self.path + "/" if self.folder else self.path


def entry_of(record: object, op: Op) -> Entry:
    """One record of the tree API, checked."""
    if not isinstance(record, dict) or not isinstance(record.get("path"), str):
        raise _bad(op, "a tree entry without a path")
    path = record["path"].strip("/")
    kind = record.get("type")
    if kind == "directory":
        return Entry(path, True)
    if kind != "file":
        raise _bad(op, f"a tree entry of type {kind!r}")
    lfs = record.get("lfs")
    oid = lfs.get("oid") if isinstance(lfs, dict) else record.get("oid")
    size = count_of(str(record.get("size")))
    if size is None or not isinstance(oid, str):
        raise _bad(op, f"the tree entry of {path!r} has no size or oid")
    return Entry(path, False, size, etag_generation(oid))


def _bad(op: Op, what: str) -> ProtocolError:
    return ProtocolError(f"{describe(op.operation, op.bucket, op.name, op.scheme)} failed: the "
                         f"Hub answered {what}", operation=op.operation, bucket=op.bucket,
                         name=op.name)


class TreeListing:
    """The names of one listing call, in order (see the module doc).

    Args:
        op: the listing, for errors.
        folder_url: the tree API URL of a folder ("" the root).
        fetch: GETs one page URL: its records and the next page's URL.
        prefix, delimiter, start_offset, end_offset: the listing asked.
    """

    def __init__(self, op: Op, folder_url: Callable[[str], str], fetch: FetchPage,
                 prefix: str, delimiter: str | None, start_offset: str | None,
                 end_offset: str | None) -> None:
        self._op = op
        self._folder_url = folder_url
        self._fetch = fetch
        self._prefix = prefix
        self._delimiter = delimiter
        self._start = start_offset
        self._end = end_offset

    async def names(self) -> AsyncIterator[tuple[Entry, bool]]:
        """``(entry, is_prefix)`` in name order: files, and with a delimiter
        the prefixes (an entry whose ``path`` is the prefix itself)."""
        prefix = self._prefix
        root = prefix.rpartition("/")[0]
        last_prefix: str | None = None
        async for entry in self._walk(root):
            name = entry.key
            if self._end is not None and name >= self._end:
                return
            delimiter = self._delimiter
            if delimiter:
                cut = name.find(delimiter, len(prefix))
                if cut != -1:
                    common = name[:cut + len(delimiter)]
                    if common != last_prefix and (self._start is None or common >= self._start
                                                  or self._start.startswith(common)):
                        last_prefix = common
                        yield Entry(common, False), True
                    continue
            if not entry.folder and (self._start is None or name >= self._start):
                yield entry, False

    async def _walk(self, folder: str) -> AsyncIterator[Entry]:
        """Entries under ``folder`` that the listing may need, in name order:
        a subfolder's own entries in its place, unless the delimiter makes
        it a prefix (then the folder itself)."""
        entries = await self._folder(folder)
        for entry in sorted(entries, key=lambda e: e.key):
            key = entry.key
            if not (key.startswith(self._prefix) or self._prefix.startswith(key)):
                continue
            if self._start is not None and key < self._start and not self._start.startswith(key):
                continue  # all of it sorts below the start
            if self._end is not None and key >= self._end:
                return
            if not entry.folder:
                yield entry
            elif self._delimiter == "/" and key.startswith(self._prefix):
                yield entry  # a prefix of this listing: not opened
            else:
                async for inner in self._walk(entry.path):
                    yield inner

    async def _folder(self, folder: str) -> list[Entry]:
        """Every entry of one folder (all its pages)."""
        found: list[Entry] = []
        url: str | None = self._folder_url(folder)
        seen: set[str] = set()
        while url is not None:
            if url in seen:
                raise _bad(self._op, "a tree page's next link it had already given")
            seen.add(url)
            try:
                records, url = await self._fetch(url)
            except NotFound:
                if not folder:
                    raise  # the repo or revision
                return []  # no such folder: nothing under the prefix
            found.extend(entry_of(record, self._op) for record in records)
        return found
