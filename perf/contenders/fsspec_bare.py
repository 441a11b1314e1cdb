"""The ceiling of the fsspec scenario's ``cat`` and ``ranges``: the same calls
on a filesystem that is nothing but the HTTP.

``BareFS`` answers the four calls ``fsspec_ops.py`` makes (``find``,
``cat``, ``cat_file``, ``cat_ranges``) with the GCS JSON API on one aiohttp
session on uvloop, in a thread of its own as fsspec's filesystems run their
loop, with ``max_concurrency`` (128, aioflux's default) requests in flight:
listing pages of 1,000 names, a media GET per object or per range. No
retries, no checks of any kind, no coalescing of ranges, no error mapping.

Against it, the profile's floor and the client's CPU show apart: what a
filesystem adds on top of the bare requests at the same bound is what
aioflux's ratio to it measures, and a peer's ratio to it is the most any
client at that bound could gain over that peer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp

T = TypeVar("T")

_PAGE = 1000


class BareFS:
    """``find`` / ``cat`` / ``cat_file`` / ``cat_ranges`` over bare aiohttp."""

    def __init__(self, endpoint: str, max_concurrency: int = 128) -> None:
        import uvloop

        self._endpoint = endpoint.rstrip("/")
        self._limit = max_concurrency
        self._loop = uvloop.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        self._session: aiohttp.ClientSession = self._call(self._open())
        self._sem = asyncio.Semaphore(max_concurrency)

    async def _open(self) -> aiohttp.ClientSession:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self._limit),
                                     timeout=timeout)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _media(self, path: str) -> str:
        bucket, _, name = path.partition("/")
        return f"{self._endpoint}/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media"

    async def _get(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        headers = {} if start is None else {"Range": f"bytes={start}-{end - 1}"}
        async with self._sem, self._session.get(self._media(path), headers=headers) as resp:
            resp.raise_for_status()
            return await resp.read()

    async def _find(self, folder: str) -> list[str]:
        bucket, _, prefix = folder.partition("/")
        url = f"{self._endpoint}/storage/v1/b/{bucket}/o"
        params = {"prefix": prefix.rstrip("/") + "/", "maxResults": str(_PAGE),
                  "fields": "items(name,size),nextPageToken"}
        names: list[str] = []
        while True:
            async with self._session.get(url, params=params) as resp:
                resp.raise_for_status()
                page = await resp.json()
            names.extend(f"{bucket}/{item['name']}" for item in page.get("items", ()))
            token = page.get("nextPageToken")
            if not token:
                return names
            params["pageToken"] = token

    def find(self, folder: str) -> list[str]:
        return self._call(self._find(folder))

    def cat(self, paths: list[str]) -> dict[str, bytes]:
        async def all_of() -> list[bytes]:
            return await asyncio.gather(*(self._get(p) for p in paths))

        return dict(zip(paths, self._call(all_of()), strict=True))

    def cat_file(self, path: str, start: int, end: int) -> bytes:
        return self._call(self._get(path, start, end))

    def cat_ranges(self, paths: Sequence[str], starts: Sequence[int],
                   ends: Sequence[int]) -> list[bytes]:
        async def all_of() -> list[bytes]:
            return await asyncio.gather(*(self._get(p, s, e)
                                          for p, s, e in zip(paths, starts, ends, strict=True)))

        return self._call(all_of())
