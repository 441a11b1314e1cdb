"""What the filesystem learned of its objects lately: folder listings
(fsspec's ``dircache``, filled by ``ls`` and ``find``) and stats.

``info``, ``exists``, ``isfile`` and ``open(..., "rb")`` answer from it
without a request: pyarrow asks ``isfile`` then opens every file of a
dataset it has just listed, two requests per file one after the other,
before reading any of it. Entries expire (fsspec's
``listings_expiry_time``, default :data:`EXPIRY_S`) and the filesystem
forgets what its own writes, copies and deletes touch. A file opened
from an entry reads the version the entry names, and stats again if that
version is gone (see ``ObjectReader``'s ``recent``), so a stale entry
costs a request, never a mix of versions.

Memory is bounded: at most :data:`MAX_ENTRIES` listed entries (a bigger
tree is not remembered; older listings go first) and ``_MAX_STATS``
stats, and expired listings are dropped as new ones come (fsspec's own
``dircache`` drops one only when it is asked for again).

The filesystem's loop thread writes here while callers' threads read
(pyarrow opens files from several): every walk is over a copy.
"""

from __future__ import annotations

import time
from typing import Any

from fsspec.dircache import DirCache

__all__ = ["EXPIRY_S", "MAX_ENTRIES", "Listings", "RecentMetadata", "parent"]

# Long enough for one pyarrow or pandas call to list then open what it
# listed; short enough that another writer's change shows up soon.
EXPIRY_S = 10.0
# Listed entries kept at most, about 0.7 KB each: a find of more is not
# remembered (its caller holds it anyway), and older listings make room.
MAX_ENTRIES = 100_000
# Stats kept at most (the oldest go first).
_MAX_STATS = 10_000
# Expired listings are looked for at most this often (seconds).
_SWEEP_S = 1.0


def parent(path: str) -> str:
    """The folder holding ``path`` (``""`` above a bucket)."""
    return path.rpartition("/")[0]


class Listings(DirCache):  # type: ignore[misc]
    """fsspec's ``dircache``, whose times go with their listings.

    fsspec's keeps the time of every folder it ever held, dropped or
    expired: a long job listing ever new folders grew it without bound.
    """

    def __getitem__(self, item: str) -> list[dict[str, Any]]:
        try:
            return super().__getitem__(item)  # type: ignore[no-any-return]
        except KeyError:
            self._times.pop(item, None)  # expired, perhaps: fsspec dropped the listing
            raise

    def __delitem__(self, key: str) -> None:
        self._times.pop(key, None)
        super().__delitem__(key)

    def clear(self) -> None:
        super().clear()
        self._times.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.use_listings_cache, self.listings_expiry_time, self.max_paths)


