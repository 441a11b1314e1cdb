"""The filesystem's changes to the store: ``pipe_file``, ``put_file``,
``rm_file``, ``rm``, ``copy``, ``cp_file`` and ``mv``.

Each write is the store's, all or nothing; whatever it touched (even one
that failed: a lost answer may hide a write that happened) is forgotten
by the filesystem's recent metadata.
"""

from __future__ import annotations

import os
from typing import Any

from fsspec.callbacks import DEFAULT_CALLBACK, Callback

from .._core.errors import InvalidArgument, NotFound, PreconditionFailed
from .._core.store import delete_all
from ._base import FileSystemBase
from ._paths import join
from ._transfers import put_file

__all__ = ["WriteMethods"]


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
        paths = await self._expand_path(path, recursive=recursive, maxdepth=maxdepth)
        if len(paths) == 1 and not recursive:
            # One path: a missing one is said, as LocalFileSystem and gcsfs say it.
            try:
                await self._rm_file(paths[0])
            except NotFound as exc:
                if await self._isdir(paths[0]):  # it said "no such object" of a folder
                    raise IsADirectoryError(f"{self.unstrip_protocol(paths[0])}: a folder "
                                            "(rm(path, recursive=True) removes what is "
                                            "under it)") from exc
                raise FileNotFoundError(f"{self.unstrip_protocol(paths[0])}: no such "
                                        "object") from exc
            return
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

    async def _copy(self, path1: str | list[str], path2: str | list[str],
                    recursive: bool = False, on_error: str | None = None,
                    maxdepth: int | None = None, batch_size: int | None = None,
                    **kwargs: Any) -> None:
        # fsspec drops a recursive copy's FileNotFoundErrors by default, for
        # the folders its expansion names: _cp_file passes over those
        # itself, and a missing destination bucket's NotFound was dropped
        # with them (the copy of a tree copied nothing and returned).
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
            # trailing slash...) was copied onto itself, then removed.
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
