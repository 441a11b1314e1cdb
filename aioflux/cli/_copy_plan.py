"""What ``aioflux cp`` copies: the object a URL names, or with ``-r`` the
objects of its folder as the listing brings them, each with its destination.

``cp -r`` holds no plan of the whole folder: a dataset of millions of
objects took GBs and copied nothing until its last page was listed. Its
items come a listing page at a time, and the copies start on the first
page. So every check that must come before any copy is made on the two
URLs (and an object or two), never on the whole listing:

* onto itself: the destination folder is the source folder, on the same
  store and bucket, so every object would be its own destination (refused
  on the first object listed);
* into itself: one folder inside the other. Refused when the part of the
  source whose copies land inside the source holds any object (``cp -r a
  a/b`` once ``a/b/`` holds one, ``cp -r a/b a`` once ``a/b/b/`` does):
  a copy could overwrite a source before it is read, or be listed and
  copied again. Otherwise (``cp -r a a/b`` into an empty ``a/b/``, or one
  holding its placeholder ``a/b/`` alone), the listing leaves out the
  destination folder, where only the copies are. On the filesystem the
  real paths decide, so a symbolic link on either side changes nothing.

What is decided object by object is refused for that object alone, as GNU
``cp -r`` does: a name the destination cannot hold (on disk ``a//b``) or a
local destination that is a device, FIFO or symbolic link is one line on
stderr, nothing is written there, the rest is copied and the exit code is 1.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

from .._core.errors import InvalidArgument, InvalidURL, NotFound
from .._core.records.types import ObjectInfo
from .._core.records.urls import StoreURL, folder_prefix, format_url, validate_object_name
from .._core.storage.protocol import ObjectStore
from ..local._files import path_of
from ._common import first_under, has_folders, list_named, require_match
from ._registry import UsageError
from ._text import one_line

__all__ = ["Folder", "Item", "refuse", "single"]


@dataclass(frozen=True)
class Item:
    """One object to copy and its destination."""

    src: ObjectInfo  # the source object, as stat or the listing saw it
    dst: StoreURL
    # From a listing, which names no content type or custom metadata (S3's
    # has no place for them, and GCS's is asked for only the fields that
    # every listing needs).
    listed: bool = False

    @property
    def src_url(self) -> StoreURL:
        return StoreURL(self.src.bucket, self.src.name, self.src.scheme)


async def single(store: ObjectStore, src: StoreURL, dst: StoreURL) -> Item:
    """The object ``src`` names (``cp`` without ``-r``) and its destination.

    Raises:
        UsageError: ``src`` names a bucket or a folder.
        NotFound: no such object.
    """
    if not src.name or src.name.endswith("/"):
        raise UsageError(f"{src} names a bucket or folder; use -r")
    try:
        info = await store.stat(src.bucket, src.name)
    except NotFound as missing:
        if not has_folders(src):
            raise
        try:
            folder = await first_under(store, src.bucket, folder_prefix(src.name))
        except NotFound:
            raise missing from None
        if folder is not None:  # a directory, or a folder of objects
            raise UsageError(f"{src} names a folder; use -r") from None
        raise
    return Item(info, _into(dst, src.name.rsplit("/", 1)[-1]))


def refuse(item: Item) -> None:
    """Fail if ``item``, copied alone, would be copied onto itself or onto
    a local device, FIFO or link: before any copy, nothing was copied.

    Raises:
        InvalidArgument: the copy is refused.
    """
    _refuse_onto_itself(item)
    _refuse_the_same_file(item)
    why = _special_destination(item)
    if why is not None:
        raise InvalidArgument(f"cp {item.src_url}: {why}; nothing was copied")


def _refuse_the_same_file(item: Item) -> None:
    """As GNU ``cp`` refuses ("are the same file"): a local file reached by
    another path (through a symbolic link to its directory, or a hard
    link). Copied, it was replaced by a new file of its own bytes (a hard
    link broken) and reported as "copied 1 file(s)"."""
    if item.src.scheme != "file" or item.dst.scheme != "file":
        return
    target = path_of(item.dst.bucket, item.dst.name)
    try:
        same = os.path.samefile(path_of(item.src.bucket, item.src.name), target)
    except OSError:
        return  # no destination yet (or no source: the copy fails on it)
    if same:
        raise InvalidArgument(f"cp {item.src_url}: the destination {target} is the same file; "
                              "nothing was copied")


def _refuse_onto_itself(item: Item) -> None:
    """As S3 refuses and ``gcloud storage cp`` does ("Source URL matches
    destination URL"): GCS would rewrite it as a new generation and the
    filesystem replace it, and either reported a copy that made nothing new."""
    if item.src_url == item.dst:
        raise InvalidArgument(f"cp {item.src_url}: the source and destination are the "
                              "same object; nothing was copied")


def _special_destination(item: Item) -> str | None:
    """Why a local destination that is there and is not a regular file or a
    directory is refused (None: it is not): a file is written beside it and
    renamed over it, so a device, FIFO or symbolic link (``/dev/null``,
    ``/dev/stdout``) was replaced by a regular file holding the data."""
    if item.dst.scheme != "file":
        return None
    path = path_of(item.dst.bucket, item.dst.name)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return (f"the destination {path} is a symbolic link, which cp would replace, not "
                f"write through; name its target ({os.path.realpath(path)})")
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return (f"the destination {path} is not a regular file (a device or FIFO), which cp "
                "would replace; use 'aioflux cat' to write into it")
    return None


def _into(dst: StoreURL, basename: str) -> StoreURL:
    # "cp x gs://b", "cp x gs://b/dir/" and "cp gs://b/x localdir" keep the
    # source's base name.
    if not dst.name or dst.name.endswith("/"):
        return dst.join(basename)
    if dst.scheme == "file" and os.path.isdir(f"/{dst.bucket}/{dst.name}"):
        return dst.join(basename)
    return dst


class Folder:
    """``cp -r``'s plan, a listing page at a time: :meth:`check` before any
    copy, then :meth:`items`.

    Args:
        store: the store of ``src``.
        src: the URL copied (its object, or its folder).
        dst: where to.
        same_store: ``dst`` is on ``store``.
    """

    def __init__(self, store: ObjectStore, src: StoreURL, dst: StoreURL, *,
                 same_store: bool) -> None:
        self._store, self._src, self._dst = store, src, dst
        self._prefix, self._into = folder_prefix(src.name), folder_prefix(dst.name)
        self._same_store = same_store
        # A folder the listing goes around: the destination inside the source.
        self._leave_out: str | None = None
        self.refused = 0  # objects refused alone (exit code 1)

    async def check(self) -> None:
        """Refuse a folder copied into itself, before any copy (see the
        module's docstring); otherwise leave out of the listing a destination
        folder inside the source, where only the copies will be.

        Raises:
            InvalidArgument: the copy is refused; nothing was copied.
        """
        prefix = self._prefix
        overlap = self._overlap()
        if overlap is None:
            await self._leave_out_an_alias()
            return
        inward, rel = overlap
        if not rel:
            self._refuse_a_directory_onto_itself()
            return  # onto itself is refused on the first object
        # Named as the source's listing names them: with inward, every copy
        # lands in ``inner``; otherwise the sources under it land back in
        # the source folder (prefix "a/b/" into "a/" puts a/b/b/x on a/b/x).
        inner = prefix + rel
        # An empty folder made in a console holds its placeholder alone
        # ("a/b/"): that counts as empty.
        first = await first_under(self._store, self._src.bucket, inner, but_placeholder=inward)
        if first is None:
            if inward:
                self._leave_out = inner
            return
        # The pair that shows it: a source whose destination is a source.
        rest = first.name[len(inner):]
        if inward:
            # ``first`` is the destination of prefix + rest; it lands itself
            # deeper in ``inner``.
            source, target = prefix + rest, first.name
            lands = inner + first.name[len(prefix):]
            other = source
        else:
            source, target = first.name, prefix + rest
            lands = other = target
        try:
            await self._store.stat(self._src.bucket, other)
        except NotFound:
            raise InvalidArgument(
                f"cp {first.url}: its destination {self._url(lands)} is inside the folder "
                "copied (a folder copied into itself), where cp would list it and copy it "
                "again; nothing was copied") from None
        raise InvalidArgument(
            f"cp {self._url(source)}: its destination {self._url(target)} is also a source of "
            "this copy (a folder copied into itself), and could be overwritten before it is "
            "read; nothing was copied")

    def _refuse_a_directory_onto_itself(self) -> None:
        """Refuse a directory whose destination is itself under another path
        (``cp -r data link``, ``link -> data``): each file would be its own
        destination, which its URLs, spelt apart, do not show, so every
        file was replaced by a copy of itself and cp reported them copied.

        Raises:
            InvalidArgument: the copy is refused; nothing was copied.
        """
        src, dst = self._src, self._dst
        if src.scheme != "file" or src == dst:
            return  # the same URLs: refused on the first object, by its URL
        path = path_of(src.bucket, src.name.rstrip("/"))
        if os.path.isdir(path):
            raise InvalidArgument(
                f"cp {src}: the destination {dst} is the same directory "
                f"({os.path.realpath(path)}); nothing was copied")

    async def _leave_out_an_alias(self) -> None:
        """Across two stores, a bucket of the same name may be one bucket
        reached two ways (GCS through its S3 endpoint; our emulator's two
        faces): a copy into a folder of the source (``cp -r gs://b/a
        s3://b/a/c``) landed where the listing came to it later, and copied
        it again, and again (1100 objects made 100,000). That folder, when
        it holds nothing yet, is left out of the listing: it would hold only
        the copies. Holding anything, it is copied, as another store's
        objects are no copies."""
        src, dst, prefix, into = self._src, self._dst, self._prefix, self._into
        if self._same_store or "file" in (src.scheme, dst.scheme) or src.bucket != dst.bucket \
                or into == prefix or not into.startswith(prefix):
            return
        if await first_under(self._store, src.bucket, into, but_placeholder=True) is None:
            self._leave_out = into

    def _overlap(self) -> tuple[bool, str] | None:
        """Where the destination folder is inside the source folder, ``(True,
        rel)``: it is the source's ``rel`` (``""``: the source itself);
        where the source is inside the destination's ``rel``, ``(False,
        rel)``; None when neither holds the other.

        On the filesystem, where the paths lead decides, not how they are
        spelt: through a symbolic link (``cp -r data link/c``, ``link ->
        data``) the copies landed in ``data/c/``, which the listing, walking
        the tree as it goes, came to and copied again, into ``data/c/c/``.
        """
        src, dst, prefix, into = self._src, self._dst, self._prefix, self._into
        if not self._same_store:
            return None
        if src.scheme == "file" and dst.scheme == "file":
            source = os.path.realpath(path_of(src.bucket, src.name.rstrip("/")))
            target = os.path.realpath(path_of(dst.bucket, dst.name.rstrip("/")))
            if target == source:
                return True, ""
            if target.startswith(source.rstrip("/") + "/"):
                return True, target[len(source.rstrip("/")) + 1:] + "/"
            if source.startswith(target.rstrip("/") + "/"):
                return False, source[len(target.rstrip("/")) + 1:] + "/"
            return None
        if src.bucket != dst.bucket:
            return None
        if into.startswith(prefix):
            return True, into[len(prefix):]
        if prefix.startswith(into):
            return False, prefix[len(into):]
        return None

    def _url(self, name: str) -> str:
        return format_url(self._src.scheme, self._src.bucket, name)

    async def items(self) -> AsyncIterator[Item]:
        """What to copy, as the listing brings it.

        Yields:
            The items, in name order; the object the URL names when no
            object of its folder is copied.

        Raises:
            InvalidArgument: a copy onto itself (on the first item, before
                any copy).
            NotFound: the URL matches nothing.
        """
        src, dst, prefix, into = self._src, self._dst, self._prefix, self._into
        exact: ObjectInfo | None = None
        matched = False
        async for obj in list_named(self._store, src, leave_out=self._leave_out):
            if obj.name == src.name and not src.name.endswith("/"):
                exact = obj
                matched = True
                continue
            # The name under the folder, exactly: StoreURL.join drops empty
            # segments, and "src//a" and "src/a" (or "src/d/" and "src/d")
            # would overwrite one destination. The folder's own placeholder
            # ("src/", listed for "src/") is the destination folder's, not an
            # object "src" to copy to an empty file.
            name = into + obj.name[len(prefix):]
            if not name:
                continue  # a bucket's root has no placeholder to copy
            matched = True
            if dst.scheme == "file" and name.endswith("/"):
                # A folder placeholder is no file (as gcloud storage skips them).
                print(f"aioflux cp: skipped {one_line(obj.url)}: a folder placeholder is no file",
                      file=sys.stderr)
                continue
            if exact is not None:
                # The folder's contents land in dst itself: the object 'a' has no
                # place there that could not collide with them.
                print(f"aioflux cp: skipped {one_line(exact.url)}: an object and a folder "
                      "share the name; copy it without -r", file=sys.stderr)
                exact = None
            item = Item(obj, StoreURL(dst.bucket, name, dst.scheme), listed=True)
            # Either every object of the folder is its own destination (the
            # same folder of one bucket) or none is: this fails on the first.
            _refuse_onto_itself(item)
            why = self._refused(item)
            if why is not None:
                self.refused += 1
                print(f"aioflux cp: {one_line(why)}; not copied", file=sys.stderr)
                continue
            yield item
        if exact is not None:
            # No folder to copy: the object alone, as without -r.
            item = Item(exact, _into(dst, src.name.rsplit("/", 1)[-1]))
            refuse(item)
            yield item
        # An empty bucket or directory copies nothing; so does a folder of placeholders alone.
        require_match("cp", src, matched)

    @staticmethod
    def _refused(item: Item) -> str | None:
        try:
            # A name the destination cannot hold (on disk "a//b" or "./a").
            dst = item.dst
            validate_object_name(dst.name, arg=f"destination of {item.src.url}",
                                 scheme=dst.scheme,
                                 path=f"/{dst.bucket}/{dst.name}" if dst.scheme == "file" else None)
        except (InvalidArgument, InvalidURL) as exc:
            return str(exc)
        why = _special_destination(item)
        return None if why is None else f"cp {item.src_url}: {why}"
