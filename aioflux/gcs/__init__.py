"""The Google Cloud Storage backend (``gs://`` URLs): :class:`AsyncClient`.

JSON API for metadata, listing and reads (lean HTTP/1.1 for media), XML
multipart and JSON resumable uploads, server-side compose.
"""

from ._client import AsyncClient

__all__ = ["AsyncClient"]
