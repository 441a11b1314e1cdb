"""Read-only ``http://`` and ``https://`` URLs (public datasets on web servers)."""

from ._store import TOKEN_ENV, HttpStore

__all__ = ["TOKEN_ENV", "HttpStore"]
