"""Layer 1: what every other layer shares, and nothing above it.

Errors, settings, retry policy, crc32c, records (``ObjectInfo``...), URLs,
argument checks, the request-aware ``Auth`` protocol, the storage protocol
(``ObjectStore``), the in-flight window, and the portal (the background
event-loop thread that sync code drives). Imports only the standard
library, its own modules and ``aioflux._version``.
"""