class RecentMetadata:
    """Recent listings and stats of one filesystem, keyed by fsspec path.

    Args:
        dircache: the filesystem's ``dircache``, a :class:`Listings` (its listings; its
            ``use_listings_cache`` and ``listings_expiry_time`` rule the
            stats too).
    """

    def __init__(self, dircache: Listings) -> None:
        self.listings = dircache
        self._stats: dict[str, tuple[float, dict[str, Any]]] = {}
        self._by_name: dict[str, tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]] = {}
        # Entries of each listing remembered, oldest first.
        self._sizes: dict[str, int] = {}
        self._swept = time.monotonic()

    @property
    def enabled(self) -> bool:
        return bool(self.listings.use_listings_cache)

    def _fresh(self, at: float) -> bool:
        expiry = self.listings.listings_expiry_time
        return expiry is None or time.time() - at <= expiry

    def entry(self, path: str) -> dict[str, Any] | None:
        """The entry of ``path`` (a file's, or a folder's), or None if unknown.

        Raises:
            FileNotFoundError: a recent listing of its folder lacks it.
        """
        if not self.enabled:
            return None
        stat = self._stats.get(path)
        if stat is not None:
            if self._fresh(stat[0]):
                return stat[1]
            self._stats.pop(path, None)
        siblings = self._named(parent(path))
        if siblings is not None and path in siblings:
            return siblings[path]
        if siblings is not None:
            raise FileNotFoundError(path)
        # A listing of the path alone does not say whether an object of its
        # name is there too (which a stat would give: the object wins).
        return None

    def _named(self, folder: str) -> dict[str, dict[str, Any]] | None:
        """The recent listing of ``folder`` by name (made once per listing:
        pyarrow asks for each file of a folder of thousands)."""
        listing = self.listings.get(folder)
        if listing is None:
            self._by_name.pop(folder, None)  # expired, perhaps
            return None
        held = self._by_name.get(folder)
        if held is None or held[0] is not listing:
            named: dict[str, dict[str, Any]] = {}
            for entry in listing:
                # An object beside a folder of the same name wins, as in a stat.
                if entry["type"] == "file" or entry["name"] not in named:
                    named[entry["name"]] = entry
            held = (listing, named)
            self._by_name[folder] = held
        return held[1]

    def remember_listing(self, folder: str, entries: list[dict[str, Any]]) -> None:
        """``entries``: everything directly in ``folder`` (files and folders)."""
        self._make_room(len(entries))
        self._keep(folder, entries)

    def _keep(self, folder: str, entries: list[dict[str, Any]]) -> None:
        if not entries or not self.enabled or len(entries) > MAX_ENTRIES:
            return  # an object store has no empty folder to remember
        self._sizes.pop(folder, None)
        self.listings[folder] = entries
        self._sizes[folder] = len(entries)

    def _make_room(self, count: int) -> None:
        """Drop expired listings (now and then), then the oldest until
        ``count`` more entries fit."""
        now = time.monotonic()
        if now - self._swept >= _SWEEP_S:
            self._swept = now
            for folder in list(self._sizes):
                if folder not in self.listings:  # expired: fsspec's check drops it
                    self._drop_listing(folder)
        held = sum(self._sizes.values())
        for folder in list(self._sizes):
            if held + count <= MAX_ENTRIES:
                break
            held -= self._sizes.get(folder, 0)
            self._drop_listing(folder)

    def remember_tree(self, top: str, entries: list[dict[str, Any]]) -> None:
        """Remember every folder of a complete listing of the tree under ``top``.

        Args:
            top: the folder listed.
            entries: every file under it (folders are their names' parents).
        """
        if len(entries) > MAX_ENTRIES or not self.enabled:
            return
        folders: dict[str, dict[str, dict[str, Any]]] = {}
        for entry in entries:
            child, folder = entry, parent(entry["name"])
            while len(folder) >= len(top):
                known = folders.setdefault(folder, {})
                if child["name"] in known:
                    break  # this folder, and those above it, have it already
                known[child["name"]] = child
                if folder == top:
                    break
                child = {"name": folder, "size": 0, "type": "directory"}
                folder = parent(folder)
        total = sum(len(children) for children in folders.values())
        if total > MAX_ENTRIES:  # with the folders between, it may be
            return
        self._make_room(total)
        for folder, children in folders.items():
            self._keep(folder, sorted(children.values(), key=lambda e: e["name"]))

    def remember_stat(self, path: str, entry: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._stats.pop(path, None)
        self._stats[path] = (time.time(), entry)
        if len(self._stats) > _MAX_STATS:
            for oldest in list(self._stats)[:len(self._stats) - _MAX_STATS]:
                self._stats.pop(oldest, None)

    def forget(self, path: str, *, tree: bool = False) -> None:
        """Forget ``path`` and the folders above it; with ``tree``, all under it too."""
        self._stats.pop(path, None)
        if tree:
            below = path + "/"
            for key in [k for k in list(self._stats) if k.startswith(below)]:
                self._stats.pop(key, None)
            for key in [k for k in {*self._by_name, *self._sizes, *self.listings}
                        if k.startswith(below)]:
                self._drop_listing(key)
        self._drop_listing(path)
        while path:  # the folders above: what they hold changed (a folder may be gone)
            path = parent(path)
            self._drop_listing(path)
            self._stats.pop(path, None)

    def _drop_listing(self, folder: str) -> None:
        self.listings.pop(folder, None)
        self._by_name.pop(folder, None)
        self._sizes.pop(folder, None)

    def clear(self) -> None:
        self._stats.clear()
        self._by_name.clear()
        self._sizes.clear()
        self.listings.clear()
