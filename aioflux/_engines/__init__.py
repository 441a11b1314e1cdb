"""Layer 3: pipelines over any :class:`~aioflux._core.storage.protocol.ObjectStore`.

Parallel listing, the download planner (compose, ranged and direct reads),
the streaming writer and reader, ``stream``, composite clean-up and zstd.
The layer test forbids these modules to import a backend: they see a store
only through the protocol and its ``features``."""
