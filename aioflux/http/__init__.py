"""Read-only ``http://`` and ``https://`` URLs (public datasets on web servers).

A bearer token is taken from ``$AIOFLUX_HTTP_TOKEN`` when ``HttpStore`` is
given none.
"""

from ._store import HttpStore

__all__ = ["HttpStore"]
