"""The filesystem's changes to the store: ``pipe_file``, ``put_file``,
``rm_file``, ``rm``, ``touch``, ``copy``, ``cp_file`` and ``mv``.

Each write is the store's, all or nothing; whatever it touched (even one
that failed: a lost answer may hide a write that happened) is forgotten
by the filesystem's recent metadata.
"""

from __future__ import annotations

import asyncio
import os
from glob import has_magic
from typing import Any

import fsspec.asyn
from fsspec.callbacks import DEFAULT_CALLBACK, Callback

from .._core.concurrency.window import gather_bounded
from .._core.errors import InvalidArgument, NotFound, PreconditionFailed
from .._core.storage.protocol import delete_all
from ._base import FileSystemBase
from ._listing import entry_of
from ._paths import join
from ._transfers import put_file

__all__ = ["TouchRefused", "WriteMethods"]


class TouchRefused(InvalidArgument, NotImplementedError):
    """``touch(path, truncate=False)`` of an existing object on an object
    store: its time cannot be updated without rewriting its bytes. A
    ``ValueError`` (s3fs raises one there) and a ``NotImplementedError``
    (fsspec's default touch and gcsfs raise one)."""


def _a_folder(url: str) -> str:
    return f"{url}: a folder (rm(path, recursive=True) removes what is under it)"


