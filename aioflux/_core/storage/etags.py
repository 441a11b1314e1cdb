"""The ETags behind the generation numbers a store hands out.

S3 and Azure version an object by its ETag, a string; aioflux's records
carry an int (``ObjectInfo.generation``). An ETag of the common shape is
encoded in its generation and decoded back (the store's ``etag_of``); any
other is hashed, and only this memory maps the hash back to the ETag that
a pinned read, copy or conditional delete must send.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..errors import NotFound
from ..records.types import ObjectInfo

__all__ = ["EtagMemory"]

# Hashed ETags remembered, at most. Past it the oldest go first: a
# generation forgotten is looked up again by a stat (see ``lookup``).
DEFAULT_LIMIT = 65_536


class EtagMemory:
    """Hashed ETags by generation, bounded; decodable ones are never stored.

    Args:
        generation_of: the store's ETag -> generation (0 for no ETag).
        etag_of: the store's generation -> ETag for a decodable one, else None.
        limit: most hashed ETags held.
    """

    def __init__(self, generation_of: Callable[[str], int],
                 etag_of: Callable[[int], str | None], limit: int = DEFAULT_LIMIT) -> None:
        self._generation_of = generation_of
        self._etag_of = etag_of
        self._limit = limit
        self._hashed: dict[int, str] = {}

    def remember(self, etag: str) -> int:
        """The generation of ``etag``; a hashed one is remembered, so that
        it maps back to its ETag.

        Args:
            etag: an ETag.

        Returns:
            Its generation.
        """
        generation = self._generation_of(etag)
        if generation and self._etag_of(generation) is None:
            hashed = self._hashed
            if generation not in hashed and len(hashed) >= self._limit:
                del hashed[next(iter(hashed))]  # the oldest (dicts keep insertion order)
            hashed[generation] = etag
        return generation

    def known(self, generation: int) -> str | None:
        """The ETag ``generation`` stands for, decoded or remembered; None
        when neither (a hashed generation not seen, or forgotten)."""
        return self._etag_of(generation) or self._hashed.get(generation)

    async def lookup(self, generation: int,
                     stat: Callable[[], Awaitable[ObjectInfo]]) -> str | None:
        """The ETag ``generation`` stands for: decoded, remembered, or the
        object's own (``stat()``, which remembers it) if its generation is
        that; None when it is not, or the object is gone.

        Args:
            generation: a generation.
            stat: the object's stat.

        Returns:
            The ETag, or None.
        """
        etag = self.known(generation)
        if etag is not None:
            return etag
        try:
            info = await stat()
        except NotFound:
            return None
        return self._hashed.get(generation) if info.generation == generation else None
