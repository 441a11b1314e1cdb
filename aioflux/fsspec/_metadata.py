"""The filesystem's questions about paths: ``info``, ``ls``, ``find``,
``exists``, the folders object stores do not have (``mkdir``), and an
object's version and time (``ukey``, ``checksum``, ``modified``).

Answers come from ``_listing`` (the store, or what it said lately).
"""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

import fsspec.asyn

from .._core.errors import NotFound
from ._base import FileSystemBase
from ._entries import file_entry
from ._listing import entry_of, list_folder, list_tree
from ._paths import join

__all__ = ["MetadataMethods"]


class MetadataMethods(FileSystemBase):
    """fsspec's metadata methods of ``AiofluxFileSystem``."""

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        bucket, name = self._split(path, folder=True)
        entry = await entry_of(self.store, self.recent, self.scheme, bucket, name)
        if entry is None:
            raise FileNotFoundError(f"{self.unstrip_protocol(path)}: no such object or folder")
        return entry

    async def _ls(self, path: str, detail: bool = True, refresh: bool = False,
                  **kwargs: Any) -> list[Any]:
        bucket, name = self._split(path, folder=True)
        # gcsfs's prefix=: only the names in the folder that start with it.
        within = kwargs.get("prefix") or ""
        out = await list_folder(self.store, self.recent, self.scheme, bucket, name,
                                refresh=refresh, within=within)
        if not out and name:
            info = await self._info(path)  # a file lists as itself
            if info["type"] == "file" and not within:
                out = [info]
            # else: a folder that only held its placeholder lists empty.
        return out if detail else [e["name"] for e in out]

    async def _find(self, path: str, maxdepth: int | None = None, withdirs: bool = False,
                    detail: bool = False, **kwargs: Any) -> Any:
        # gcsfs's and s3fs's prefix=: only the names under path that start
        # with it (fsspec's own find dropped it, and listed everything).
        within = kwargs.pop("prefix", None) or ""
        if maxdepth is not None and not within:
            return await super()._find(path, maxdepth=maxdepth, withdirs=withdirs,
                                       detail=detail, **kwargs)
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        bucket, name = self._split(path, folder=True)
        found = await list_tree(self.store, self.recent, self.scheme, bucket, name,
                                withdirs=withdirs, within=within)
        if maxdepth is not None:  # levels below the path, as fsspec counts them
            depth = len(join(self.scheme, bucket, name))
            found = {k: v for k, v in found.items() if k[depth:].count("/") <= maxdepth}
        names = sorted(found)
        return {n: found[n] for n in names} if detail else names

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        try:
            await self._info(path)
        except (FileNotFoundError, NotFound):
            return False
        return True

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Object stores have no folders: nothing to make (a bucket must exist).
        Files keep that rule (the store removes the folders its deletes empty)."""

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Object stores have no folders: nothing to make."""

    def ukey(self, path: str) -> str:
        """The object's version: changes whenever its content does.

        Args:
            path: the object.

        Returns:
            Its version token (else its crc32c, else its size), as text.

        Raises:
            NotFound: no such object.
        """
        info = self.info(path)
        return str(info.get("version") or info.get("crc32c") or info["size"])

    def modified(self, path: str) -> datetime.datetime:
        """When the object was last written (its metadata's ``updated``).

        Args:
            path: the object.

        Returns:
            A timezone-aware UTC datetime.

        Raises:
            NotFound: no such object.
            IsADirectoryError: a folder (object stores keep no time for one).
            ValueError: the store reported no time of the object.
        """
        info = self.info(path)
        if info["type"] != "file":
            raise IsADirectoryError(f"{self.unstrip_protocol(path)}: a folder has no time")
        if not info.get("updated"):
            # A GCS listing names no time (it asks for four fields), and
            # info answered from one: the object's stat has it.
            info = fsspec.asyn.sync(self.loop, self._stat_entry, path)
        if not info.get("updated"):
            raise ValueError(f"{self.unstrip_protocol(path)}: the store reported no time")
        return datetime.datetime.fromisoformat(info["updated"])

    async def _stat_entry(self, path: str) -> dict[str, Any]:
        """The object's entry as its stat gives it (every field), remembered."""
        bucket, name = self._split(path)
        entry = file_entry(self.scheme, await self.store.stat(bucket, name))
        self.recent.remember_stat(join(self.scheme, bucket, name), entry)
        return entry

    def checksum(self, path: str) -> int:
        """An int that changes with the object's content (from its version).

        Args:
            path: the object.

        Returns:
            A non-negative int derived from :meth:`ukey`.

        Raises:
            NotFound: no such object.
        """
        # All of the key counts: its low bits alone (the last 8 characters)
        # give two versions of a file whose times are whole seconds one
        # checksum.
        digest = hashlib.sha256(self.ukey(path).encode()).digest()
        return int.from_bytes(digest[:8], "big") >> 1
