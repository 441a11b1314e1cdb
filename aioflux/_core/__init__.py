"""Layer 1: what every other layer shares, and nothing above it.

Its rooms, lowest first (``tests/test_layers.py`` holds them to that
order; rooms on one line import nothing of each other):

- here: the typed errors (:mod:`.errors`) and the credentials cut from
  their text (:mod:`.secrets`), the request-aware ``Auth`` protocol
  (:mod:`.auth`), ``client.stats`` (:mod:`.metrics`), deprecation warnings
  (:mod:`.deprecation`);
- :mod:`.integrity` (crc32c, MD5); :mod:`.concurrency` (the portal, the
  in-flight window, locks, thread shares);
- :mod:`.records` (URLs, ``ObjectInfo``...);
- :mod:`.checks` (arguments, a server's counts, listing pages);
  :mod:`.memory` (buffers, shared columns, ``ObjectIndex``);
- :mod:`.settings` (``ClientConfig``, retries, writer and reader options);
- :mod:`.storage` (``ObjectStore``, ``StoreBase``);
- :mod:`.rate`, the request-rate controller, which imports nothing of
  the rest.

Imports only the standard library, its own modules and ``aioflux._version``.
"""
