"""What a store says of paths, for ``info``, ``ls`` and ``find``: an object's
or folder's entry, a folder's listing, a tree's, each answered from the
filesystem's recent metadata when it knows, and remembered there; and the
version of an object a recent entry names, which reads start from.

Object stores have no folders: one exists while an object lies under it
(or a console's placeholder object ``d/``), and a bucket's root always does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._core.errors import NotFound
from .._core.records.types import ObjectInfo
from .._core.records.urls import WEB_SCHEMES
from .._core.storage.protocol import ObjectStore
from .._engines.listing import iter_objects
from ._entries import file_entry, folder_entry, object_info
from ._paths import join
from ._recent import RecentMetadata

__all__ = ["entry_of", "list_folder", "list_tree", "recent_object"]


async def entry_of(store: ObjectStore, recent: RecentMetadata, scheme: str, bucket: str,
                   name: str) -> dict[str, Any] | None:
    """The entry of the object ``name``, else of the folder (``""``: the
    bucket's root); None: neither exists."""
    known = join(scheme, bucket, name)
    try:
        entry = recent.entry(known)
    except FileNotFoundError:
        return None
    if entry is not None:
        return entry
    if name:
        try:
            entry = file_entry(scheme, await store.stat(bucket, name))
        except NotFound:
            if scheme in WEB_SCHEMES:
                return None  # a web server has no folders, and no listing to ask
        else:
            recent.remember_stat(known, entry)
            return entry
    prefix = name + "/" if name else ""
    async for page in store.list(bucket, prefix, delimiter="/", page_size=1):
        if page.objects or page.prefixes or not name:
            # Remembered too: pyarrow asks three times of a dataset's folder.
            entry = folder_entry(scheme, bucket, name)
            recent.remember_stat(known, entry)
            return entry
        break
    return None


async def list_folder(store: ObjectStore, recent: RecentMetadata, scheme: str, bucket: str,
                      name: str, *, refresh: bool, within: str = "") -> list[dict[str, Any]]:
    """The entries of the folder ``name`` (``""``: the bucket's root), sorted
    by name: a copy the caller may change. Empty when nothing lies under it
    (the path may be an object's). With ``within`` (gcsfs's
    ``ls(prefix=...)``), only those whose names in it start with it."""
    folder = join(scheme, bucket, name)
    listed = None if refresh or within else recent.listings.get(folder)
    if listed is not None:
        return list(listed)
    top = name + "/" if name else ""
    out: list[dict[str, Any]] = []
    async for page in store.list(bucket, top + within, delimiter="/"):
        out.extend(file_entry(scheme, o) for o in page.objects if o.name != top)
        out.extend(folder_entry(scheme, bucket, p) for p in page.prefixes)
    out.sort(key=lambda e: e["name"])
    if out and not within:  # a part of a folder is no listing of it
        recent.remember_listing(folder, out)
        out = list(out)  # the caller's to change, not the memory's
    return out


async def list_tree(store: ObjectStore, recent: RecentMetadata, scheme: str, bucket: str,
                    name: str, *, withdirs: bool, within: str = "") -> dict[str, dict[str, Any]]:
    """The entries of every object under ``name`` and of ``name`` itself if it
    is an object, by path, from one listing without a delimiter; with
    ``withdirs``, of the folders between them too. With ``within`` (s3fs's
    and gcsfs's ``find(prefix=...)``), only of the objects whose names under
    ``name`` start with it, and the folders above them."""
    top = join(scheme, bucket, name)
    # The path may be an object too: asked beside the listing, not before it.
    stat = asyncio.ensure_future(store.stat(bucket, name)) if name and not within else None
    found: dict[str, dict[str, Any]] = {}
    under: list[dict[str, Any]] = []  # the tree, for the listings cache
    prefix = (name + "/" if name else "") + within
    try:
        # Parallel listers over key ranges: a tree of 100,000 objects is a
        # hundred pages, which one lister asked for one after the other.
        async for obj in iter_objects(store, bucket, prefix, skip_prefix=None):
            entry = file_entry(scheme, obj)
            if obj.name.endswith("/"):  # a folder placeholder
                placeholder = folder_entry(scheme, bucket, obj.name)
                under.append(placeholder)
                if withdirs:
                    found[entry["name"]] = placeholder
                continue
            under.append(entry)
            found[entry["name"]] = entry
            if withdirs:  # every folder between the path and the object
                parent = obj.name.rpartition("/")[0]
                while parent and len(parent) > len(name):
                    folder = folder_entry(scheme, bucket, parent)
                    found.setdefault(folder["name"], folder)
                    parent = parent.rpartition("/")[0]
        if stat is not None:
            try:
                found[top] = file_entry(scheme, await stat)
            except NotFound:
                if under:  # a folder, and no object of its name: both known now
                    recent.remember_stat(top, folder_entry(scheme, bucket, name))
            else:
                recent.remember_stat(top, found[top])
    finally:
        if stat is not None:
            if not stat.done():
                stat.cancel()
            elif not stat.cancelled():
                stat.exception()  # retrieved: the listing's error is the one raised
    if not within:  # a part of the tree is no listing of its folders
        recent.remember_tree(top, under)
    if withdirs and found and top not in found:  # the bucket too, as any folder
        found[top] = folder_entry(scheme, bucket, name)
    return found


def recent_object(recent: RecentMetadata, scheme: str, bucket: str, name: str, *,
                  checksummed: bool = True) -> ObjectInfo | None:
    """The object's info as a recent listing or stat gave it, if it has the
    crc32c a read is checked against (else a stat must say), or any (not
    ``checksummed``)."""
    try:
        entry = recent.entry(join(scheme, bucket, name))
    except FileNotFoundError:
        return None  # a listing may be stale: the store says
    if entry is None or entry["type"] != "file" or (
            checksummed and entry.get("crc32c") is None):
        return None
    return object_info(scheme, entry)
