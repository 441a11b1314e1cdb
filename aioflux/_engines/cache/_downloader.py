"""``CachedDownloader``: the download planner behind a :class:`DiskCache`.

The same interface as :class:`~aioflux._engines.download.Downloader`
(``download``, ``download_many``, ``stream``, ``stats``), so the datasets
and iterables use either: each lookup goes to the cache first and only the
misses reach the planner, which still composes, batches or splits them.
A miss listed without a crc32c is read pinned to its listed version instead
(the planner reads what is there now), so that the cache never stores newer
bytes of the same size under the listed version.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Iterator, Sequence
from contextlib import aclosing

from ..._core.concurrency.window import gather_bounded
from ..._core.concurrency.window import window as bounded
from ..._core.records.types import ObjectInfo
from ..._core.storage.protocol import ObjectStore
from ..compose import MAX_COMPOSE_SOURCES, plan_batches
from ..download import PLAN_CHUNK, Data, Downloader, DownloadOptions
from ._disk import DiskCache, Replaced, read_listed

__all__ = ["CachedDownloader"]


class CachedDownloader(Downloader):
    """A Downloader that looks every object up in ``cache`` first.

    ``stats`` counts only what was downloaded (the misses); ``cache.stats``
    counts hits, misses, corrupt entries and evictions.

    Args:
        client: the store (its semaphore bounds every request).
        options: planner settings.
        cache: the disk cache.
    """

    def __init__(self, client: ObjectStore, options: DownloadOptions | None = None, *,
                 cache: DiskCache) -> None:
        super().__init__(client, options)
        self.cache = cache

    async def _fetch(self, objects: list[ObjectInfo]) -> list[Data | Replaced]:
        # The cache checks a miss against its listed crc32c before storing
        # it. One without (an S3 listing, a file another tool wrote) is read
        # at its listed version: the planner's direct read returns what is
        # there now, and newer bytes of the same size were stored under the
        # listed version, served to every later epoch of the dataset. (The
        # planner's ranged read of a large one pins its version already.)
        threshold = self.options.ranged_threshold
        pinned = [i for i, o in enumerate(objects) if o.crc32c is None and o.generation
                  and not (threshold and o.size >= threshold)]
        if not pinned:
            return list(await super().download_many(objects))
        rest = sorted(set(range(len(objects))).difference(pinned))
        jobs = [self._pinned(objects[i]) for i in pinned]
        if rest:
            jobs.append(self._planned([objects[i] for i in rest]))
        out: list[Data | Replaced] = [b""] * len(objects)
        done = [data for datas in await gather_bounded(jobs) for data in datas]
        for i, data in zip([*pinned, *rest], done, strict=True):
            out[i] = data
        return out

    async def _planned(self, objects: list[ObjectInfo]) -> list[Data | Replaced]:
        return list(await super().download_many(objects))

    async def _pinned(self, obj: ObjectInfo) -> list[Data | Replaced]:
        """``obj`` at its listed version, read as the planner reads (see read_listed)."""
        return [await read_listed(obj, self._read_at)]

    async def _read_at(self, obj: ObjectInfo, generation: int | None) -> bytes:
        """The planner's direct read (its permits, its hedging), at ``generation``."""
        def read() -> Awaitable[bytes]:
            return self.client.read(obj.bucket, obj.name, generation=generation)

        if self.options.hedge_after is None:
            async with self._direct_gate.get():
                data = await read()
        else:
            data = await self._hedger.run(read)
        self.stats.direct += 1
        self.stats.bytes += len(data)
        return data

    async def download(self, obj: ObjectInfo) -> Data:
        """One object, from the cache or downloaded (ranged if large) and stored.

        Args:
            obj: the object (from a listing or ``stat``: its version keys the entry).

        Returns:
            Its bytes.

        Raises:
            StorageError: the download failed after retries.
        """
        return await self.cache.get(obj, self._fetch)

    async def download_many(self, objects: Sequence[ObjectInfo]) -> list[Data]:
        """Objects from the cache; the misses downloaded concurrently and stored.

        Args:
            objects: what to read.

        Returns:
            The bytes of each object, in input order.

        Raises:
            StorageError: a download failed (the others are cancelled first).
        """
        return await self.cache.get_many(list(objects), self._fetch)

    async def stream(self, objects: Sequence[ObjectInfo], *, window: int = 64,
                     ordered: bool = True) -> AsyncGenerator[tuple[ObjectInfo, Data], None]:
        """Read ``objects`` keeping about ``window`` objects in flight, and
        at most ``options.prefetch_bytes`` read and not yet yielded.

        Objects go to the cache in groups of up to 32 (a composite's worth)
        and an eighth of that budget, so a group's misses are still planned
        together.

        Args:
            objects: what to read.
            window: objects in flight.
            ordered: yield in input order; else as groups complete.

        Yields:
            ``(ObjectInfo, bytes)`` for every object once.

        Raises:
            StorageError: a download failed (pending ones are cancelled first).
        """
        step = max(1, min(MAX_COMPOSE_SOURCES, window))
        budget = self.options.prefetch_bytes
        # Runs of consecutive objects as the compose planner cuts them: a group
        # is held whole until it is yielded, so large objects go in small ones.
        def groups() -> Iterator[list[ObjectInfo]]:
            # A chunk at a time, as the window takes them (all at once would be
            # a record per object of an epoch's share: ~430 bytes each).
            for base in range(0, len(objects), PLAN_CHUNK):
                chunk = objects[base:base + PLAN_CHUNK]
                for batch in plan_batches(chunk, step, max(1, budget // 8)):
                    yield [chunk[i] for i in batch]

        async with aclosing(bounded(groups(), self.download_many,
                                    limit=window, ordered=ordered, weight=len,
                                    max_bytes=budget, nbytes=_listed_bytes,
                                    measure=_read_bytes)) as done:
            async for group, datas in done:
                for obj, data in zip(group, datas, strict=True):
                    yield obj, data


def _listed_bytes(group: list[ObjectInfo]) -> int:
    return sum(obj.size for obj in group)


def _read_bytes(datas: list[Data]) -> int:
    return sum(map(len, datas))