def _utime(path: str) -> bool:
    """Set the file's times to now; False if there is no such file."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


class WriteMethods(FileSystemBase):
    """fsspec's write, delete and copy methods of ``AiofluxFileSystem``."""

    async def _pipe_file(self, path: str, value: bytes, mode: str = "overwrite",
                         **kwargs: Any) -> None:
        bucket, name = self._split(path)
        try:
            await self.store.write(bucket, name, value,
                                   if_generation_match=0 if mode == "create" else None,
                                   content_type=kwargs.get("content_type",
                                                           "application/octet-stream"),
                                   metadata=kwargs.get("metadata"))
        except PreconditionFailed as exc:
            raise FileExistsError(f"{self.unstrip_protocol(path)}: exists (mode 'create' "
                                  "writes only a new object)") from exc
        finally:  # even a failed write may have published (a lost answer)
            self.recent.forget(join(self.scheme, bucket, name))

    async def _put_file(self, lpath: str, rpath: str, mode: str = "overwrite",
                        callback: Callback = DEFAULT_CALLBACK, **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            return
        bucket, name = self._split(rpath)
        try:
            await put_file(self.store, lpath, bucket, name, create=mode == "create",
                           content_type=kwargs.get("content_type", "application/octet-stream"),
                           metadata=kwargs.get("metadata"), budget=self._blocks,
                           streaming=self._streaming_puts, callback=callback)
        except PreconditionFailed as exc:
            raise FileExistsError(f"{self.unstrip_protocol(rpath)}: exists (mode 'create' "
                                  "writes only a new object)") from exc
        finally:  # even a failed write may have published (a lost answer)
            self.recent.forget(join(self.scheme, bucket, name))

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        bucket, name = self._split(path)
        try:
            await self.store.delete(bucket, name)
        finally:
            self.recent.forget(join(self.scheme, bucket, name))

    async def _rm(self, path: str | list[str], recursive: bool = False,
                  maxdepth: int | None = None, batch_size: int | None = None,
                  **kwargs: Any) -> None:
        """Remove objects (fsspec's ``rm``), of one path or a list alike.

        Each path given (or each match of a pattern) must be an object, or
        with ``recursive`` an object or a folder: otherwise nothing is
        removed and the first refused path is said. What only the deletes
        can find is not refused: an object another writer removes between
        the check and its delete counts as removed, one written under a
        folder after its listing stays, and a delete that fails (a
        permission, the network) raises with what was removed before it
        gone.

        Args:
            path: a path, a pattern or a list of them.
            recursive: also remove folders and everything under them
                (folder placeholder objects, ``folder/``, included).
            maxdepth: how deep ``recursive`` goes.
            batch_size: deletes in flight at once (default 64).
            **kwargs: ignored, as fsspec's ``rm`` does.

        Raises:
            FileNotFoundError: a path that names nothing, or a pattern that
                matches nothing; nothing was removed.
            IsADirectoryError: without ``recursive``, a folder; nothing was
                removed.
            InvalidURL: a bucket's root without ``recursive``.
        """
        given = [path] if isinstance(path, str) else list(path)
        if not given:
            raise FileNotFoundError("rm: no path given")
        if len(given) == 1 and not recursive and not has_magic(given[0]):
            # One object: its delete finds out, and nothing else is removed.
            await self._rm_one(self._strip_protocol(given[0]))
            return
        limit = self.store.config.max_concurrency
        expanded = await gather_bounded(
            (self._expanded(p, recursive, maxdepth) for p in given), limit)
        refused = [r for r in expanded if isinstance(r, OSError)]
        paths = sorted({p for found in expanded if isinstance(found, list) for p in found})
        if not refused and not recursive:
            checked = await gather_bounded((self._not_an_object(p) for p in paths), limit)
            refused = [r for r in checked if r is not None]
        if refused:
            raise refused[0]
        by_bucket: dict[str, list[str]] = {}
        for p in paths:
            bucket, name = self._split(p, folder=True)
            if name:
                by_bucket.setdefault(bucket, []).append(name)
                if recursive and self.scheme != "file":
                    # A folder's placeholder object ("d/", as consoles make
                    # them) is named without its slash in the expansion: left
                    # behind, the folder still existed after rm -r.
                    by_bucket[bucket].append(name + "/")
        # Folders in the expansion are no objects, nor files' names
        # placeholders: their deletes find nothing, which delete_all counts as
        # done (batched where the store can).
        try:
            for bucket, names in by_bucket.items():
                await delete_all(self.store, bucket, names, concurrency=batch_size or 64)
        finally:
            # Forgetting a tree scans every entry: once, not once a path.
            if len(paths) == 1:
                self.recent.forget(paths[0], tree=True)
            else:
                self.recent.clear()

    async def _rm_one(self, path: str) -> None:
        """``rm`` of one object: a missing one is said, as LocalFileSystem and gcsfs say it."""
        try:
            await self._rm_file(path)
        except NotFound as exc:
            if await self._isdir(path):  # it said "no such object" of a folder
                raise IsADirectoryError(_a_folder(self.unstrip_protocol(path))) from exc
            raise FileNotFoundError(f"{self.unstrip_protocol(path)}: no such "
                                    "object") from exc

    async def _expanded(self, path: str, recursive: bool,
                        maxdepth: int | None) -> list[str] | OSError:
        """What ``rm`` removes of one path (or pattern) it was given; the
        refusal, if it names nothing."""
        try:
            found: list[str] = await self._expand_path(path, recursive=recursive,
                                                       maxdepth=maxdepth)
        except FileNotFoundError:
            return FileNotFoundError(f"{self.unstrip_protocol(path)}: no such object"
                                     f"{' or folder' if recursive else ''}; nothing was "
                                     "removed")
        return found

    async def _not_an_object(self, path: str) -> OSError | None:
        """Why ``rm`` without ``recursive`` refuses ``path``, if it does."""
        bucket, name = self._split(path)  # a bucket's root is refused as for one path
        entry = await entry_of(self.store, self.recent, self.scheme, bucket, name)
        if entry is None or entry["type"] != "file":
            # A refusal is the store's word, not a listing's from before
            # another writer made the object (one path's delete asks the store).
            self.recent.forget(join(self.scheme, bucket, name))
            entry = await entry_of(self.store, self.recent, self.scheme, bucket, name)
        if entry is None:
            return FileNotFoundError(f"{self.unstrip_protocol(path)}: no such object; "
                                     "nothing was removed")
        if entry["type"] != "file":
            return IsADirectoryError(_a_folder(self.unstrip_protocol(path)) +
                                     "; nothing was removed")
        return None

    async def _touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        bucket, name = self._split(path)
        if truncate:
            await self._pipe_file(path, b"", **kwargs)
            return
        local = join(self.scheme, bucket, name)  # on file://, the file's own path
        if self.scheme == "file" and await asyncio.to_thread(_utime, local):
            self.recent.forget(local)
            return
        try:
            # Only where nothing is: an object written meanwhile keeps its bytes.
            await self._pipe_file(path, b"", mode="create", **kwargs)
        except FileExistsError:
            if self.scheme == "file" and await asyncio.to_thread(_utime, local):
                self.recent.forget(local)
                return
            raise self._untouchable(path) from None

    def _untouchable(self, path: str) -> TouchRefused:
        return TouchRefused(
            f"touch {self.unstrip_protocol(path)}: truncate=False cannot update the time of "
            "an existing object: an object store's time is the write's, and changing it "
            "would rewrite the object as a new version; nothing was written (touch(path) "
            "replaces it with an empty object)")

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        """Make an empty object, or (``truncate=False``) update a file's time
        (fsspec's ``touch``).

        Inside ``fs.transaction`` the empty object is staged as a file
        opened for writing (``"xb"`` without ``truncate``) and published
        at the commit, as fsspec's own ``touch`` stages it.

        Args:
            path: the object.
            truncate: replace whatever is there with an empty object. False:
                an empty object is made only where none exists (create-only:
                one another writer made meanwhile keeps its bytes); an
                existing file's modification time is set to now on
                ``file://``, as fsspec's LocalFileSystem does, and refused on
                object stores.
            **kwargs: ``content_type`` and ``metadata`` of a new object.

        Raises:
            InvalidArgument: ``truncate=False`` of an existing object on an
                object store (its time cannot change without its bytes),
                nothing written: a ``ValueError``, as s3fs raises there, and
                a ``NotImplementedError``, as fsspec's default and gcsfs
                raise (a :class:`TouchRefused`).
        """
        if not self._intrans:
            fsspec.asyn.sync(self.loop, self._touch, path, truncate=truncate, **kwargs)
            return
        # In a transaction the empty object is a file published at the commit,
        # as fsspec's own touch stages it ("xb": create-only, at the commit too).
        bucket, name = self._split(path)
        local = join(self.scheme, bucket, name)
        if not truncate and self.scheme == "file" and _utime(local):
            self.recent.forget(local)  # a time is no file to stage (nor is it in fsspec's)
            return
        try:
            with self.open(path, "wb" if truncate else "xb", **kwargs):
                pass
        except FileExistsError:
            if truncate or self.scheme == "file":
                raise
            raise self._untouchable(path) from None

    async def _copy(self, path1: str | list[str], path2: str | list[str],
                    recursive: bool = False, on_error: str | None = None,
                    maxdepth: int | None = None, batch_size: int | None = None,
                    **kwargs: Any) -> None:
        # fsspec drops a recursive copy's FileNotFoundErrors by default, for
        # the folders its expansion names: _cp_file passes over those
        # itself, and a missing destination bucket's NotFound must not be
        # dropped with them (the copy of a tree would copy nothing and return).
        await super()._copy(path1, path2, recursive=recursive, on_error=on_error or "raise",
                            maxdepth=maxdepth, batch_size=batch_size, **kwargs)

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        bucket, name = self._split(path1)
        dest_bucket, dest_name = self._split(path2)
        try:
            await self.store.copy(bucket, name, dest_bucket, dest_name)
        except NotFound as exc:
            # A recursive copy (and so mv) names the folders it walks too:
            # nothing to copy (folders are their objects' names). mv failed
            # there, leaving both trees.
            if await self._isdir(path1):
                return
            if not await self.store.exists(bucket, name):
                raise
            # The source is there: the destination's bucket is what is missing,
            # which the store's error (naming the source) did not say.
            raise NotFound(f"copy {self.unstrip_protocol(path1)} to "
                           f"{self.unstrip_protocol(path2)} failed: the destination was not "
                           f"found (no bucket {dest_bucket!r}?); the source exists",
                           operation="copy", bucket=dest_bucket, name=dest_name,
                           status=exc.status, reason=exc.reason) from exc
        finally:
            self.recent.forget(join(self.scheme, dest_bucket, dest_name))

    def mv(self, path1: str | list[str], path2: str | list[str], recursive: bool = False,
           maxdepth: int | None = None, **kwargs: Any) -> None:
        """Move objects: copy them, then remove what was copied (fsspec's ``mv``).

        Not atomic: an error in the copy leaves the source whole, one in the
        removal leaves both.

        Args:
            path1: the source (a glob, a folder with ``recursive``), or a list.
            path2: the destination, or a list (one for each of ``path1``'s).
            recursive: move what is under folders too.
            maxdepth: how deep ``recursive`` goes: the copy takes, and the
                removal removes, only that far (fsspec's removed the whole
                tree, what it never copied with it).
            **kwargs: ignored, as fsspec's ``mv`` does.

        Raises:
            InvalidArgument: with ``recursive``, a destination inside its
                source (its copies were removed with it); nothing is moved.
            NotFound: a missing source (also ``FileNotFoundError``).
        """
        sources = [self._strip_protocol(p) for p in
                   ([path1] if isinstance(path1, str) else path1)]
        dests = [self._strip_protocol(p) for p in
                 ([path2] if isinstance(path2, str) else path2)]
        if isinstance(path1, list) and isinstance(path2, list):
            # A path onto itself (spelled as a URL and as a path, with a
            # trailing slash...) is left out: a move would copy it, then remove it.
            pairs = [(s, d) for s, d in zip(sources, dests, strict=True) if s != d]
            sources, dests = [s for s, _ in pairs], [d for _, d in pairs]
            path1, path2 = sources, dests
        elif sources == dests:
            return
        if not sources:
            return
        if recursive:
            for source in sources:
                inside = [d for d in dests if d.startswith(source.rstrip("/") + "/")]
                if inside:
                    raise InvalidArgument(
                        f"mv {self.unstrip_protocol(source)} to "
                        f"{self.unstrip_protocol(inside[0])}: cannot move a folder into "
                        "itself (its copies would be removed with it); nothing was moved")
        self.copy(path1, path2, recursive=recursive, maxdepth=maxdepth, on_error="raise")
        self.rm(path1, recursive=recursive, maxdepth=maxdepth)
